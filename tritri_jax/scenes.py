"""Procedural built-in scenes: meshes that pass through themselves, for demos, tests and benchmarks.

Every function takes a resolution ``n`` and returns ``(vertices, faces)`` as numpy arrays
(``float64`` of shape ``(V, 3)``, ``int32`` of shape ``(F, 3)``); pass them to ``jnp.asarray`` with
the dtype you work in. The meshes are deterministic (the crumpled sheet takes a ``seed``).

```python
>>> from tritri_jax import scenes
>>> vertices, faces = scenes.two_spheres(8)
>>> vertices.shape, faces.shape
((228, 3), (448, 3))

```
"""

import numpy as np


def _grid_faces(rows, cols, wrap_cols=False, wrap_rows=False):
    """Triangulated (rows x cols) vertex grid, optionally periodic."""
    r_end = rows if wrap_rows else rows - 1
    c_end = cols if wrap_cols else cols - 1
    i, j = np.meshgrid(np.arange(r_end), np.arange(c_end), indexing="ij")
    i, j = i.ravel(), j.ravel()

    def index(a, b):
        return (a % rows) * cols + (b % cols)

    a, b, c, d = index(i, j), index(i, j + 1), index(i + 1, j), index(i + 1, j + 1)
    return np.concatenate([np.stack([a, b, d], 1), np.stack([a, d, c], 1)]).astype(np.int32)


def sphere(n: int = 16, radius: float = 1.0, centre=(0.0, 0.0, 0.0)):
    """A UV sphere with ``n`` latitude bands and ``2n`` longitudes: a closed mesh free of intersections."""
    lat = np.pi * np.arange(1, n) / n
    lon = 2 * np.pi * np.arange(2 * n) / (2 * n)
    theta, phi = np.meshgrid(lat, lon, indexing="ij")
    ring = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], -1).reshape(-1, 3)
    vertices = np.concatenate([[[0, 0, 1]], ring, [[0, 0, -1]]]) * radius + np.asarray(centre)
    cols = 2 * n
    body = _grid_faces(n - 1, cols, wrap_cols=True) + 1
    k = np.arange(cols)
    top = np.stack([np.zeros(cols, int), 1 + (k + 1) % cols, 1 + k], 1)
    last = 1 + (n - 2) * cols
    bottom_vertex = len(vertices) - 1
    bottom = np.stack([np.full(cols, bottom_vertex), last + k, last + (k + 1) % cols], 1)
    return vertices, np.concatenate([top, body, bottom]).astype(np.int32)


def two_spheres(n: int = 16, overlap: float = 0.5):
    """Two unit spheres whose centres are ``2 - overlap`` apart: one mesh with two components."""
    va, fa = sphere(n, centre=(-(1 - overlap / 2), 0, 0))
    vb, fb = sphere(n, centre=(1 - overlap / 2, 0.05, 0.03))
    return np.concatenate([va, vb]), np.concatenate([fa, fb + len(va)]).astype(np.int32)


def folded_sheet(n: int = 24, wrap: float = 1.2):
    """A sheet rolled around an axis by ``wrap`` turns; its radius varies across the sheet, so the
    overlapping flap passes through the layer beneath it along a curve (cloth folded through itself)."""
    s, t = np.meshgrid(np.linspace(0, 1, 2 * n), np.linspace(0, 1, n), indexing="ij")
    angle = 2 * np.pi * wrap * s
    radius = 1 + 0.35 * (t - 0.5) * np.sign(s - 0.5) + 0.05 * s
    vertices = np.stack([radius * np.cos(angle), 1.6 * t, radius * np.sin(angle)], -1).reshape(-1, 3)
    return vertices, _grid_faces(2 * n, n)


def twisted_torus(n: int = 16, twists: int = 1):
    """A torus whose elliptical tube (semi-axes 1.25 and 0.4 of the major radius) turns ``twists``
    half-turns around the loop: where the long axis points inwards, the tube passes through itself."""
    u, v = np.meshgrid(2 * np.pi * np.arange(3 * n) / (3 * n), 2 * np.pi * np.arange(n) / n, indexing="ij")
    twist = 0.5 * twists * u
    a, b = 1.25 * np.cos(v), 0.4 * np.sin(v)
    radial = a * np.cos(twist) - b * np.sin(twist)
    height = a * np.sin(twist) + b * np.cos(twist)
    r = 1.0 + radial
    vertices = np.stack([r * np.cos(u), r * np.sin(u), height], -1).reshape(-1, 3)
    return vertices, _grid_faces(3 * n, n, wrap_cols=True, wrap_rows=True)


def crumpled_sheet(n: int = 32, amplitude: float = 0.35, seed: int = 0):
    """A square sheet displaced by smooth random noise strong enough to fold it through itself."""
    rng = np.random.default_rng(seed)
    s, t = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n), indexing="ij")
    points = np.stack([s, t, np.zeros_like(s)], -1)
    for _ in range(6):
        frequency = rng.uniform(1.0, 3.0, 2) * 2 * np.pi
        phase = rng.uniform(0, 2 * np.pi, 3)
        direction = rng.normal(size=3)
        direction /= np.linalg.norm(direction)
        wave = np.sin(frequency[0] * s + phase[0]) * np.sin(frequency[1] * t + phase[1])
        points = points + amplitude * wave[..., None] * direction / 2
    return points.reshape(-1, 3), _grid_faces(n, n)


SCENES = {
    "two_spheres": two_spheres,
    "folded_sheet": folded_sheet,
    "twisted_torus": twisted_torus,
    "crumpled_sheet": crumpled_sheet,
}
"""The intersecting scenes by name (the clean ``sphere`` is not among them)."""

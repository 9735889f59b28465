"""Procedural built-in scenes: meshes that pass through themselves, for demos, tests and benchmarks.

Every function takes a resolution ``n`` and returns ``(vertices, faces)`` as numpy arrays
(``float64`` of shape ``(V, 3)``, ``int32`` of shape ``(F, 3)``); pass them to ``jnp.asarray`` with
the dtype you work in. The meshes are deterministic (the random ones take a ``seed``).

Besides the four built-in scenes (``SCENES``) there are clean closed surfaces (``sphere``, ``torus``,
``capsule``, ``knot_tube``, ``graded_torus``), ways to make them intersect (``overlapping_copies``,
``bend``, ``poke``, ``scatter_copies``, ``warp``), the stress families built from them (``stress_case``:
one family at about a given face count, drawn from a seed), which `benchmarks/stress.py` runs, and
``subdivide`` (the same surface with four times the faces, its crossings unchanged), the Klein
bottle (``klein_bottle``: closed, or punctured) and the tangles of ``tangle`` (cloth layers pushed
through each other, a sheet through a ring, ...: the cases `benchmarks/tangles.py` runs).

```python
>>> from tritri_jax import scenes
>>> vertices, faces = scenes.two_spheres(8)
>>> vertices.shape, faces.shape
((228, 3), (448, 3))

```
"""

import numpy as np

from ._deformations import bend, join_meshes, overlapping_copies, poke, scatter_copies, subdivide, warp

__all__ = [
    "SCENES",
    "STRESS_FAMILIES",
    "TANGLES",
    "bend",
    "capsule",
    "crumpled_sheet",
    "folded_sheet",
    "graded_torus",
    "join_meshes",
    "klein_bottle",
    "knot_tube",
    "overlapping_copies",
    "poke",
    "scatter_copies",
    "sphere",
    "stress_case",
    "subdivide",
    "tangle",
    "torus",
    "twisted_torus",
    "two_spheres",
    "warp",
]


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
    """A UV sphere with ``n`` latitude bands and ``2n`` longitudes: a closed mesh free of intersections.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.sphere(8)
    >>> vertices.shape, faces.shape
    ((114, 3), (224, 3))

    ```
    """
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
    """Two unit spheres whose centres are ``2 - overlap`` apart: one mesh with two components.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.two_spheres(8, overlap=0.5)
    >>> vertices.shape, faces.shape
    ((228, 3), (448, 3))

    ```
    """
    va, fa = sphere(n, centre=(-(1 - overlap / 2), 0, 0))
    vb, fb = sphere(n, centre=(1 - overlap / 2, 0.05, 0.03))
    return join_meshes((va, fa), (vb, fb))


def folded_sheet(n: int = 24, wrap: float = 1.2):
    """A sheet rolled around an axis by ``wrap`` turns; its radius varies across the sheet, so the
    overlapping flap passes through the layer beneath it along a curve (cloth folded through itself).

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.folded_sheet(12)
    >>> vertices.shape, faces.shape
    ((288, 3), (506, 3))

    ```
    """
    s, t = np.meshgrid(np.linspace(0, 1, 2 * n), np.linspace(0, 1, n), indexing="ij")
    angle = 2 * np.pi * wrap * s
    radius = 1 + 0.35 * (t - 0.5) * np.sign(s - 0.5) + 0.05 * s
    vertices = np.stack([radius * np.cos(angle), 1.6 * t, radius * np.sin(angle)], -1).reshape(-1, 3)
    return vertices, _grid_faces(2 * n, n)


def twisted_torus(n: int = 16, twists: int = 1):
    """A torus whose elliptical tube (semi-axes 1.25 and 0.4 of the major radius) turns ``twists``
    half-turns around the loop: where the long axis points inwards, the tube passes through itself.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.twisted_torus(8, twists=1)
    >>> vertices.shape, faces.shape
    ((192, 3), (384, 3))

    ```
    """
    u, v = np.meshgrid(2 * np.pi * np.arange(3 * n) / (3 * n), 2 * np.pi * np.arange(n) / n, indexing="ij")
    twist = 0.5 * twists * u
    a, b = 1.25 * np.cos(v), 0.4 * np.sin(v)
    radial = a * np.cos(twist) - b * np.sin(twist)
    height = a * np.sin(twist) + b * np.cos(twist)
    r = 1.0 + radial
    vertices = np.stack([r * np.cos(u), r * np.sin(u), height], -1).reshape(-1, 3)
    return vertices, _grid_faces(3 * n, n, wrap_cols=True, wrap_rows=True)


def crumpled_sheet(n: int = 32, amplitude: float = 0.35, seed: int = 0):
    """A square sheet displaced by smooth random noise strong enough to fold it through itself.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.crumpled_sheet(16, seed=3)
    >>> vertices.shape, faces.shape
    ((256, 3), (450, 3))

    ```
    """
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


def torus(n: int = 16, major: float = 1.0, minor: float = 0.4):
    """A torus around the ``z`` axis, ``3n`` cells around the loop and ``n`` around the tube: closed, clean.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.torus(8)
    >>> vertices.shape, faces.shape
    ((192, 3), (384, 3))

    ```
    """
    return graded_torus(n, major, minor, grading=1.0)


def graded_torus(n: int = 16, major: float = 1.0, minor: float = 0.4, grading: float = 1000.0):
    """A torus whose cells along the loop grow geometrically, the largest ``grading`` times the smallest
    (both ways from one point), so that the mesh holds long slivers beside a fine patch: a clean but
    uneven (CAD-like) surface.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.graded_torus(8, grading=1000.0)
    >>> vertices.shape, faces.shape
    ((192, 3), (384, 3))

    ```
    """
    cells = 3 * n
    half = np.arange(cells // 2 + 1) / max(cells // 2, 1)
    widths = grading ** np.concatenate([half[: cells // 2], half[cells // 2 : 0 : -1]][:cells])[:cells]
    widths = np.resize(widths, cells)
    u = 2 * np.pi * np.concatenate([[0.0], np.cumsum(widths)[:-1]]) / widths.sum()
    v = 2 * np.pi * np.arange(n) / n
    uu, vv = np.meshgrid(u, v, indexing="ij")
    r = major + minor * np.cos(vv)
    vertices = np.stack([r * np.cos(uu), r * np.sin(uu), minor * np.sin(vv)], -1).reshape(-1, 3)
    return vertices, _grid_faces(cells, n, wrap_cols=True, wrap_rows=True)


def capsule(n: int = 16, radius: float = 0.3, length: float = 2.0):
    """A cylinder of ``radius`` along ``z`` with hemispherical caps, ``length`` from cap to cap, its rings
    spaced evenly by arc length (``2n`` vertices each): a thin closed part (a leg, a handle) when
    ``radius`` is small.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.capsule(8)
    >>> vertices.shape, faces.shape
    ((306, 3), (608, 3))

    ```
    """
    straight = max(length - 2 * radius, 0.0)
    total = np.pi * radius + straight
    cols = 2 * n
    rings = max(int(round(total / (2 * np.pi * radius / cols))), 4)
    s = total * np.arange(1, rings) / rings  # arc length from the bottom pole, poles excluded
    cap = np.pi * radius / 2
    lower, upper = s < cap, s > cap + straight
    polar = np.where(lower, s / radius, np.where(upper, (s - straight) / radius, np.pi / 2))
    ring_radius = radius * np.sin(polar)
    z = np.where(lower, -straight / 2 - radius * np.cos(polar), 0.0)
    z = np.where(upper, straight / 2 - radius * np.cos(polar), z)
    z = np.where(~lower & ~upper, s - cap - straight / 2, z)
    phi = 2 * np.pi * np.arange(cols) / cols
    ring = np.stack(
        [ring_radius[:, None] * np.cos(phi), ring_radius[:, None] * np.sin(phi), np.repeat(z[:, None], cols, 1)], -1
    ).reshape(-1, 3)
    vertices = np.concatenate([[[0, 0, -length / 2]], ring, [[0, 0, length / 2]]])
    body = _grid_faces(rings - 1, cols, wrap_cols=True) + 1
    k = np.arange(cols)
    bottom = np.stack([np.zeros(cols, int), 1 + (k + 1) % cols, 1 + k], 1)  # wound as the body's rows
    last, top_vertex = 1 + (rings - 2) * cols, len(vertices) - 1
    top = np.stack([np.full(cols, top_vertex), last + k, last + (k + 1) % cols], 1)
    return vertices, np.concatenate([bottom, body, top]).astype(np.int32)


def knot_tube(n: int = 16, p: int = 2, q: int = 3, tube: float = 0.12):
    """A tube of radius ``tube`` around the ``(p, q)`` torus knot on a torus of radii 1 and 0.4
    (``(2, 3)``: the trefoil), ``8 n`` rings of ``n`` vertices: closed and, for a thin tube, clean.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.knot_tube(8, p=2, q=3)  # a trefoil tube
    >>> vertices.shape, faces.shape
    ((512, 3), (1024, 3))

    ```
    """
    t = 2 * np.pi * np.arange(8 * n) / (8 * n)
    radial = np.stack([np.cos(q * t) * np.cos(p * t), np.cos(q * t) * np.sin(p * t), np.sin(q * t)], -1)
    centre = np.stack([np.cos(p * t), np.sin(p * t), np.zeros_like(t)], -1) + 0.4 * radial
    tangent = np.roll(centre, -1, 0) - np.roll(centre, 1, 0)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    normal = radial - np.sum(radial * tangent, 1, keepdims=True) * tangent
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    binormal = np.cross(tangent, normal)
    angle = 2 * np.pi * np.arange(n) / n
    ring = np.cos(angle)[None, :, None] * normal[:, None] + np.sin(angle)[None, :, None] * binormal[:, None]
    vertices = (centre[:, None] + tube * ring).reshape(-1, 3)
    return vertices, _grid_faces(8 * n, n, wrap_cols=True, wrap_rows=True)


def klein_bottle(n: int = 16, hole: float = 0.0, radius: float = 2.0):
    """The figure-8 immersion of a Klein bottle, ``3n`` cells around its loop and ``n`` around the
    figure 8, glued with the flip ``(u + 2 pi, v) ~ (u, -v)``; it passes through itself along one
    circle of ``radius``. With ``hole > 0`` the cells within ``hole`` (radians, in the ``(u, v)``
    parameters) of a point away from that circle are removed: a punctured Klein bottle, which has an
    embedding, so its crossings can all be removed, though not by shrinking the circle. The closed
    one (``hole=0``) cannot be embedded in space: no method can remove its crossings.

    The ``v`` samples sit half a cell off the double circle, so no two vertices coincide.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.klein_bottle(8)
    >>> vertices.shape, faces.shape
    ((192, 3), (384, 3))

    ```
    """
    rows, cols = 3 * n, n
    u, v = np.meshgrid(2 * np.pi * np.arange(rows) / rows, 2 * np.pi * (np.arange(cols) + 0.5) / cols, indexing="ij")
    bulge = radius + np.cos(u / 2) * np.sin(v) - np.sin(u / 2) * np.sin(2 * v)
    height = np.sin(u / 2) * np.sin(v) + np.cos(u / 2) * np.sin(2 * v)
    vertices = np.stack([bulge * np.cos(u), bulge * np.sin(u), height], -1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")

    def index(i, j):
        glued = i == rows  # across u = 2 pi the figure 8 comes back mirrored: v -> -v
        return np.where(glued, (cols - 1 - j % cols), i * cols + j % cols)

    a, b, c, d = index(i, j), index(i + 1, j), index(i + 1, j + 1), index(i, j + 1)
    faces = np.stack([np.stack([a, b, c], -1), np.stack([a, c, d], -1)], 2).reshape(-1, 3)
    if hole > 0:
        centre_u = 2 * np.pi * (i + 0.5) / rows - np.pi
        centre_v = 2 * np.pi * (j + 1) / cols - np.pi / 2
        keep = (np.hypot(centre_u, centre_v) > hole).repeat(2)
        faces = faces[keep]
        used, faces = np.unique(faces, return_inverse=True)
        vertices, faces = vertices[used], faces.reshape(-1, 3)
    return vertices, faces.astype(np.int32)


def stress_case(family: str, target_faces: int, seed: int = 0):
    """One stress case: a mesh of the family ``family`` (one of ``STRESS_FAMILIES``) with about
    ``target_faces`` faces, its shape parameters drawn from ``seed``. Returns ``(vertices, faces)``.
    The base surface of some families changes with the seed (``overlap``: ``seed % 3``, ``sheet``:
    ``seed % 2``, ``components`` and ``warp``: ``seed % 4``); cases that share it have the same
    connectivity.

    - ``overlap``: two copies of a sphere, a torus or a trefoil tube (by seed), overlapping by 5-50 %;
    - ``fold``: a capsule bent by 1.5-3 rad on an arc tighter than its radius (a deep fold);
    - ``uneven``: two overlapping copies of a torus whose edge lengths span 1000x (slivers, fans);
    - ``poke``: a thin torus (a handle) with a bump pushed through its opposite wall;
    - ``sheet``: a crumpled square sheet with boundaries, or a sheet rolled through itself;
    - ``components``: 3-6 spheres and capsules scattered so that they overlap;
    - ``warp``: a sphere, a torus (a thin handle or a fat ring), a capsule or a flat open sheet (by
      seed) under a random smooth deformation of space (``warp``: twist, squash, bumps).

    Every case intersects itself: a draw whose parts miss each other (a torus copy threaded through
    the other's hole, say) is drawn again from the same generator, so a seed always gives one case.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.stress_case("fold", 2000, seed=0)
    >>> vertices.shape, faces.shape
    ((1010, 3), (2016, 3))

    ```
    """
    if family not in STRESS_FAMILIES:
        raise ValueError(f"unknown stress family {family!r}; expected one of {STRESS_FAMILIES}")
    from ._detect import find_intersections
    from ._stress import draw

    rng = np.random.default_rng(seed)
    for attempt in range(32):
        shape_seed = seed if attempt == 0 else int(rng.integers(2**31))
        vertices, faces = draw(family, target_faces, seed, shape_seed, rng)
        if len(find_intersections(vertices, faces)):
            return vertices, faces
    raise RuntimeError(f"stress case {family} {target_faces} {seed}: no intersecting draw in 32")


STRESS_FAMILIES = ("overlap", "fold", "uneven", "poke", "sheet", "components", "warp")
"""The families of ``stress_case``."""


SCENES = {
    "two_spheres": two_spheres,
    "folded_sheet": folded_sheet,
    "twisted_torus": twisted_torus,
    "crumpled_sheet": crumpled_sheet,
}
"""The intersecting scenes by name (the clean ``sphere`` is not among them)."""


def tangle(name: str, n: int = 16):
    """A tangle whose intersection curves local descent may not shrink (one of ``TANGLES``), at
    resolution ``n``: two layers of cloth with a closed loop (``pinch``), nested loops, a
    figure-eight loop, a curve ending on a boundary (``boundary_cut``) or running across
    (``cross``); a dome through an annulus, a sheet through a ring, a sphere poking out of the one
    around it, a tube through its own wall, and the punctured Klein bottle. Returns
    ``(vertices, faces)``.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.tangle("pinch", 12)
    >>> vertices.shape, faces.shape
    ((288, 3), (484, 3))

    ```
    """
    from ._tangles import TANGLES as generators

    if name not in generators:
        raise ValueError(f"unknown tangle {name!r}; expected one of {tuple(generators)}")
    return generators[name](n)


TANGLES = (
    "pinch",
    "nested_loops",
    "figure_eight",
    "boundary_cut",
    "cross",
    "disc_through_annulus",
    "sheet_through_ring",
    "nested_spheres",
    "tube_through_wall",
    "punctured_klein_bottle",
)
"""The names ``tangle`` takes."""

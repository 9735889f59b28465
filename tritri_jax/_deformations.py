"""Ways to make clean meshes intersect (re-exported by ``tritri_jax.scenes``): copies that overlap,
bends, pokes, scattered copies, random smooth warps of space; and ``join_meshes``, ``subdivide``."""

import numpy as np


def join_meshes(*parts):
    """Several meshes as one: ``parts`` are ``(vertices, faces)`` pairs; their vertices are stacked
    (float64) and each part's faces renumbered after the parts before it (int32). No parts give the
    empty mesh.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.join_meshes(scenes.sphere(4), scenes.torus(4))
    >>> vertices.shape, faces.shape, int(faces.max()) + 1 == len(vertices)
    ((74, 3), (144, 3), True)

    ```
    """
    if not parts:
        return np.zeros((0, 3)), np.zeros((0, 3), np.int32)
    offsets = np.cumsum([0] + [len(v) for v, _ in parts[:-1]])
    vertices = np.concatenate([np.asarray(v, np.float64).reshape(-1, 3) for v, _ in parts])
    faces = np.concatenate([np.asarray(f).reshape(-1, 3) + o for (_, f), o in zip(parts, offsets, strict=True)])
    return vertices, faces.astype(np.int32)


def _rotation(rng):
    q = rng.normal(size=4)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def overlapping_copies(vertices, faces, depth: float = 0.3, seed: int = 0):
    """Two copies of a closed mesh, the second turned at random and moved so that the two overlap by
    ``depth`` of their extent along the move (``depth`` 0.05-0.5: shallow to deep): one mesh, two
    components.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.overlapping_copies(*scenes.torus(8), depth=0.3, seed=1)
    >>> vertices.shape, faces.shape
    ((384, 3), (768, 3))

    ```
    """
    rng = np.random.default_rng(seed)
    centred = vertices - 0.5 * (vertices.min(0) + vertices.max(0))
    turned = centred @ _rotation(rng).T
    direction = rng.normal(size=3)
    direction /= np.linalg.norm(direction)
    extent = 0.5 * (np.ptp(centred @ direction) + np.ptp(turned @ direction))
    moved = turned + (1 - depth) * extent * direction
    return join_meshes((centred, faces), (moved, faces))


def subdivide(vertices, faces, times: int = 1):
    """Split every triangle into four at its edge midpoints, ``times`` times: the same surface (every
    new vertex lies on an old edge, so the geometry and its crossings are unchanged) with four times
    the faces each time. Shared edges get one midpoint, so a closed mesh stays closed.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.subdivide(*scenes.two_spheres(6), times=2)
    >>> vertices.shape, faces.shape
    ((1924, 3), (3840, 3))

    ```
    """
    vertices, faces = np.asarray(vertices, np.float64), np.asarray(faces, np.int32)
    for _ in range(times):
        edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
        unique, inverse = np.unique(edges, axis=0, return_inverse=True)
        middle = len(vertices) + inverse.reshape(-1, 3)  # the midpoints of edges (0 1), (1 2), (2 0)
        vertices = np.concatenate([vertices, 0.5 * (vertices[unique[:, 0]] + vertices[unique[:, 1]])])
        a, b, c = faces.T
        ab, bc, ca = middle.T
        faces = np.concatenate(
            [np.stack(t, axis=1) for t in ((a, ab, ca), (ab, b, bc), (ca, bc, c), (ab, bc, ca))]
        ).astype(np.int32)
    return vertices, faces


def bend(vertices, angle: float = 2.5, radius: float = 0.1, start: float = 0.0):
    """Bend a mesh along ``z`` around an axis parallel to ``y`` through ``(-radius, 0, start)``: the part
    above ``start`` turns by up to ``angle`` on an arc of ``radius``. A bend tighter than the part's
    thickness folds the inner side through itself, and past ``pi / 2`` the upper part comes down onto
    the lower one (a deep fold).

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.capsule(8)
    >>> vertices = scenes.bend(vertices, angle=2.5, radius=0.1)
    >>> vertices.shape, faces.shape
    ((306, 3), (608, 3))

    ```
    """
    x, y, z = vertices.T
    arc = max(angle * radius, 1e-12)
    s = np.clip(z - start, 0, arc)
    phi = s / radius if radius > 0 else np.zeros_like(s)
    beyond = np.maximum(z - start - arc, 0)
    distance = x + radius  # from the bend axis
    bx = -radius + distance * np.cos(phi) - beyond * np.sin(phi)
    bz = start + distance * np.sin(phi) + beyond * np.cos(phi)
    below = z <= start
    return np.stack([np.where(below, x, bx), y, np.where(below, z, bz)], -1)


def poke(vertices, faces, depth: float = 2.0, width: float = 0.4, seed: int = 0):
    """Push a smooth bump into a closed mesh at a random vertex, along its inward normal, ``depth`` times
    the mesh's thickness there, a Gaussian ``width`` times that thickness wide: past a depth of about
    1.2 the bump passes through the opposite wall.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.capsule(8)
    >>> vertices = scenes.poke(vertices, faces, depth=2.0, seed=0)
    >>> vertices.shape, faces.shape
    ((306, 3), (608, 3))

    ```
    """
    rng = np.random.default_rng(seed)
    corners = vertices[faces]
    face_normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals = np.zeros_like(vertices)
    np.add.at(normals, faces.reshape(-1), np.repeat(face_normals, 3, axis=0))
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-300)
    if np.einsum("ij,ij->", corners[:, 0], face_normals) < 0:  # faces wound inwards: the volume is negative
        normals = -normals
    centre = int(rng.integers(len(vertices)))
    inward = -normals[centre]
    along = (vertices - vertices[centre]) @ inward
    across = np.linalg.norm(vertices - vertices[centre] - along[:, None] * inward, axis=1)
    diagonal = np.linalg.norm(np.ptp(vertices, axis=0))
    facing = normals @ inward > 0.5  # the opposite wall faces away from the poked point
    opposite = (across < 0.05 * diagonal) & (along > 1e-9 * diagonal) & facing
    thickness = along[opposite].min() if opposite.any() else 0.2 * diagonal
    sigma = width * thickness
    wall = np.exp(-0.5 * (np.linalg.norm(vertices - vertices[centre], axis=1) / sigma) ** 2)
    return vertices + (depth * thickness) * wall[:, None] * inward


def scatter_copies(vertices, faces, count: int = 4, spread: float = 1.2, seed: int = 0):
    """``count`` copies of a mesh, each turned at random and placed at random in a box ``spread`` times
    the mesh's extent, so that several overlap: one mesh with ``count`` components.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.scatter_copies(*scenes.sphere(6), count=4, seed=0)
    >>> vertices.shape, faces.shape
    ((248, 3), (480, 3))

    ```
    """
    rng = np.random.default_rng(seed)
    centred = vertices - 0.5 * (vertices.min(0) + vertices.max(0))
    extent = np.ptp(centred, axis=0).max()
    parts = [centred @ _rotation(rng).T + rng.uniform(-0.5, 0.5, 3) * spread * extent for _ in range(count)]
    return join_meshes(*[(part, faces) for part in parts])


def warp(vertices, strength: float = 0.5, twist: float = 1.5, squash: float = 0.5, seed: int = 0):
    """A random smooth deformation of space, applied to a mesh's vertices: a twist about a random axis
    through the mesh's centre (turning by ``twist`` radians from one end of the mesh to the other),
    a squash across that axis (scaling one direction by ``1 - squash`` at the middle, smoothly back to 1
    at the ends: past 1 the two sides pass through each other), then three to five Gaussian bumps a
    quarter of the mesh's extent wide, each moving space by up to ``strength`` times the extent (past
    about 0.4 a bump folds the surface through itself). Weak warps keep a clean mesh clean.

    ```python
    >>> from tritri_jax import scenes
    >>> vertices, faces = scenes.torus(8)
    >>> warped = scenes.warp(vertices, strength=0.6, twist=2.0, squash=1.3, seed=0)
    >>> warped.shape == vertices.shape
    True

    ```
    """
    rng = np.random.default_rng(seed)
    vertices = np.asarray(vertices, np.float64)
    centre = 0.5 * (vertices.min(0) + vertices.max(0))
    extent = max(float(np.ptp(vertices, axis=0).max()), 1e-300)
    turn = _rotation(rng)
    x, y, z = ((vertices - centre) @ turn.T / extent).T  # the axis is z, in units of the extent
    angle = twist * z
    x, y = x * np.cos(angle) - y * np.sin(angle), x * np.sin(angle) + y * np.cos(angle)
    x = x * (1 - squash * np.exp(-0.5 * (z / 0.25) ** 2))
    points = np.stack([x, y, z], -1)
    width = 0.25
    for _ in range(int(rng.integers(3, 6))):
        at = rng.uniform(-0.5, 0.5, 3)
        push = rng.normal(size=3)
        push *= strength * rng.uniform(0.5, 1.0) / np.linalg.norm(push)
        points = points + np.exp(-0.5 * np.sum((points - at) ** 2, -1) / width**2)[:, None] * push
    return centre + (points * extent) @ turn

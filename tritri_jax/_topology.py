"""Layer 3: a mesh's topology on the host. Coincident vertices (one vertex for detection and for
untangling, the library's semantics), the mesh a solver works on (welded, without faces that cannot
move apart), and what a mesh holds: duplicate vertices, degenerate and repeated faces, boundary,
non-manifold and inconsistently oriented edges, components (``mesh_report``).
"""

from typing import NamedTuple

import numpy as np

from . import _exact
from ._mesh_energy import check_mesh

# Odd 64-bit multipliers (golden-ratio and xxHash primes) mixing a vertex's three coordinates' bits.
_MIX = tuple(np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))


def coincident(vertices) -> np.ndarray:
    """``(V,)``: for each vertex, the lowest index of a vertex at identical coordinates (itself when
    there is none). ``-0.0`` and ``0.0`` are one coordinate. Needs finite coordinates.

    Sorted by a hash of the coordinates' bits (a quarter of a three-key sort's time on 2.5M
    vertices), verified row by row; a hash collision falls back to sorting the coordinates."""
    v = np.ascontiguousarray(np.asarray(vertices) + 0.0)  # + 0.0 turns -0.0 into 0.0
    n = len(v)
    if n == 0:
        return np.zeros(0, np.int64)
    bits = v.view(f"u{v.dtype.itemsize}").astype(np.uint64)
    key = (bits[:, 0] * _MIX[0]) ^ (bits[:, 1] * _MIX[1]) ^ (bits[:, 2] * _MIX[2])
    order = np.argsort(key, kind="stable")
    ordered = v[order]
    same_key = key[order][1:] == key[order][:-1]
    same_row = np.all(ordered[1:] == ordered[:-1], axis=1)
    if np.any(same_key & ~same_row):  # a collision: two points, one hash
        order = np.lexsort(v.T[::-1])
        ordered = v[order]
        same_row = np.all(ordered[1:] == ordered[:-1], axis=1)
    # A stable sort keeps a group's indices in order, so its first row is its lowest index.
    starts = np.concatenate([[True], ~same_row])
    representative = np.empty(n, np.int64)
    representative[order] = order[starts][np.cumsum(starts) - 1]
    return representative


def welded_faces(vertices, faces) -> np.ndarray:
    """``faces`` with every index replaced by its ``coincident`` representative (the same array when
    no two vertices coincide)."""
    faces = np.asarray(faces)
    representative = coincident(vertices)
    if np.array_equal(representative, np.arange(len(representative))):
        return faces
    return representative[faces].astype(faces.dtype)


def _first_rows(rows) -> np.ndarray:
    """Indices of the first occurrence of each distinct row of an integer array, in order (a sort of
    its columns: on 5M faces ~10 times faster than ``np.unique(axis=0)``)."""
    rows = np.asarray(rows)
    if len(rows) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    starts = np.concatenate([[True], np.any(ordered[1:] != ordered[:-1], axis=1)])
    first = np.minimum.reduceat(order, np.flatnonzero(starts))
    return np.sort(first)


def zero_area(vertices, faces) -> np.ndarray:
    """``(F,)`` bool: the face's corners are collinear (or coincide), decided exactly. A float cross
    product that is clearly not zero settles most faces; the rest go to exact arithmetic."""
    corners = np.asarray(vertices, np.float64)[np.asarray(faces)]
    ab, ac = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
    cross = np.linalg.norm(np.cross(ab, ac), axis=1)
    scale = np.linalg.norm(ab, axis=1) * np.linalg.norm(ac, axis=1)
    # ab and ac are within 1.2e-16 relative of the exact differences, so the cross product is within
    # ~1e-15 of |ab| |ac| of the exact one: above 1e-12 of it, the face certainly has area.
    doubtful = np.flatnonzero(cross <= 1e-12 * scale)
    degenerate = np.zeros(len(corners), bool)
    degenerate[doubtful] = [_exact.zero_area(corners[k]) for k in doubtful]
    return degenerate


class SolveMesh(NamedTuple):
    """The mesh a solver moves: coincident vertices welded, unreferenced vertices dropped, faces that
    repeat a vertex (after welding) or another face's three vertices dropped (nothing can move them
    apart, and they cross nothing).

    ``rows``: the input row of each solve vertex (its lowest-numbered copy); ``index``: ``(V,)`` each
    input vertex's solve vertex, ``-1`` for vertices no kept face uses; ``faces``: into the solve
    vertices; ``copies``: ``(W,)`` how many input vertices each solve vertex stands for.
    """

    rows: np.ndarray
    index: np.ndarray
    faces: np.ndarray
    copies: np.ndarray

    def is_identity(self, num_vertices: int, num_faces: int) -> bool:
        """The solve mesh is the input (nothing welded, dropped or renumbered)."""
        return (
            len(self.rows) == num_vertices
            and len(self.faces) == num_faces
            and bool(np.array_equal(self.rows, np.arange(num_vertices)))
        )


def solve_mesh(vertices, faces) -> SolveMesh:
    """The ``SolveMesh`` of a mesh (``faces`` in the input's vertex numbering)."""
    representative = coincident(vertices)
    num_vertices = len(representative)
    faces = representative[np.asarray(faces)].reshape(-1, 3)
    distinct = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    faces = faces[distinct]
    faces = faces[_first_rows(np.sort(faces, axis=1))]
    used = np.zeros(num_vertices, bool)
    used[faces.reshape(-1)] = True
    rows = np.flatnonzero(used)
    renumber = np.full(num_vertices, -1, np.int64)
    renumber[rows] = np.arange(len(rows))
    index = renumber[representative]
    copies = np.bincount(index[index >= 0], minlength=len(rows))
    return SolveMesh(rows, index, renumber[faces].reshape(-1, 3), copies)


def index_contacts(vertices, faces, *, skip_vertex_adjacent: bool = False) -> np.ndarray:
    """The pairs that libigl's index semantics adds to the welded mesh's crossing pairs: faces of
    positive area with a vertex at the coordinates of one of the other's vertices under another index.

    By index they meet at that point, which is not a vertex they share, so they intersect: with no
    vertex in common they touch; with one, the edge opposite it holds the point; with an edge in
    common, the third corners coincide and the two are one triangle folded flat. ``(K, 2)``, ``i < j``.
    """
    faces = np.asarray(faces)
    representative = coincident(vertices)
    duplicated = np.flatnonzero(representative != np.arange(len(representative)))
    if len(duplicated) == 0 or len(faces) == 0:
        return np.zeros((0, 2), np.int64)
    # Every (group, face, own index) for corners in a group of coincident vertices.
    in_group = np.zeros(len(representative), bool)
    in_group[duplicated] = in_group[representative[duplicated]] = True
    face_of, corner = np.nonzero(in_group[faces])
    index = faces[face_of, corner]
    group = representative[index]
    # Pairs of corners in one group under different indices (a group holds a handful of copies).
    order = np.lexsort((index, group))
    face_of, index, group = face_of[order], index[order], group[order]
    starts = np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1]]))
    sizes = np.diff(np.concatenate([starts, [len(group)]]))
    pairs = []
    for size in np.unique(sizes):
        first = starts[sizes == size]
        a, b = np.triu_indices(size, 1)
        left, right = first[:, None] + a, first[:, None] + b
        keep = index[left] != index[right]
        pairs.append(np.stack([face_of[left][keep], face_of[right][keep]], axis=1))
    pairs = np.sort(np.concatenate(pairs), axis=1)
    pairs = np.unique(pairs[pairs[:, 0] != pairs[:, 1]], axis=0)
    good = ~zero_area(vertices, faces)
    pairs = pairs[good[pairs[:, 0]] & good[pairs[:, 1]]]
    if skip_vertex_adjacent and len(pairs):
        fa, fb = faces[pairs[:, 0]], faces[pairs[:, 1]]
        share = np.any(fa[:, :, None] == fb[:, None, :], axis=(1, 2))
        pairs = pairs[~share]
    return pairs.astype(np.int64)


class MeshReport(NamedTuple):
    """What a mesh holds besides its triangles ([`mesh_report`][tritri_jax.mesh_report]).

    - ``duplicate_vertices``: vertices at the coordinates of a lower-numbered one (a triangle soup
      has about five per vertex); detection and ``untangle`` take them as one vertex.
    - ``unreferenced_vertices``: vertices no face uses (duplicates not counted again).
    - ``degenerate_faces``: faces of zero area (collinear or coincident corners, decided exactly);
      they never intersect anything.
    - ``repeated_faces``: faces with the same three vertices as an earlier face (after welding).
    - ``boundary_edges``, ``non_manifold_edges``: edges of one face, of three or more faces;
      ``inconsistent_edges``: edges whose two faces run along them the same way (flipped
      orientation). All after welding, over faces of three distinct vertices.
    - ``components``: pieces connected through shared vertices (after welding).

    ```python
    >>> import numpy as np, tritri_jax as tt
    >>> vertices, faces = tt.scenes.sphere(6)
    >>> soup = vertices[faces].reshape(-1, 3), np.arange(3 * len(faces)).reshape(-1, 3)
    >>> report = tt.mesh_report(*soup)
    >>> report.duplicate_vertices == 3 * len(faces) - len(vertices), report.boundary_edges, report.components
    (True, 0, 1)
    >>> report.findings()
    ['298 duplicate vertices (one vertex each where they coincide)']

    ```
    """

    num_vertices: int
    num_faces: int
    duplicate_vertices: int
    unreferenced_vertices: int
    degenerate_faces: int
    repeated_faces: int
    boundary_edges: int
    non_manifold_edges: int
    inconsistent_edges: int
    components: int

    def findings(self) -> list:
        """The counts that are not zero, as phrases (components when more than one)."""
        phrases = {
            "duplicate_vertices": "duplicate vertices (one vertex each where they coincide)",
            "unreferenced_vertices": "unreferenced vertices",
            "degenerate_faces": "zero-area faces",
            "repeated_faces": "repeated faces",
            "boundary_edges": "boundary edges",
            "non_manifold_edges": "non-manifold edges",
            "inconsistent_edges": "inconsistently oriented edges",
        }
        found = [f"{getattr(self, name)} {text}" for name, text in phrases.items() if getattr(self, name)]
        if self.components > 1:
            found.append(f"{self.components} components")
        return found


def vertex_components(faces, num_vertices: int) -> np.ndarray:
    """Each vertex's connected component (a label; vertices joined by the faces' edges, and a
    vertex in no face on its own)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rows, cols = np.repeat(faces[:, 0], 2), faces[:, 1:].ravel()
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(num_vertices, num_vertices))
    return connected_components(graph, directed=False)[1]


def mesh_report(vertices, faces) -> MeshReport:
    """Count what a mesh holds besides its triangles: duplicate and unreferenced vertices, degenerate
    and repeated faces, boundary, non-manifold and inconsistently oriented edges, components.

    **Arguments:** ``vertices`` ``(V, 3)`` float, ``faces`` ``(F, 3)`` int (numpy or JAX arrays,
    checked as [`find_intersections`][tritri_jax.find_intersections] checks them).

    **Returns:** a [`MeshReport`][tritri_jax.MeshReport].

    ```python
    >>> import numpy as np, tritri_jax as tt
    >>> vertices, faces = tt.scenes.sphere(6)
    >>> report = tt.mesh_report(vertices, faces[1:])  # one face missing: a hole of three edges
    >>> report.boundary_edges, report.non_manifold_edges, report.components
    (3, 0, 1)

    ```
    """
    vertices, faces = check_mesh(vertices, faces)
    v, f = np.asarray(vertices), np.asarray(faces, np.int64)
    num_vertices = len(v)
    representative = coincident(v)
    duplicates = int(np.sum(representative != np.arange(num_vertices)))
    welded = representative[f] if len(f) else f
    group_used = np.zeros(num_vertices, bool)
    group_used[welded.reshape(-1)] = True
    unreferenced = int(np.sum((representative == np.arange(num_vertices)) & ~group_used))
    distinct = (welded[:, 0] != welded[:, 1]) & (welded[:, 1] != welded[:, 2]) & (welded[:, 0] != welded[:, 2])
    triangles = welded[distinct]
    repeated = len(triangles) - len(_first_rows(np.sort(triangles, axis=1)))
    half = triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    key = np.minimum(half[:, 0], half[:, 1]) * max(num_vertices, 1) + np.maximum(half[:, 0], half[:, 1])
    # Each edge's run in the sorted keys: its face count, and how many of them run along it upwards.
    order = np.argsort(key, kind="stable")
    starts = (
        np.flatnonzero(np.concatenate([[True], key[order][1:] != key[order][:-1]]))
        if len(key)
        else np.zeros(0, np.int64)
    )
    count = np.diff(np.append(starts, len(key)))
    forward = np.add.reduceat((half[order, 0] < half[order, 1]).astype(np.int64), starts) if len(key) else count
    components = 0
    if len(triangles):
        labels = vertex_components(triangles, num_vertices)
        used = np.zeros(num_vertices, bool)
        used[triangles.reshape(-1)] = True
        components = int(np.count_nonzero(np.bincount(labels[used])))
    return MeshReport(
        num_vertices=num_vertices,
        num_faces=len(f),
        duplicate_vertices=duplicates,
        unreferenced_vertices=unreferenced,
        degenerate_faces=int(zero_area(v, f).sum()) if len(f) else 0,
        repeated_faces=int(repeated),
        boundary_edges=int(np.sum(count == 1)),
        non_manifold_edges=int(np.sum(count >= 3)),
        inconsistent_edges=int(np.sum((count == 2) & (forward != 1))),
        components=int(components),
    )

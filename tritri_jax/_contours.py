"""Intersection curves and the regions they bound: the global view of a tangle (host-side NumPy/SciPy).

Two crossing triangles meet along a segment; each end of it is where an edge of one triangle passes
through the other (or a vertex the two share). Consecutive segments of one intersection curve share
that end: the pair ``(f, g)`` whose segment ends where edge ``e`` of ``f`` passes through ``g`` is
followed by ``(f', g)``, ``f'`` the other face on ``e``. Linking every crossing pair to the pairs it
shares an end with, and taking connected components, gives the curves. An end that only one pair
reaches is where a curve stops: on a boundary edge of the mesh (the curve can slide off there), or
elsewhere (a pair the detection did not report, which the exact check rules out for a mesh without
degenerate contacts). On each surface the curve runs along a band of faces it cuts; removing the
bands splits the faces into regions, and a band with a region on each side separates the surface
there, while one with the same region on both sides (a Klein bottle's double curve, a curve that
ends on a boundary) does not.

The analysis runs once per stall, not per step, and is not part of any certificate: the ends are
found with float orientation tests that count a touch as a crossing, so near-degenerate ends link
more pairs, never fewer.
"""

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

CURVE_KINDS = ("closed", "boundary", "open")


class IntersectionCurve(NamedTuple):
    """One intersection curve of a mesh: its crossing face pairs and how it ends.

    - ``pairs``: ``(K, 2)`` int, the crossing face pairs along the curve, each ``(i, j)`` with ``i < j``.
    - ``kind``: ``"closed"`` (a loop: every end of a segment is shared by two pairs), ``"boundary"``
      (it stops on a boundary edge of the mesh, where it can slide off) or ``"open"`` (it stops
      elsewhere: a non-manifold edge, or an end in a degenerate contact).
    - ``through_vertex``: the curve passes a vertex that the two faces of one of its pairs share.

    ```python
    >>> import tritri_jax as tt
    >>> (curve,) = tt.intersection_curves(*tt.scenes.two_spheres(8))
    >>> curve.kind, curve.pairs.shape[1], curve.through_vertex
    ('closed', 2, False)

    ```
    """

    pairs: np.ndarray
    kind: str
    through_vertex: bool


class CurveRegions(NamedTuple):
    """The regions the bands of one curve leave on the surface.

    - ``labels``: ``(F,)`` int, the region of each face; ``-1`` on the faces the curve cuts.
    - ``areas``: ``(R,)`` float, each region's area.
    - ``bands``: one entry per band (a connected set of faces the curve cuts, one per sheet it runs
      on): the sorted region ids that touch the band. A band touching two or more regions separates
      the surface there; a band touching one does not (the curve's two sides are one region).
    - ``band_faces``: the faces of each band, in the order of ``bands``.

    ```python
    >>> import numpy as np, tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(8)
    >>> (curve,) = tt.intersection_curves(vertices, faces)
    >>> regions = tt.curve_regions(vertices, faces, curve)
    >>> areas = sorted(regions.areas)  # two caps and the two rests of the spheres
    >>> len(areas), bool(areas[1] < areas[2] / 5)
    (4, True)
    >>> bool((regions.labels[np.concatenate(regions.band_faces)] == -1).all())
    True

    ```
    """

    labels: np.ndarray
    areas: np.ndarray
    bands: list
    band_faces: list


def _edge_faces(faces):
    """Sorted edge keys ``(E, 2)``, the edge of each face corner ``(F, 3)`` and faces per edge ``(E,)``."""
    corner_edges = np.stack([faces[:, [1, 2]], faces[:, [2, 0]], faces[:, [0, 1]]], axis=1)
    keys = np.sort(corner_edges.reshape(-1, 2), axis=1)
    edges, index, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    return edges, index.reshape(-1, 3), counts


def _orient(a, b, c, d):
    return np.einsum("...i,...i->...", np.cross(b - a, c - a), d - a)


def _edges_through(tri_edges, tri):
    """``(P, 3)`` bool: does each edge of the first triangles (``(P, 3, 2, 3)``, closed) meet the
    second triangle ``(P, 3, 3)`` (closed)? Touching counts."""
    a, b, c = (tri[:, None, k] for k in range(3))
    p, q = tri_edges[:, :, 0], tri_edges[:, :, 1]
    sp_, sq = _orient(a, b, c, p), _orient(a, b, c, q)
    spans = (sp_ * sq <= 0) & ((sp_ != 0) | (sq != 0))
    s0, s1, s2 = _orient(p, q, a, b), _orient(p, q, b, c), _orient(p, q, c, a)
    inside = ((s0 >= 0) & (s1 >= 0) & (s2 >= 0)) | ((s0 <= 0) & (s1 <= 0) & (s2 <= 0))
    return spans & inside


def intersection_curves(vertices, faces, pairs=None) -> list:
    """The intersection curves of a mesh: its crossing face pairs grouped by the curve they lie on.

    Consecutive pairs of one curve share an end of their segments (where an edge of one face
    passes through the other face); a curve is ``"closed"``, ends on the mesh's ``"boundary"``
    (where it can slide off), or is ``"open"``. Use it to see what a tangle is made of, or what an
    unconverged ``untangle`` left: a closed loop that does not separate its surface (see
    ``curve_regions``) cannot be shrunk away by local descent.

    **Arguments:**

    - ``vertices`` ``(V, 3)`` float, ``faces`` ``(F, 3)`` int.
    - ``pairs``: ``(K, 2)`` crossing face pairs, as ``find_intersections`` returns them (computed
      when not given).

    **Returns:** a list of ``IntersectionCurve``, longest first.

    ```python
    >>> import tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(8)
    >>> [(curve.kind, len(curve.pairs) > 40) for curve in tt.intersection_curves(vertices, faces)]
    [('closed', True)]
    >>> vertices, faces = tt.scenes.folded_sheet(16)
    >>> [curve.kind for curve in tt.intersection_curves(vertices, faces)]
    ['boundary']

    ```
    """
    if pairs is None:
        import jax.numpy as jnp

        from ._detect import find_intersections

        vertices = np.asarray(jnp.asarray(vertices))  # the precision the detection works in (float32 without x64)
        pairs = find_intersections(vertices, faces)
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or (pairs.size and (pairs.min() < 0 or pairs.max() >= len(f))):
        raise ValueError(f"pairs must be a (K, 2) array of face indices below {len(f)}; got shape {pairs.shape}")
    pairs = np.sort(pairs.astype(np.int64), axis=1)
    if len(pairs) == 0:
        return []
    edges, corner_edge, edge_count = _edge_faces(f)
    num_edges = len(edges)
    ends, owners, shared_flag = [], [], np.zeros(len(pairs), bool)
    for side in (0, 1):
        own, other = f[pairs[:, side]], f[pairs[:, 1 - side]]
        own_edges = np.stack([own[:, [1, 2]], own[:, [2, 0]], own[:, [0, 1]]], axis=1)
        # an edge with a vertex of the other face ends its segment at that shared vertex, not inside it
        touches = (own_edges[..., None] == other[:, None, None, :]).any(axis=(-1, -2))
        through = _edges_through(v[own_edges], v[other]) & ~touches
        rows, corner = np.nonzero(through)
        # the end "edge e passes through face g" is shared by every face on e paired with g
        ends.append(corner_edge[pairs[rows, side], corner] * len(f) + pairs[rows, 1 - side])
        owners.append(rows)
    shared = f[pairs[:, 0], :, None] == f[pairs[:, 1], None, :]
    rows, corner, _ = np.nonzero(shared)
    shared_flag[rows] = True
    # the end at a vertex the two faces share: one node per vertex
    ends.append(num_edges * len(f) + f[pairs[rows, 0], corner])
    owners.append(rows)
    ends, owners = np.concatenate(ends), np.concatenate(owners)
    nodes, node_of = np.unique(ends, return_inverse=True)
    degree = np.bincount(node_of, minlength=len(nodes))
    dangling = (degree == 1) & (nodes < num_edges * len(f))
    links, linked_ends = _across_corners(f, pairs, corner_edge, nodes[node_of], owners, dangling[node_of])
    graph = sp.coo_matrix((np.ones(len(owners)), (owners, node_of)), shape=(len(pairs), len(nodes))).tocsr()
    link = (graph @ graph.T + links).tocsr()
    num_curves, curve_of = connected_components(link, directed=False)
    resolved = np.zeros(len(nodes), bool)
    resolved[node_of[linked_ends]] = True
    dangling &= ~resolved
    dangling_edge = nodes[dangling] // len(f)
    on_boundary = np.zeros(len(nodes), bool)
    on_boundary[np.nonzero(dangling)[0]] = edge_count[dangling_edge] == 1
    curves = []
    for c in range(num_curves):
        members = np.nonzero(curve_of == c)[0]
        curve_nodes = np.unique(node_of[np.isin(owners, members)])
        if dangling[curve_nodes].any():
            kind = "boundary" if on_boundary[curve_nodes][dangling[curve_nodes]].all() else "open"
        else:
            kind = "closed"
        curves.append(IntersectionCurve(pairs[members], kind, bool(shared_flag[members].any())))
    curves.sort(key=lambda curve: -len(curve.pairs))
    return curves


def _across_corners(f, pairs, corner_edge, end_keys, owners, is_dangling):
    """Links for ends that only one pair reaches. Where a curve passes exactly through a point at
    which an edge of one face meets an edge of the other (symmetric meshes do this), the next pair
    is across both edges, ``(f', g')``, which no single end names: link each such end's pair to the
    crossing pairs ``(f', g')`` with ``f'`` across the end's edge and ``g'`` sharing an edge with
    ``g`` (or ``g`` itself). Loops over the dangling ends only: a handful per curve."""
    num_faces = len(f)
    edge_faces = {}
    for face, edge in zip(np.repeat(np.arange(num_faces), 3), corner_edge.ravel(), strict=True):
        edge_faces.setdefault(int(edge), []).append(int(face))
    index = {(int(a), int(b)): k for k, (a, b) in enumerate(pairs)}
    rows, cols, row_ends = [], [], []
    for end in np.flatnonzero(is_dangling):
        k = int(owners[end])
        edge, g = divmod(int(end_keys[end]), num_faces)
        own = int(pairs[k, 0]) if g == int(pairs[k, 1]) else int(pairs[k, 1])
        near_g = {g}
        for e in corner_edge[g]:
            near_g.update(edge_faces[int(e)])
        found = False
        for f2 in edge_faces[edge]:
            if f2 == own:
                continue
            for g2 in near_g:
                other = index.get((min(f2, g2), max(f2, g2)))
                if other is not None and other != k:
                    rows += [k, other]
                    cols += [other, k]
                    found = True
        if found:
            row_ends.append(end)
    links = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(pairs), len(pairs)))
    return links, np.asarray(row_ends, np.int64)


def face_areas(vertices, faces):
    """Each face's area, ``(F,)``."""
    tri = vertices[faces]
    return 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)


def face_adjacency(faces):
    """Faces sharing an edge, as a symmetric ``(F, F)`` sparse matrix (a non-manifold edge links all
    its faces)."""
    f = np.asarray(faces, np.int64)
    _, corner_edge, _ = _edge_faces(f)
    incidence = sp.coo_matrix(
        (np.ones(corner_edge.size), (np.repeat(np.arange(len(f)), 3), corner_edge.ravel())),
        shape=(len(f), corner_edge.max() + 1 if len(f) else 0),
    ).tocsr()
    adjacency = (incidence @ incidence.T).tocoo()
    keep = adjacency.row != adjacency.col
    return sp.coo_matrix((np.ones(keep.sum()), (adjacency.row[keep], adjacency.col[keep])), shape=(len(f), len(f)))


def curve_regions(vertices, faces, curve: IntersectionCurve, adjacency=None) -> CurveRegions:
    """The regions left when the faces ``curve`` cuts are removed, their areas, and which regions
    touch each band of cut faces (see ``CurveRegions``): a band with regions on two sides separates
    its surface, and the smaller side is what passed through the other sheet.

    ``adjacency`` (``face_adjacency(faces)``) can be passed to reuse it across curves.

    ```python
    >>> import tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(8)
    >>> (curve,) = tt.intersection_curves(vertices, faces)
    >>> regions = tt.curve_regions(vertices, faces, curve)
    >>> [len(band) for band in regions.bands]  # each sphere's band: a cap on one side, the rest on the other
    [2, 2]
    >>> vertices, faces = tt.scenes.klein_bottle(8)
    >>> (curve,) = tt.intersection_curves(vertices, faces)
    >>> [len(band) for band in tt.curve_regions(vertices, faces, curve).bands]  # one region: no side to push
    [1, 1]

    ```
    """
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    adjacency = (face_adjacency(f) if adjacency is None else adjacency).tocsr()
    cut = np.zeros(len(f), bool)
    cut[np.unique(curve.pairs)] = True
    keep = sp.diags((~cut).astype(float))
    _, labels = connected_components(keep @ adjacency @ keep, directed=False)
    labels = np.where(cut, -1, labels)
    kept = np.unique(labels[~cut])
    labels = np.where(cut, -1, np.searchsorted(kept, labels))
    area = face_areas(v, f)
    areas = np.bincount(labels[~cut], weights=area[~cut], minlength=len(kept))
    cut_only = sp.diags(cut.astype(float))
    _, band_of = connected_components(cut_only @ adjacency @ cut_only, directed=False)
    band_faces = np.nonzero(cut)[0]
    coo = adjacency.tocoo()
    across = cut[coo.row] & ~cut[coo.col]
    bands, faces_of_band = [], []
    for band in np.unique(band_of[band_faces]):
        touching = across & (band_of[coo.row] == band)
        bands.append(np.unique(labels[coo.col[touching]]))
        faces_of_band.append(band_faces[band_of[band_faces] == band])
    return CurveRegions(labels, areas, bands, faces_of_band)

r"""Layer 4: global moves, phase 1's last escalation, for tangles that local descent cannot shrink.

When descent and fairing leave crossings, the intersection curves (``_contours``) say what is
stuck, and one of two moves is tried on each curve, longest curve first:

- **Clear a component**: where a curve joins two connected parts of the mesh and does not separate
  one of them (a ring around a sheet: the loop goes around the ring's tube), translate the part of
  smaller area rigidly along a direction until a plane separates it from the other, plus a margin.
  The directions tried: the mean normal of the other part's crossing faces, the smaller part's
  principal axes, and the coordinate axes, both ways; the shortest moves first, each on the input
  (whose shape descent has not bent) before the stalled state.
- **Push a region back**: where a band of faces the curve cuts separates its surface, the side of
  smaller area is what passed through the other sheet. It is pushed back along that sheet's mean
  normal (at the crossing faces) until it lies on the other side of the sheet's plane, plus a
  margin, and the move fades to zero over a geodesic distance as long as the push.

A move is kept only when the exact crossing count drops (``find_intersections``); then the next
local attempt starts from it. Host-side NumPy/SciPy: it runs once per stalled attempt.
"""

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from ._contours import curve_regions, face_adjacency, face_areas, intersection_curves
from ._detect import find_intersections
from ._topology import vertex_components

# Each candidate costs one exact detection, which grows with the face count: per move, only the
# longest curves and a bounded number of tries.
_CURVES = 4
_TRIES = 24


def _normal(x, faces, chosen):
    """The area-weighted mean unit normal of the faces ``chosen`` (zero when they cancel)."""
    tri = x[faces[chosen]]
    total = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]).sum(0)
    norm = np.linalg.norm(total)
    return total / norm if norm > 0 else total


def _clear_component(x, moving, fixed, directions, margin):
    """Translations of the vertices ``moving`` that put a plane between them and ``fixed``: for each
    unit direction ``r``, ``max_fixed r.p - min_moving r.p + margin`` along ``r``; shortest first."""
    moves = []
    for r in directions:
        norm = np.linalg.norm(r)
        if norm == 0:
            continue
        r = r / norm
        distance = float((x[fixed] @ r).max() - (x[moving] @ r).min() + margin)
        moves.append((distance, r))
    moves.sort(key=lambda move: move[0])
    candidates = []
    for distance, r in moves[:4]:
        y = x.copy()
        y[moving] += distance * r
        candidates.append((distance, y))
    return candidates


def _push_region(x, faces, edges, region_faces, band_faces, partners, margin):
    """``region_faces`` (and the band) moved along the partner faces' mean normal to the far side of
    their plane plus ``margin``, fading to zero over a geodesic distance as long as the move."""
    n = _normal(x, faces, partners)
    if not n.any():
        return []
    centre = x[np.unique(faces[partners])].mean(0)
    inside = np.unique(faces[np.concatenate([region_faces, band_faces])])
    side = (x[inside] - centre) @ n
    # which side the region went to: its own vertices (the band's straddle the plane)
    passed = np.setdiff1d(np.unique(faces[region_faces]), faces[band_faces])
    if len(passed) == 0:
        return []
    direction = -np.sign(np.median((x[passed] - centre) @ n)) or 1.0  # back across the plane
    distance = float(np.max(-direction * side)) + margin
    if distance <= 0:
        return []
    length = np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1)
    graph = sp.coo_matrix((length, (edges[:, 0], edges[:, 1])), shape=(len(x), len(x)))
    reach = dijkstra(graph, directed=False, indices=inside, min_only=True, limit=distance)
    fade = np.clip(1 - reach / distance, 0, 1)
    weight = fade * fade * (3 - 2 * fade)  # smoothstep: 1 on the region, 0 a push's length away
    y = x + (direction * distance) * weight[:, None] * n
    return [(distance, y)]


def global_moves(x, faces, edges, remaining, unit: float, max_moves: int, *, origin=None, pushes: bool = True):
    """Up to ``max_moves`` accepted global moves from ``x`` (``(V, 3)``, unit bounding-box diagonal)
    with the exact crossing pairs ``remaining``; ``edges``: the mesh's unique edges, ``unit``:
    phase 1's length unit (the margin is one unit); ``pushes=False``: rigid moves of components
    only (they keep the shape). A rigid move is first tried on ``origin`` (the input, whose shape
    descent has not bent), then on ``x``. Returns ``(x, remaining, moves)``."""
    x, faces = np.asarray(x), np.asarray(faces)
    origin = None if origin is None else np.asarray(origin, np.float64)
    dtype = x.dtype
    component = vertex_components(faces, len(x))
    face_component = component[faces[:, 0]]
    adjacency = face_adjacency(faces)
    moves = 0
    while moves < max_moves and len(remaining):
        y64 = x.astype(np.float64)
        area = face_areas(y64, faces)
        accepted, tried = False, 0
        for curve in intersection_curves(y64, faces, remaining)[:_CURVES]:
            if tried >= _TRIES:
                break
            candidates = _candidates(y64, faces, edges, curve, component, face_component, area, adjacency, unit, pushes)
            if origin is not None and moves == 0:
                candidates = [
                    (-1.0, c)
                    for _, c in _candidates(
                        origin, faces, edges, curve, component, face_component, area, adjacency, unit, False
                    )
                ] + candidates
            for _, candidate in sorted(candidates, key=lambda c: c[0])[: _TRIES - tried]:
                tried += 1
                candidate = candidate.astype(dtype)
                found = find_intersections(candidate, faces)
                if len(found) < len(remaining):
                    x, remaining, accepted = candidate, found, True
                    break
            if accepted:
                break
        if not accepted:
            break
        moves += 1
    return x, remaining, moves


def _candidates(x, faces, edges, curve, component, face_component, area, adjacency, unit, pushes):
    """The moves ``global_moves`` tries for one curve, as ``(distance, positions)``."""
    candidates = []
    regions = curve_regions(x, faces, curve, adjacency)
    # a part is moved clear only of a curve that does not separate one of its surfaces (a ring
    # around a sheet): a curve that bounds a region on both sheets is pushed back locally instead
    # (moving a whole garment off a body would be certified, and useless)
    linked = any(len(touching) < 2 for touching in regions.bands)
    first, second = face_component[curve.pairs[:, 0]], face_component[curve.pairs[:, 1]]
    for a, b in {(int(p), int(q)) for p, q in zip(first, second, strict=True) if p != q and linked}:
        area_a, area_b = area[face_component == a].sum(), area[face_component == b].sum()
        small, large = (a, b) if area_a <= area_b else (b, a)
        moving, fixed = np.flatnonzero(component == small), np.flatnonzero(component == large)
        crossing = np.unique(curve.pairs.ravel())
        partners = crossing[face_component[crossing] == large]
        centred = x[moving] - x[moving].mean(0)
        axes = np.linalg.svd(centred, full_matrices=False)[2]
        directions = [_normal(x, faces, partners), *axes, *np.eye(3)]
        directions += [-d for d in directions]
        candidates += _clear_component(x, moving, fixed, directions, unit)
    if not pushes:
        return candidates
    for touching, band_faces in zip(regions.bands, regions.band_faces, strict=True):
        if len(touching) < 2:
            continue
        smaller = touching[np.argmin(regions.areas[touching])]
        in_band = np.isin(curve.pairs, band_faces)
        partners = np.unique(np.where(in_band[:, :1], curve.pairs[:, 1:], curve.pairs[:, :1]))
        region_faces = np.flatnonzero(regions.labels == smaller)
        candidates += _push_region(x, faces, edges, region_faces, band_faces, partners, unit)
    return candidates

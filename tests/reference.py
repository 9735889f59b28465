"""Independent references: exact rational arithmetic and brute force.

Nothing here imports tritri_jax. Triangles are converted to ``fractions.Fraction`` from the exact
binary value of each float, so every sign and comparison below is exact.
"""

import itertools
import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np


def _fr(tri):
    return [[Fraction(float(c)) for c in row] for row in np.asarray(tri, dtype=np.float64)]


def _sub(a, b):
    return [a[0] - b[0], a[1] - b[1], a[2] - b[2]]


def _add(a, b):
    return [a[0] + b[0], a[1] + b[1], a[2] + b[2]]


def _mul(a, s):
    return [a[0] * s, a[1] * s, a[2] * s]


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _cross(a, b):
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def _normal(tri):
    return _cross(_sub(tri[1], tri[0]), _sub(tri[2], tri[0]))


class Classification(NamedTuple):
    kind: str  # degenerate | coplanar_overlap | coplanar_apart | apart | crossing | touching
    crosses: bool
    valid: bool  # both triangles strictly cross the other's plane
    tc0: float
    tc1: float
    ta: tuple
    tb: tuple
    margin: float  # a length: how far (roughly) the pair is from changing its classification
    extent: float  # half the largest side of the pair's bounding box
    magnitude: float  # largest absolute coordinate


def _segment(tri, dist):
    """End points (exact) where a triangle with opposite-signed distances crosses the plane."""
    points = []
    for i, j in ((0, 1), (1, 2), (2, 0)):
        if dist[i] == 0:
            points.append(tri[i])
        if (dist[i] > 0 and dist[j] < 0) or (dist[i] < 0 and dist[j] > 0):
            w = dist[i] / (dist[i] - dist[j])
            points.append(_add(tri[i], _mul(_sub(tri[j], tri[i]), w)))
    assert len(points) == 2, points
    return points


def _coplanar(u, v, normal):
    axis = max(range(3), key=lambda k: abs(normal[k]))
    keep = [k for k in range(3) if k != axis]
    u2 = [[p[keep[0]], p[keep[1]]] for p in u]
    v2 = [[p[keep[0]], p[keep[1]]] for p in v]
    overlaps, gaps = [], []
    for tri in (u2, v2):
        for i in range(3):
            a, b = tri[i], tri[(i + 1) % 3]
            axis_vec = [a[1] - b[1], b[0] - a[0]]
            length_sq = axis_vec[0] ** 2 + axis_vec[1] ** 2
            pu = [p[0] * axis_vec[0] + p[1] * axis_vec[1] for p in u2]
            pv = [p[0] * axis_vec[0] + p[1] * axis_vec[1] for p in v2]
            amount = min(max(pu) - min(pv), max(pv) - min(pu))
            if length_sq == 0:
                continue
            (overlaps if amount > 0 else gaps).append(math.sqrt(float(amount * amount / length_sq)))
    if gaps:
        return False, max(gaps)
    return True, min(overlaps)


def _height(tri):
    """Smallest altitude of a triangle: 2 * area / longest edge (0 for a degenerate one)."""
    n = _normal(tri)
    area2 = math.sqrt(float(_dot(n, n)))
    longest = max(
        math.sqrt(float(_dot(e, e))) for e in (_sub(tri[1], tri[0]), _sub(tri[2], tri[1]), _sub(tri[0], tri[2]))
    )
    return area2 / longest if longest > 0 else 0.0


def classify(u, v) -> Classification:
    """Exact Möller classification of a triangle pair, with a robustness margin."""
    uf, vf = np.asarray(u, np.float64), np.asarray(v, np.float64)
    both = np.concatenate([uf, vf])
    centre = 0.5 * (both.min(0) + both.max(0))
    extent = float(np.abs(both - centre).max())
    magnitude = float(np.abs(both).max())
    U, V = _fr(u), _fr(v)
    nu, nv = _normal(U), _normal(V)
    heights = min(_height(U), _height(V))
    nan = float("nan")

    def result(kind, crosses, margin, valid=False, tc=(nan, nan), ta=(nan, nan), tb=(nan, nan)):
        return Classification(kind, crosses, valid, tc[0], tc[1], ta, tb, margin, extent, magnitude)

    if all(c == 0 for c in nu) or all(c == 0 for c in nv):
        return result("degenerate", False, heights)
    shared_u = [any(U[i] == V[j] for j in range(3)) for i in range(3)]
    shared_v = [any(V[j] == U[i] for i in range(3)) for j in range(3)]
    dv = [_dot(nu, _sub(V[j], U[0])) for j in range(3)]
    du = [_dot(nv, _sub(U[i], V[0])) for i in range(3)]
    nn_u, nn_v = _dot(nu, nu), _dot(nv, nv)
    # Ratios in exact arithmetic before converting: squared lengths of tiny normals underflow floats.
    distances = [math.sqrt(float(d * d / nn_u)) for d, s in zip(dv, shared_v, strict=True) if not s]
    distances += [math.sqrt(float(d * d / nn_v)) for d, s in zip(du, shared_u, strict=True) if not s]
    cross_n = _cross(nu, nv)
    sine = math.sqrt(float(_dot(cross_n, cross_n) / (nn_u * nn_v)))
    margin = min([heights, sine * extent] + distances)

    if all(d == 0 for d in dv) and all(d == 0 for d in du):
        overlap, m2 = _coplanar(U, V, nu)
        return result("coplanar_overlap" if overlap else "coplanar_apart", overlap, min(heights, m2))
    if not (max(dv) > 0 and min(dv) < 0 and max(du) > 0 and min(du) < 0):
        return result("apart", False, margin)

    su, sv = _segment(U, du), _segment(V, dv)
    dd = _dot(cross_n, cross_n)

    def length(t):  # t / |cross_n| as a float, without underflow
        return math.copysign(math.sqrt(float(t * t / dd)), t)

    ta = sorted(_dot(cross_n, p) for p in su)
    tb = sorted(_dot(cross_n, p) for p in sv)
    tc0, tc1 = ta[0] - tb[1], ta[1] - tb[0]
    crosses = tc0 < 0 < tc1
    ends = [abs(length(t)) for t in (tc0, tc1) if t != 0 or not any(shared_u)]
    lengths = [length(ta[1] - ta[0]), length(tb[1] - tb[0])]
    margin = min([margin] + ends + lengths)
    kind = "crossing" if crosses else ("touching" if 0 in (tc0, tc1) else "apart")
    return result(
        kind,
        crosses,
        margin,
        valid=True,
        tc=(length(tc0), length(tc1)),
        ta=(length(ta[0]), length(ta[1])),
        tb=(length(tb[0]), length(tb[1])),
    )


def one_side_margin(u, v, underflow: float = 0.0) -> float:
    """How certainly one triangle lies on one side of the other's plane (0 if neither does).

    For each triangle ``t`` and each vertex ``p`` of the other that is not (bitwise) a vertex of
    ``t``: ``det = (p - t0) . ((t1 - t0) x (t2 - t0))`` and ``perm``, the same sum with every
    product in absolute value. A side counts when every such ``det`` has one strict sign; its
    margin is the smallest ``|det| / perm``. The larger of the two sides' margins is returned.

    ``underflow`` (an absolute size, e.g. a multiple of the format's smallest normal number) also
    drops a side where some ``|det|`` is not above ``underflow * (w + s + 2)``, ``w`` the sum of
    the weights and ``s`` the sum of ``|p - t0|``: there the products a float evaluation forms
    can underflow, and no relative margin makes the sign computable.
    """
    u, v = _fr(u), _fr(v)
    best = 0.0
    for tri, other in ((u, v), (v, u)):
        a, b = _sub(tri[1], tri[0]), _sub(tri[2], tri[0])
        normal = _cross(a, b)
        weights = [
            abs(a[1] * b[2]) + abs(a[2] * b[1]),
            abs(a[2] * b[0]) + abs(a[0] * b[2]),
            abs(a[0] * b[1]) + abs(a[1] * b[0]),
        ]
        tests = []
        for p in other:
            if any(p == q for q in tri):
                continue
            d = _sub(p, tri[0])
            size = [abs(c) for c in d]
            floor = Fraction(float(underflow)) * (sum(weights) + sum(size) + 2)
            tests.append((_dot(d, normal), _dot(size, weights), floor))
        if not tests or any(abs(det) <= floor for det, _, floor in tests):
            continue
        if all(det > 0 for det, _, _ in tests) or all(det < 0 for det, _, _ in tests):
            best = max(best, min(float(abs(det) / perm) for det, perm, _ in tests))
    return best


def is_clear(c: Classification, relative: float) -> bool:
    """Is the pair farther from its classification's boundary than rounding can reach?"""
    return c.margin > relative * c.extent + 4 * relative * c.magnitude * 1e-3


def brute_force_pairs(vertices, faces, predicate):
    """All face pairs ``i < j`` (sharing no edge) for which ``predicate(tri_i, tri_j)`` holds."""
    faces = np.asarray(faces)
    out = []
    for i, j in itertools.combinations(range(len(faces)), 2):
        if len(set(faces[i]) & set(faces[j])) >= 2:
            continue
        if predicate(vertices[faces[i]], vertices[faces[j]]):
            out.append((i, j))
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def meet_beyond_shared_vertex(u, v, su: int, sv: int):
    """Do two closed triangles sharing the vertex ``u[su] == v[sv]`` have a point in common besides
    it? (``None`` for a zero-area one.) Coplanar pairs: do they overlap with positive area (the
    library's rule: coplanar faces around a shared vertex touch along lines all over a flat mesh).
    Others: both meet the planes' common line through the shared vertex in a segment from it, found
    by clipping the line to each triangle's three half-planes; the pair meets beyond the vertex iff
    the two segments overlap in more than their start."""
    U, V = _fr(u), _fr(v)
    nu, nv = _normal(U), _normal(V)
    direction = _cross(nu, nv)
    if all(c == 0 for c in nu) or all(c == 0 for c in nv):
        return None
    if all(_dot(nu, _sub(p, U[0])) == 0 for p in V):
        return _coplanar(U, V, nu)[0]
    start = U[su]

    def reach(tri, normal, d):
        """The largest ``t`` with ``start + t d`` in the closed triangle (``None``: only ``t = 0``)."""
        low, high = Fraction(0), None
        for i in range(3):
            p, q = tri[i], tri[(i + 1) % 3]
            inward = _cross(normal, _sub(q, p))
            f0, f1 = _dot(_sub(start, p), inward), _dot(d, inward)
            if f1 == 0 and f0 < 0:
                return None
            if f1 > 0:
                low = max(low, -f0 / f1)
            elif f1 < 0:
                high = -f0 / f1 if high is None else min(high, -f0 / f1)
        return None if high is None or high < low or high <= 0 else high

    for d in (direction, _mul(direction, -1)):
        a, b = reach(U, nu, d), reach(V, nv, d)
        if a is not None and b is not None and min(a, b) > 0:
            return True
    return False


def folded_onto_each_other(u, v, shared):
    """Two triangles sharing an edge (``shared``: its two ``(i, j)`` corner pairs, ``u[i] == v[j]``):
    are they coplanar with their third corners strictly on one side of the edge (an overlap of
    positive area)? Whichever way each runs along the edge."""
    U, V = _fr(u), _fr(v)
    (i0, _), (i1, _) = shared
    a, b = U[i0], U[i1]
    p = U[3 - i0 - i1]
    q = V[3 - shared[0][1] - shared[1][1]]
    edge = _sub(b, a)
    side_p, side_q = _cross(edge, _sub(p, a)), _cross(edge, _sub(q, a))
    coplanar = _dot(_cross(edge, _sub(p, a)), _sub(q, a)) == 0
    return coplanar and _dot(side_p, side_q) > 0

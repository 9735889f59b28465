"""Exact host-side predicates for the few pairs that floating point cannot decide.

``find_intersections`` runs the float kernels on every candidate inside ``jit`` and flags the
pairs within rounding distance of touching; only those come here. The arithmetic is exact
(Python integers: the floats' exact binary values times a common power of two) and uses orientation
predicates, an algorithm independent of the Möller interval used in the kernels:

- pairs sharing no vertex intersect iff their *closed* triangles meet (touching counts), as in
  libigl's ``predicates::find_self_intersections``;
- pairs sharing one vertex intersect iff an edge opposite the shared vertex meets the other
  triangle (one folds through the other);
- pairs sharing an edge intersect iff they are coplanar and folded onto each other.
"""

import numpy as np


def _exact_pair(u, v):
    """Both triangles as Python integers: every coordinate times one common power of two.

    Every predicate below is homogeneous, so this exact scaling keeps all signs, and integer
    arithmetic is much faster than ``Fraction`` (no gcd).
    """
    ratios = [float(c).as_integer_ratio() for c in np.concatenate([np.ravel(u), np.ravel(v)]).astype(np.float64)]
    common = max(d for _, d in ratios)
    ints = [n * (common // d) for n, d in ratios]
    points = [tuple(ints[3 * k : 3 * k + 3]) for k in range(6)]
    return points[:3], points[3:]


def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _orient3d(a, b, c, d):
    """Sign of the volume of (a, b, c, d): > 0, < 0 or 0."""
    ab, ac, ad = _sub(b, a), _sub(c, a), _sub(d, a)
    det = (
        ab[0] * (ac[1] * ad[2] - ac[2] * ad[1])
        - ab[1] * (ac[0] * ad[2] - ac[2] * ad[0])
        + ab[2] * (ac[0] * ad[1] - ac[1] * ad[0])
    )
    return (det > 0) - (det < 0)


def _drop_axis(tri):
    a, b, c = tri
    ab, ac = _sub(b, a), _sub(c, a)
    n = (ab[1] * ac[2] - ab[2] * ac[1], ab[2] * ac[0] - ab[0] * ac[2], ab[0] * ac[1] - ab[1] * ac[0])
    return max(range(3), key=lambda k: abs(n[k]))


def _orient2d(a, b, c):
    det = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return (det > 0) - (det < 0)


def _segments_meet_2d(p, q, a, b):
    o1, o2, o3, o4 = _orient2d(p, q, a), _orient2d(p, q, b), _orient2d(a, b, p), _orient2d(a, b, q)
    if o1 * o2 < 0 and o3 * o4 < 0:
        return True

    def on(s, t, r):
        return min(s[0], t[0]) <= r[0] <= max(s[0], t[0]) and min(s[1], t[1]) <= r[1] <= max(s[1], t[1])

    return (
        (o1 == 0 and on(p, q, a)) or (o2 == 0 and on(p, q, b)) or (o3 == 0 and on(a, b, p)) or (o4 == 0 and on(a, b, q))
    )


def _inside_2d(r, tri):
    o = [_orient2d(tri[i], tri[(i + 1) % 3], r) for i in range(3)]
    return all(x >= 0 for x in o) or all(x <= 0 for x in o)


def _chart(u, v):
    """Both (coplanar) triangles in 2-D: drop the axis along which u's normal is largest."""
    axis = _drop_axis(u)
    return ([tuple(p[k] for k in range(3) if k != axis) for p in t] for t in (u, v))


def _coplanar_closed(u, v):
    u2, v2 = _chart(u, v)
    if any(_segments_meet_2d(u2[i], u2[(i + 1) % 3], v2[j], v2[(j + 1) % 3]) for i in range(3) for j in range(3)):
        return True
    return _inside_2d(u2[0], v2) or _inside_2d(v2[0], u2)


def _coplanar_open(u, v):
    """Do coplanar triangles overlap with positive area? No edge line weakly separates them."""
    u2, v2 = _chart(u, v)
    for own, other in ((u2, v2), (v2, u2)):
        for i in range(3):
            a, b, c = own[i], own[(i + 1) % 3], own[(i + 2) % 3]
            side = _orient2d(a, b, c)
            if all(_orient2d(a, b, p) * side <= 0 for p in other):
                return False
    return True


def _segment_meets_triangle(p, q, tri):
    """Closed segment pq against closed, non-degenerate triangle (not coplanar with it)."""
    a, b, c = tri
    op, oq = _orient3d(a, b, c, p), _orient3d(a, b, c, q)
    if op * oq > 0 or (op == 0 and oq == 0):
        return False
    o = [_orient3d(p, q, a, b), _orient3d(p, q, b, c), _orient3d(p, q, c, a)]
    return all(x >= 0 for x in o) or all(x <= 0 for x in o)


def _degenerate(tri):
    a, b, c = tri
    ab, ac = _sub(b, a), _sub(c, a)
    return ab[1] * ac[2] == ab[2] * ac[1] and ab[2] * ac[0] == ab[0] * ac[2] and ab[0] * ac[1] == ab[1] * ac[0]


def zero_area(tri) -> bool:
    """Are the triangle's three corners collinear (or coincident), exactly?"""
    points, _ = _exact_pair(tri, tri)
    return _degenerate(points)


def _coplanar(u, v):
    return all(_orient3d(*u, p) == 0 for p in v)


def closed_intersect(u, v) -> bool:
    """Do two closed triangles share any point? Zero-area triangles never intersect."""
    u, v = _exact_pair(u, v)
    return _closed(u, v)


def _closed(u, v):
    if _degenerate(u) or _degenerate(v):
        return False
    if _coplanar(u, v):
        return _coplanar_closed(u, v)
    edges = [(t[i], t[(i + 1) % 3], o) for t, o in ((u, v), (v, u)) for i in range(3)]
    return any(_segment_meets_triangle(p, q, o) for p, q, o in edges)


def shared_vertex_intersect(u, v, su: int, sv: int) -> bool:
    """Triangles sharing vertex ``u[su] == v[sv]``: does an edge opposite it meet the other triangle?"""
    u, v = _exact_pair(u, v)
    if _degenerate(u) or _degenerate(v):
        return False
    if _coplanar(u, v):
        return _coplanar_open(u, v)
    ou = [p for i, p in enumerate(u) if i != su]
    ov = [p for j, p in enumerate(v) if j != sv]
    return _segment_meets_triangle(ou[0], ou[1], v) or _segment_meets_triangle(ov[0], ov[1], u)


def shared_edge_folded(u, v) -> bool:
    """Triangles sharing an edge: are they coplanar and folded onto each other (overlap of positive area)?"""
    u, v = _exact_pair(u, v)
    if _degenerate(u) or _degenerate(v) or not _coplanar(u, v):
        return False
    return _coplanar_open(u, v)


def decide(u, v, fu, fv) -> bool:
    """Exact verdict on one pair, by its topology (``fu``, ``fv``: the faces' vertex indices)."""
    shared = [(i, j) for i in range(3) for j in range(3) if fu[i] == fv[j]]
    if len(shared) == 0:
        return closed_intersect(u, v)
    if len(shared) == 1:
        return shared_vertex_intersect(u, v, shared[0][0], shared[0][1])
    if len(shared) == 2:
        return shared_edge_folded(u, v)
    return False

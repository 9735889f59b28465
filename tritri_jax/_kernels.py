"""Layer 1: per-pair kernels on two triangles ``u, v`` of shape ``(3, 3)``.

Everything here is a pure function of one pair with fixed shapes: no batching (use
``jax.vmap``), no mesh, no options objects, no runtime checks.

Numerical scheme (why it looks the way it does):

* The pair is first centred on its bounding box and divided by a power of two, so every
  quantity below is O(1) whatever the input magnitude (1e-6 or 1e6, near or far from the
  origin) and the scaling itself is exact. Centre and scale are ``stop_gradient``-ed: the
  interval is exactly homogeneous, so this leaves every derivative exact.
* A vertex that coincides bitwise with a vertex of the other triangle lies on the other
  plane; its signed distance is set to exactly zero (this is what makes vertex-sharing
  pairs exact). Distances below ``eps**2`` (in the scaled units) are snapped to zero too,
  which keeps every derivative bounded.
* Branches (which vertex is alone on its side of the plane) are selected with
  ``jnp.where``; unsafe divisions and normalisations use the double-where helpers of
  ``_safe`` with thresholds that keep derivatives of every order finite.
"""

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from ._safe import eps_of, safe_divide
from ._types import Array, Bool, Float, Scalar, Triangle
from ._vec3 import AOS, SOA, pick


def _bits(x):
    """A float's bit pattern as an integer of its width (bitwise equality sees subnormals, which
    the CPU backend reads as zero in arithmetic and in ``==``)."""
    return lax.bitcast_convert_type(x, jnp.int32 if x.dtype == jnp.float32 else jnp.int64)


def _subnormal(x):
    """``x`` is a nonzero subnormal number (decided on its bits: in arithmetic it reads as zero)."""
    finfo = jnp.finfo(x.dtype)
    exponent_mask = ((1 << finfo.nexp) - 1) << finfo.nmant
    bits = _bits(x)
    return ((bits & exponent_mask) == 0) & ((bits & ((1 << finfo.nmant) - 1)) != 0)


_COPLANAR_TOL = 32.0  # in units of eps, in the scaled frame (|coordinates| <= 1)
_SLIVER_TOL = 32.0  # a triangle whose edge angle is below this many eps is degenerate
_AMBIGUOUS_TOL = 256.0  # verdicts closer than this many eps (scaled frame) to flipping are "ambiguous"


class Interval(NamedTuple):
    """The Minkowski-difference interval $I_c = [t_c^0, t_c^1]$ of Eq. (1).

    ``tc0 = ta0 - tb1`` and ``tc1 = ta1 - tb0`` (no halving, unlike the paper's appendix).
    ``valid`` is true when each triangle strictly crosses the other's plane (and neither is
    degenerate nor are they coplanar); where it is false ``tc0 = tc1 = 0``.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> found = tt.interval(u, v)
    >>> float(found.tc0), float(found.tc1), bool(found.valid)  # tc0 < 0 < tc1: they cross
    (-1.0, 3.0, True)

    ```
    """

    tc0: Float[Array, ""]
    tc1: Float[Array, ""]
    valid: Bool[Array, ""]


class _Parts(NamedTuple):
    tc0: Array
    tc1: Array
    length_a: Array  # |I_a|
    length_b: Array  # |I_b|
    valid: Array
    coplanar_overlap: Array
    ambiguous: Array  # within rounding distance of changing the crossing verdict
    opened: Array  # shares an edge, the third vertices certainly on either side of it: not folded


def _frame(ops, u, v):
    """Exact-ish normalisation: centre on the bounding box, divide by a power of two."""
    points = u + v
    centre = [
        0.5 * ops.minimum(*(ops.coord(p, c) for p in points)) + 0.5 * ops.maximum(*(ops.coord(p, c) for p in points))
        for c in range(3)
    ]
    extent = ops.maximum(*(jnp.abs(ops.coord(p, c) - centre[c]) for p in points for c in range(3)))
    ok = (extent > 0) & jnp.isfinite(extent)
    scale = jnp.exp2(jnp.ceil(jnp.log2(jnp.where(ok, extent, 1))))
    return ops.vector(*(lax.stop_gradient(c) for c in centre)), lax.stop_gradient(scale)


def _unit_normal(ops, tri, eps):
    e1, e2 = ops.sub(tri[1], tri[0]), ops.sub(tri[2], tri[0])
    normal = ops.cross(e1, e2)
    sq = ops.dot(normal, normal)
    # Degenerate when the edges' angle is below ~32 eps (relative) or the area is absurdly small
    # in the scaled frame (which would make derivatives overflow).
    ok = sq > jnp.maximum((_SLIVER_TOL * eps) ** 2 * ops.dot(e1, e1) * ops.dot(e2, e2), eps**4)
    inverse = jnp.where(ok, lax.rsqrt(jnp.where(ok, sq, 1)), 0)
    return ops.scale(normal, inverse), ok


def _rotated(ops, k, tri, dist):
    """``tri``'s vertices and their distances in the order ``k, k + 1, k + 2`` (mod 3)."""
    tri_r = [pick(ops, k, *(tri[(i + j) % 3] for j in range(3))) for i in range(3)]
    dist_r = [jnp.where(k == 0, dist[i], jnp.where(k == 1, dist[(i + 1) % 3], dist[(i + 2) % 3])) for i in range(3)]
    return tri_r, dist_r


def _segment(ops, tri, dist):
    """End points of the segment where ``tri`` crosses a plane, from its vertices' signed distances,
    whether it crosses, and the lonely vertex ``k``.

    The "lonely" vertex ``k`` is the first nonzero one whose sign no other vertex shares; the
    end points lie on the edges leaving it (an end point is a vertex itself when that vertex lies
    on the plane, which covers Appendix A's one-vertex-on-the-plane branch).
    """
    sign = [jnp.sign(d) for d in dist]
    crosses = (ops.maximum(*sign) > 0) & (ops.minimum(*sign) < 0)
    lonely = [
        (sign[i] != 0) & (sign[i] * sign[(i + 1) % 3] <= 0) & (sign[i] * sign[(i + 2) % 3] <= 0) for i in range(3)
    ]
    k = jnp.where(lonely[0], 0, jnp.where(lonely[1], 1, jnp.where(lonely[2], 2, 0)))
    tri_r, dist_r = _rotated(ops, k, tri, dist)

    def end_point(i):
        denominator = dist_r[0] - dist_r[i]
        weight = safe_divide(dist_r[0], denominator, crosses & (denominator != 0))
        point = ops.add(tri_r[0], ops.scale(ops.sub(tri_r[i], tri_r[0]), weight))
        return ops.where(dist_r[i] == 0, tri_r[i], point)

    return end_point(1), end_point(2), crosses, k


def _coplanar_overlap(ops, u, v, normal, eps):
    """Do two coplanar triangles overlap with positive area? (separating axes in the best 2-D chart.)

    Also whether rounding could flip that (an axis's overlap tiny but not zero), and whether they
    touch: no axis separates them and one meets them exactly at an end."""
    magnitude = [jnp.abs(ops.coord(normal, c)) for c in range(3)]
    axis = jnp.where(
        (magnitude[0] >= magnitude[1]) & (magnitude[0] >= magnitude[2]),
        0,
        jnp.where(magnitude[1] >= magnitude[2], 1, 2),
    )

    def chart(p):  # drop the axis along which the normal is largest
        x, y, z = (ops.coord(p, c) for c in range(3))
        return jnp.where(axis == 0, y, x), jnp.where(axis == 2, y, z)

    u2, v2 = [chart(p) for p in u], [chart(p) for p in v]
    tiny = jnp.finfo(eps.dtype).tiny
    overlap, near, gap, touch = True, False, False, False
    for tri in (u2, v2):
        for i in range(3):
            edge = (tri[(i + 1) % 3][0] - tri[i][0], tri[(i + 1) % 3][1] - tri[i][1])
            axis_2d = (-edge[1], edge[0])
            pu = [p[0] * axis_2d[0] + p[1] * axis_2d[1] for p in u2]
            pv = [p[0] * axis_2d[0] + p[1] * axis_2d[1] for p in v2]
            amount = jnp.minimum(ops.maximum(*pu) - ops.minimum(*pv), ops.maximum(*pv) - ops.minimum(*pu))
            amount = amount / jnp.maximum(jnp.sqrt(axis_2d[0] ** 2 + axis_2d[1] ** 2), tiny)
            overlap = overlap & (amount > 0)
            # An amount of exactly zero comes from shared coordinates (exact); a tiny nonzero one is rounding.
            near = near | ((amount != 0) & (jnp.abs(amount) < _AMBIGUOUS_TOL * eps))
            gap, touch = gap | (amount < 0), touch | (amount == 0)
    return overlap, near, touch & ~gap


def _scaled_pair(ops, u, v, eps):
    """The pair in the exact frame of ``_frame``, bitwise vertex coincidences, both unit normals."""
    u, v = ops.points(u), ops.points(v)
    same = [
        [ops.all_of(*(_bits(ops.coord(u[i], c)) == _bits(ops.coord(v[j], c)) for c in range(3))) for j in range(3)]
        for i in range(3)
    ]
    centre, scale = _frame(ops, u, v)
    u = [ops.scale(ops.sub(p, centre), 1 / scale) for p in u]
    v = [ops.scale(ops.sub(p, centre), 1 / scale) for p in v]
    return same, u, v, scale, _unit_normal(ops, u, eps), _unit_normal(ops, v, eps)


class _Line(NamedTuple):
    """How Möller's interval is built (in the scaled frame): enough to differentiate it by hand."""

    u: tuple  # the scaled vertices
    v: tuple
    scale: Array
    normal_u: tuple  # unit normals
    normal_v: tuple
    dist_u: list  # u's vertices against v's plane, snapped (shared vertices are exactly 0)
    dist_v: list
    lonely_u: Array  # the vertex alone on its side of the other plane (``_segment``'s ``k``)
    lonely_v: Array
    segment_u: tuple  # end points of the segment where u crosses v's plane (``_segment``)
    segment_v: tuple
    order_u: Array  # the segment's first end point is its lower one along ``direction``
    order_v: Array
    direction: tuple  # unit direction of the planes' line
    valid: Array
    ends: list  # tc0, tc1, |I_a|, |I_b| in the scaled frame (zero where not valid)
    # what the rounding analysis of ``_parts`` reads besides
    shared_u: list  # vertex coincides bitwise with one of the other triangle's
    shared_v: list
    ok_u: Array  # not degenerate
    ok_v: Array
    raw: list  # the six distances before snapping (shared ones zero)
    coplanar: Array
    sine_sq: Array  # |n_u x n_v|^2


def _line(ops, u: Triangle, v: Triangle, eps) -> _Line:
    same, u, v, scale, (normal_u, ok_u), (normal_v, ok_v) = _scaled_pair(ops, u, v, eps)
    shared_u = [ops.any_of(*same[i]) for i in range(3)]
    shared_v = [ops.any_of(*(same[i][j] for i in range(3))) for j in range(3)]
    snap = eps**2
    dist_v = [ops.dot(ops.sub(p, u[0]), normal_u) for p in v]  # v's vertices against u's plane
    dist_u = [ops.dot(ops.sub(p, v[0]), normal_v) for p in u]
    raw = [jnp.where(s, 0, d) for d, s in zip(dist_u + dist_v, shared_u + shared_v, strict=True)]
    dist_v = [jnp.where(shared_v[j] | (jnp.abs(d) <= snap), 0, d) for j, d in enumerate(dist_v)]
    dist_u = [jnp.where(shared_u[i] | (jnp.abs(d) <= snap), 0, d) for i, d in enumerate(dist_u)]
    tol = _COPLANAR_TOL * eps
    coplanar = ok_u & ok_v & (ops.maximum(*(jnp.abs(d) for d in dist_u + dist_v)) <= tol)

    pu0, pu1, crosses_u, lonely_u = _segment(ops, u, dist_u)
    pv0, pv1, crosses_v, lonely_v = _segment(ops, v, dist_v)
    normal_cross = ops.cross(normal_u, normal_v)
    sine_sq = ops.dot(normal_cross, normal_cross)
    ok_d = sine_sq > eps**2
    direction = ops.scale(normal_cross, jnp.where(ok_d, lax.rsqrt(jnp.where(ok_d, sine_sq, 1)), 0))
    valid = crosses_u & crosses_v & ok_u & ok_v & ok_d & ~coplanar

    mean = ops.scale(ops.add(ops.add(pu0, pu1), ops.add(pv0, pv1)), 0.25)
    t = [ops.dot(ops.sub(p, mean), direction) for p in (pu0, pu1, pv0, pv1)]  # used only to order the end points
    order_u, order_v = t[0] <= t[1], t[2] <= t[3]
    a_lo, a_hi = ops.where(order_u, pu0, pu1), ops.where(order_u, pu1, pu0)
    b_lo, b_hi = ops.where(order_v, pv0, pv1), ops.where(order_v, pv1, pv0)
    # Differences of points, not of t: end points that are the same vertex give exactly zero
    # however the compiler evaluates the dot products (that is what makes shared vertices exact).
    ends = [ops.dot(ops.sub(p, q), direction) for p, q in ((a_lo, b_hi), (a_hi, b_lo), (a_hi, a_lo), (b_hi, b_lo))]
    ends = [jnp.where(valid, e, 0) for e in ends]
    return _Line(
        u, v, scale, normal_u, normal_v, dist_u, dist_v, lonely_u, lonely_v, (pu0, pu1), (pv0, pv1), order_u, order_v,
        direction, valid, ends,
        shared_u, shared_v, ok_u, ok_v, raw, coplanar, sine_sq,
    )  # fmt: skip


def _parts(ops, u: Triangle, v: Triangle) -> _Parts:
    eps = eps_of(u)
    # Subnormal coordinates read as zero in arithmetic: such a pair is for exact arithmetic.
    points = (*ops.points(u), *ops.points(v))
    subnormal = ops.any_of(*(_subnormal(ops.coord(p, c)) for p in points for c in range(3)))
    # All six points on one axis-aligned plane (a coordinate the same, bitwise): then the computed
    # plane distances are exactly zero and so are the true ones (elsewhere a computed zero may be
    # a rounded 1e-40).
    axis_plane = ops.any_of(
        *(ops.all_of(*(_bits(ops.coord(p, c)) == _bits(ops.coord(points[0], c)) for p in points[1:])) for c in range(3))
    )
    line = _line(ops, u, v, eps)
    u, v, scale, valid, ends, raw, coplanar = line.u, line.v, line.scale, line.valid, line.ends, line.raw, line.coplanar
    shared_u, shared_v, ok_u, ok_v = line.shared_u, line.shared_v, line.ok_u, line.ok_v
    dists = line.dist_u + line.dist_v
    overlap_2d, near_2d, touch_2d = _coplanar_overlap(ops, u, v, line.normal_u, eps)
    coplanar_overlap = coplanar & overlap_2d

    # Rounding distance: a vertex almost on the other plane, interval ends almost meeting (their
    # error grows like 1/sin(angle)), near-parallel planes, near-degenerate faces, close 2-D calls.
    tol = _AMBIGUOUS_TOL * eps
    sine = jnp.sqrt(line.sine_sq)
    # (on the distances before snapping: a vertex 1e-40 off the plane is snapped onto it, not exactly on it)
    near_plane = ops.any_of(*((d != 0) & (jnp.abs(d) < tol) for d in raw))
    any_nonzero = ops.any_of(*(d != 0 for d in dists))
    # An end that is exactly zero because the pair shares a vertex is exact, not rounding.
    shared = ops.any_of(*shared_u)
    near_end = valid & ops.any_of(*(~(shared & (e == 0)) & (jnp.abs(e) * sine < tol) for e in ends[:2]))
    near_flat = ~coplanar & ok_u & ok_v & (sine < tol) & any_nonzero
    thin = ~(
        _unit_normal(ops, u, _AMBIGUOUS_TOL / _SLIVER_TOL * eps)[1]
        & _unit_normal(ops, v, _AMBIGUOUS_TOL / _SLIVER_TOL * eps)[1]
    )
    # A vertex that is not shared but lies on the other's plane (a computed distance of zero: exact
    # or rounded, unless ``axis_plane``), or coplanar triangles sharing no vertex that touch: the pair may touch, which
    # detection counts as an intersection and only exact arithmetic can tell (a T-junction, a vertex
    # resting on a face, an edge along another face's edge).
    on_plane = ops.any_of(*((d == 0) & ~s for d, s in zip(raw, shared_u + shared_v, strict=True))) & ~axis_plane
    touch = on_plane | (coplanar & touch_2d & ~shared) | subnormal
    ambiguous = near_plane | near_end | near_flat | (coplanar & near_2d) | (thin & (ok_u | ok_v)) | touch
    ends = [e * scale for e in ends]

    # Two faces sharing an edge (a planar quad split in two, a flat region) cross only folded flat
    # onto each other; with their third vertices certainly on either side of the edge they do not,
    # coplanar or not, which the interval test above leaves to exact arithmetic.
    def third(tri, is_shared):
        return ops.where(~is_shared[0], tri[0], ops.where(~is_shared[1], tri[1], tri[2]))

    first, last = ops.where(shared_u[0], u[0], u[1]), ops.where(shared_u[2], u[2], u[1])
    edge = ops.sub(last, first)
    side_u = ops.cross(edge, ops.sub(third(u, shared_u), first))
    side_v = ops.cross(edge, ops.sub(third(v, shared_v), first))
    # each side vector is within ~8 eps |edge| |third - first| of its exact value
    bound = _AMBIGUOUS_TOL * eps * jnp.sqrt(ops.dot(side_u, side_u) * ops.dot(side_v, side_v))
    bound = bound + _AMBIGUOUS_TOL * eps * ops.dot(edge, edge) * jnp.sqrt(
        ops.dot(ops.sub(third(u, shared_u), first), ops.sub(third(u, shared_u), first))
        * ops.dot(ops.sub(third(v, shared_v), first), ops.sub(third(v, shared_v), first))
    )
    two_shared = (sum(x.astype(jnp.int32) for x in shared_u) == 2) & (sum(x.astype(jnp.int32) for x in shared_v) == 2)
    opened = two_shared & (ops.dot(side_u, side_v) < -bound)
    return _Parts(
        tc0=ends[0],
        tc1=ends[1],
        length_a=ends[2],
        length_b=ends[3],
        valid=valid,
        coplanar_overlap=coplanar_overlap,
        ambiguous=ambiguous,
        opened=opened,
    )


def interval(u: Triangle, v: Triangle) -> Interval:
    """Möller's interval $I_c = I_a \\oplus (-I_b) = [t_a^0 - t_b^1,\\ t_a^1 - t_b^0]$ of Eq. (1).

    $I_a$ and $I_b$ are the parameter intervals, along the unit direction
    $D = (n_u \\times n_v)/|n_u \\times n_v|$ of the planes' intersection line, of the segments
    where each triangle crosses the other's plane. The triangles cross iff ``valid`` and
    $0 \\in (t_c^0, t_c^1)$.

    **Arguments:** ``u``, ``v``: triangles of shape ``(3, 3)`` (rows are vertices), same float dtype.

    **Returns:** an [`Interval`][tritri_jax.Interval] ``(tc0, tc1, valid)``; ``tc0 = tc1 = 0`` where
    ``valid`` is false (a triangle does not cross the other's plane, coplanar or degenerate pairs).

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> iv = tt.interval(u, v)
    >>> bool(iv.valid), bool(iv.tc0 < 0 < iv.tc1)
    (True, True)

    ```
    """
    p = _parts(AOS, u, v)
    return Interval(tc0=p.tc0, tc1=p.tc1, valid=p.valid)


def intersects(u: Triangle, v: Triangle) -> Bool[Array, ""]:
    """Whether two triangles cross: $0 \\in (t_c^0, t_c^1)$, or coplanar with an overlap of positive area.

    Touching (a shared vertex or edge, a vertex on the other triangle, intervals meeting at an end)
    is not crossing. Zero-area triangles never cross. Exact wherever the pair is not within
    rounding distance of touching.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> bool(tt.intersects(u, u + jnp.array([0., 0, 1])))
    False

    ```
    """
    p = _parts(AOS, u, v)
    return (p.valid & (p.tc0 < 0) & (p.tc1 > 0)) | p.coplanar_overlap


def certainly_apart(u: Triangle, v: Triangle, layout=SOA) -> Bool[Array, ""]:
    """Certified early-out: one triangle lies strictly on one side of the other's plane.

    Vertices coinciding bitwise with a vertex of the other triangle are ignored (they lie on its
    plane), so vertex-sharing pairs whose other vertices are all on one side are rejected too.
    Each side is an orientation test $d \\cdot (a \\times b)$ (edges $a, b$ of one triangle,
    $d$ from its first vertex to a point of the other) trusted only beyond a rigorous bound on its
    rounding error: Shewchuk's orient3d filter, $(7 + 56u)u$ times the permanent (the same sum
    with every product taken in absolute value), used here with $16u$, plus an absolute term
    covering underflow. So ``True`` is exact: the pair then has no point in common besides shared
    vertices (or a shared edge). Zero-area triangles, overflow and NaN give ``False``.

    Cheaper than the full kernel (no frame, no square roots); forward only, in the vectorised
    layout by default (see ``_vec3``).
    """
    ops = layout
    u, v = ops.points(u), ops.points(v)
    unit = jnp.finfo(u[0][0].dtype).eps / 2
    tiny = jnp.finfo(u[0][0].dtype).tiny
    # Bitwise, not ``==``: the CPU backend reads subnormals as zero, so ``==`` would call a vertex
    # 1e-45 away from the other's vertex shared and skip it. (Bitwise, -0.0 is not 0.0: that only
    # costs the pipeline an exact test.)
    same = [[ops.all_of(*(_bits(ops.coord(p, c)) == _bits(ops.coord(q, c)) for c in range(3))) for q in v] for p in u]

    def one_side(tri, other, shared):
        a, b = ops.sub(tri[1], tri[0]), ops.sub(tri[2], tri[0])
        normal = ops.cross(a, b)
        ax, ay, az = (jnp.abs(ops.coord(a, c)) for c in range(3))
        bx, by, bz = (jnp.abs(ops.coord(b, c)) for c in range(3))
        weights = ops.vector(ay * bz + az * by, az * bx + ax * bz, ax * by + ay * bx)
        weight_sum = ops.dot(weights, ops.vector(1.0, 1.0, 1.0))
        positive = negative = ~ops.all_of(*shared)
        for p, is_shared in zip(other, shared, strict=True):
            d = ops.sub(p, tri[0])
            size = ops.vector(*(jnp.abs(ops.coord(d, c)) for c in range(3)))
            det = ops.dot(d, normal)
            bound = 16 * unit * ops.dot(size, weights) + 8 * tiny * (
                weight_sum + ops.dot(size, ops.vector(1.0, 1.0, 1.0)) + 2
            )
            positive &= is_shared | (det > bound)
            negative &= is_shared | (det < -bound)
        return positive | negative

    shared_u = [ops.any_of(*same[i]) for i in range(3)]
    shared_v = [ops.any_of(*(same[i][j] for i in range(3))) for j in range(3)]
    return one_side(u, v, shared_v) | one_side(v, u, shared_u)


def classify(u: Triangle, v: Triangle, layout=SOA):
    """``(crossing, ambiguous)``: the float verdict of ``intersects`` and whether rounding could flip it.

    Forward only, in the vectorised layout by default (see ``_vec3``).
    """
    p = _parts(layout, u, v)
    crossing = (p.valid & (p.tc0 < 0) & (p.tc1 > 0)) | p.coplanar_overlap
    return crossing & ~p.opened, p.ambiguous & ~p.opened


def _widened(u, v, margin):
    iv = interval(u, v)
    lo, hi = iv.tc0 - margin, iv.tc1 + margin
    active = iv.valid & (lo < 0) & (hi > 0)
    return lo, hi, active


def pair_energy(u: Triangle, v: Triangle, *, margin=0.0) -> Scalar:
    """The paper's triangle-triangle intersection energy, Eq. (2): $T(u, v) = (t_c^0\\, t_c^1)^2$.

    With a margin $\\delta \\ge 0$ the interval is widened to $[t_c^0 - \\delta, t_c^1 + \\delta]$, so
    the energy stays positive until the intervals are $\\delta$ apart. Zero when the pair does not
    cross (or is coplanar or degenerate). This is Eq. (2) of the paper; its appendix code halves
    both ends, which scales $T$ by 1/16.

    ```python
    >>> import jax, jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> float(tt.pair_energy(u, v)) > 0, jax.grad(tt.pair_energy)(u, v).shape
    (True, (3, 3))

    ```
    """
    lo, hi, active = _widened(u, v, margin)
    return jnp.where(active, (lo * hi) ** 2, 0)


def crossing_length(u: Triangle, v: Triangle) -> Scalar:
    """Length of the segment where two triangles cross: $\\ell = \\min(t_c^1, -t_c^0, |I_a|, |I_b|)$.

    This is the overlap of $I_a$ and $I_b$; summed over a mesh's pairs it is the length of the
    intersection curve. It vanishes continuously when a crossing shrinks or a poke retracts, and its
    gradient does not fade as it does, which is why the untangling solver descends on it. 0 when the
    pair does not cross.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> float(tt.crossing_length(u, v))  # v's edge crosses u from y = 0 to y = 1
    1.0
    >>> float(tt.crossing_length(u, v + jnp.array([0., 0, 2])))  # lifted clear of u
    0.0

    ```
    """
    p = _parts(AOS, u, v)
    length = jnp.minimum(jnp.minimum(p.tc1, -p.tc0), jnp.minimum(p.length_a, p.length_b))
    return jnp.where(p.valid & (p.tc0 < 0) & (p.tc1 > 0), length, 0)

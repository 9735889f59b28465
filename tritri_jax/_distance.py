"""Layer 1: distances between two triangles' non-incident primitives, and a log barrier on them.

The relaxation phase of ``untangle`` keeps near pairs apart with the barrier of Incremental
Potential Contact (Li et al. 2020), summed over the point-triangle and edge-edge pairs of every
near face pair:

$$ b(r) = -(r - 1)^2 \\log r, \\qquad r = d^2 / \\hat d^2 < 1 $$

($0$ for $r \\ge 1$). It is $C^2$ at $r = 1$, grows without bound as a distance closes, and is
continuous everywhere, unlike the interval energy $T$, which jumps where a triangle leaves the
other's plane (DESIGN.md §1). Primitives that share a vertex (incident ones: a shared vertex and
the edges through it) are left out: their distance is zero by construction. Edge-edge terms are
multiplied by IPC's mollifier, which fades them out as the edges become parallel, where the
edge-edge distance stops being smooth (the point-triangle terms carry those contacts).

Squared distances are written piecewise (point-plane, point-edge, line-line, closest end points),
choosing the piece with ``jnp.where`` and guarding every division with the double-where helpers,
so values and derivatives are finite on every branch, degenerate triangles and edges included.
"""

import jax
import jax.numpy as jnp
import numpy as np

from ._safe import eps_of, safe_divide
from ._types import Array, Bool, Float, Scalar, Triangle
from ._vec3 import AOS, SOA

_PARALLEL = 1e-3  # IPC's mollifier threshold: |e_a x e_b|^2 < 1e-3 |e_a|^2 |e_b|^2
_LOG_FLOOR = 1e-12  # r below this (a contact or a zero-area face): the barrier goes on linearly, finite


def point_segment_distance_sq(ops, p, a, b) -> Scalar:
    """Squared distance from point ``p`` to the closed segment ``ab`` (a point if ``a == b``)."""
    ab, ap = ops.sub(b, a), ops.sub(p, a)
    t = jnp.clip(safe_divide(ops.dot(ap, ab), ops.dot(ab, ab)), 0.0, 1.0)
    d = ops.sub(ap, ops.scale(ab, t))
    return ops.dot(d, d)


def point_triangle_distance_sq(ops, p, a, b, c) -> Scalar:
    """Squared distance from point ``p`` to the closed triangle ``abc`` (its edges if degenerate)."""
    eps = eps_of(ops.coord(p, 0))
    n = ops.cross(ops.sub(b, a), ops.sub(c, a))
    nn = ops.dot(n, n)
    flat = nn <= (32 * eps) ** 2 * ops.dot(ops.sub(b, a), ops.sub(b, a)) * ops.dot(ops.sub(c, a), ops.sub(c, a))
    sides = [ops.dot(ops.cross(ops.sub(q, o), ops.sub(p, o)), n) for o, q in ((a, b), (b, c), (c, a))]
    inside = ~flat & ops.all_of(*(side >= 0 for side in sides))
    plane = safe_divide(ops.dot(n, ops.sub(p, a)) ** 2, nn, inside & (nn > 0))
    edges = ops.minimum(*(point_segment_distance_sq(ops, p, o, q) for o, q in ((a, b), (b, c), (c, a))))
    return jnp.where(inside, plane, edges)


def segment_segment_distance_sq(ops, a0, a1, b0, b1) -> Scalar:
    """Squared distance between the closed segments ``a0 a1`` and ``b0 b1``."""
    eps = eps_of(ops.coord(a0, 0))
    ea, eb, w = ops.sub(a1, a0), ops.sub(b1, b0), ops.sub(a0, b0)
    aa, ab, bb, aw, bw = ops.dot(ea, ea), ops.dot(ea, eb), ops.dot(eb, eb), ops.dot(ea, w), ops.dot(eb, w)
    n = ops.cross(ea, eb)
    nn = ops.dot(n, n)
    skew = nn > (32 * eps) ** 2 * aa * bb
    s = safe_divide(ab * bw - bb * aw, nn, skew)  # closest points of the two lines
    t = safe_divide(aa * bw - ab * aw, nn, skew)
    interior = skew & (s > 0) & (s < 1) & (t > 0) & (t < 1)
    lines = safe_divide(ops.dot(n, w) ** 2, nn, interior)
    ends = ops.minimum(
        point_segment_distance_sq(ops, a0, b0, b1),
        point_segment_distance_sq(ops, a1, b0, b1),
        point_segment_distance_sq(ops, b0, a0, a1),
        point_segment_distance_sq(ops, b1, a0, a1),
    )
    return jnp.where(interior, lines, ends)


def parallel_mollifier(ops, a0, a1, b0, b1) -> Scalar:
    """IPC's edge-edge mollifier: 1 for clearly skew edges, falling smoothly ($C^1$) to 0 when parallel."""
    ea, eb = ops.sub(a1, a0), ops.sub(b1, b0)
    n = ops.cross(ea, eb)
    cross_sq = ops.dot(n, n)
    threshold = _PARALLEL * ops.dot(ea, ea) * ops.dot(eb, eb)
    x = safe_divide(cross_sq, threshold)
    return jnp.where(cross_sq < threshold, x * (2 - x), 1.0)


def barrier(r) -> Scalar:
    """IPC's log barrier on a squared-distance ratio $r = d^2/\\hat d^2$: $-(r-1)^2 \\log r$ for $r < 1$, else 0.

    Below ``_LOG_FLOOR`` it continues along its tangent there (finite, $C^1$), so primitives that
    (nearly) touch are still pushed apart instead of sitting on a flat floor.
    """
    active = r < 1
    safe_r = jnp.where(active, jnp.maximum(r, _LOG_FLOOR), 1.0)
    value = -((safe_r - 1) ** 2) * jnp.log(safe_r)
    slope = -2 * (safe_r - 1) * jnp.log(safe_r) - (safe_r - 1) ** 2 / safe_r
    value = jnp.where(r < _LOG_FLOOR, value + slope * (r - _LOG_FLOOR), value)
    return jnp.where(active, value, 0.0)


# The primitive pairs as index tables, evaluated by one vmapped body each (a small graph: reverse-mode
# derivatives of the 15 unrolled pairs took minutes to compile). Point-triangle: v's vertices against
# u, then u's against v. Edge-edge: edge (i, i+1) of u against edge (k, k+1) of v.
_POINT_SIDE = np.array([1, 1, 1, 0, 0, 0])  # the point's triangle; the other one is the triangle
_POINT_INDEX = np.array([0, 1, 2, 0, 1, 2])
_EDGE_U = np.array([(i, (i + 1) % 3) for i in range(3) for _ in range(3)])
_EDGE_V = np.array([(k, (k + 1) % 3) for _ in range(3) for k in range(3)])
# The same 15 pairs as four corners of the face pair (u's vertices 0-2, then v's 3-5): point-triangle
# as (point, the triangle's three), edge-edge as (u's edge, v's edge).
PRIMITIVE_CORNERS = np.concatenate(
    [
        np.column_stack([3 * _POINT_SIDE + _POINT_INDEX, 3 * (1 - _POINT_SIDE)[:, None] + np.arange(3)]),
        np.column_stack([_EDGE_U, 3 + _EDGE_V]),
    ]
)
NUM_POINT_TRIANGLE = len(_POINT_SIDE)  # the first rows of the tables; the rest are edge-edge


def primitive_distances_sq(u: Triangle, v: Triangle, same: Bool[Array, "3 3"], layout=AOS):
    """Squared distances of the 15 primitive pairs and which of them count (are not incident).

    ``same[i, j]``: vertex ``i`` of ``u`` is vertex ``j`` of ``v`` (the faces share it). Returns
    ``(distances (15,), counted (15,), mollifier (15,))``: 6 point-triangle pairs (``v``'s vertices
    against ``u``, then ``u``'s against ``v``), then 9 edge-edge pairs; the mollifier is 1 for the
    point-triangle pairs. ``layout``: ``AOS`` (differentiable) or ``SOA`` (faster under ``vmap``,
    forward only; see ``_vec3``).
    """
    ops = layout

    def point_triangle(p, t):
        return point_triangle_distance_sq(ops, ops.point(p), *ops.points(t))

    def edge_edge(*ends):
        return segment_segment_distance_sq(ops, *map(ops.point, ends))

    both = jnp.stack([u, v])
    points, triangles = both[_POINT_SIDE, _POINT_INDEX], both[1 - _POINT_SIDE]
    ends = (u[_EDGE_U[:, 0]], u[_EDGE_U[:, 1]], v[_EDGE_V[:, 0]], v[_EDGE_V[:, 1]])
    shared = jnp.stack([same.any(axis=1), same.any(axis=0)])  # u's vertices, v's vertices
    touching = same[_EDGE_U[:, :, None], _EDGE_V[:, None, :]].any(axis=(1, 2))
    return (
        jnp.concatenate([jax.vmap(point_triangle)(points, triangles), jax.vmap(edge_edge)(*ends)]),
        jnp.concatenate([~shared[_POINT_SIDE, _POINT_INDEX], ~touching]),
        jnp.concatenate([jnp.ones(6, u.dtype), jax.vmap(lambda *e: parallel_mollifier(AOS, *e))(*ends)]),
    )


def primitive_ratio(points: Float[Array, "4 3"], dhat_sq, edge_edge: bool):
    """``(r, mollifier)`` of one primitive pair given by its four points (rows of
    ``PRIMITIVE_CORNERS``): $r = d^2 / \\hat d^2$, and IPC's mollifier (1 for point-triangle)."""
    if edge_edge:
        return segment_segment_distance_sq(AOS, *points) / dhat_sq, parallel_mollifier(AOS, *points)
    return point_triangle_distance_sq(AOS, *points) / dhat_sq, jnp.ones((), points.dtype)


def primitive_barrier(points: Float[Array, "4 3"], dhat_sq, edge_edge: bool) -> Scalar:
    """One primitive pair's term of ``pair_barrier``: the mollifier times the barrier."""
    r, mollifier = primitive_ratio(points, dhat_sq, edge_edge)
    return mollifier * barrier(r)


def pair_distance_sq(u: Triangle, v: Triangle, same: Bool[Array, "3 3"], layout=SOA) -> Scalar:
    """Smallest squared distance between non-incident primitives of two triangles (``inf`` if none)."""
    dist, counted, _ = primitive_distances_sq(u, v, same, layout)
    return jnp.min(jnp.where(counted, dist, jnp.inf))


def pair_barrier(u: Triangle, v: Triangle, same: Bool[Array, "3 3"], dhat_sq) -> Float[Array, ""]:
    """Summed barrier of the non-incident primitive pairs of two triangles, with distances in units of ``dhat``."""
    dist, counted, molli = primitive_distances_sq(u, v, same)
    terms = molli * barrier(dist / dhat_sq)
    return jnp.sum(jnp.where(counted, terms, 0.0))

"""Layer 3: IPC's log barrier over a list of near face pairs, for relax: the energy (a scan of
chunks with a custom JVP) and its Hessian as dense 18 x 18 blocks on the pairs, exact or Gauss-Newton,
each primitive pair within reach evaluated once."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._distance import (
    NUM_POINT_TRIANGLE,
    PRIMITIVE_CORNERS,
    barrier,
    pair_barrier,
    primitive_barrier,
    primitive_distances_sq,
    primitive_ratio,
)
from ._mesh_energy import pair_triangles, scatter_to_vertices
from ._safe import safe_divide
from ._types import Array, Faces, Float, Int
from ._vec3 import SOA


def shared_vertices(faces: Faces, pairs: Int[Array, "P 2"]):
    """``(P, 3, 3)`` bool: vertex ``i`` of each pair's first face is vertex ``j`` of its second."""
    corners = faces[jnp.maximum(pairs, 0)]
    return corners[:, 0, :, None] == corners[:, 1, None, :]


def pair_reach(dhat, pairs):
    """Each pair's $\\hat d$ ``(P,)``: ``dhat`` itself if it is a scalar, else (a reach per face,
    ``(F,)``) the geometric mean of its two faces' (smooth in both, unlike their minimum)."""
    dhat = jnp.asarray(dhat)
    if dhat.ndim == 0:
        return jnp.broadcast_to(dhat, pairs.shape[:1])
    rows = jnp.maximum(pairs, 0)
    return jnp.sqrt(dhat[rows[:, 0]] * dhat[rows[:, 1]])


def _add_reach_gradient(total, dhat, pairs, reach, by_reach):
    """``total`` plus the gradient in ``dhat`` of a sum whose gradient in ``pair_reach(dhat, pairs)``
    (``reach``) is ``by_reach``: scattered onto the two faces of each pair (no dense ``(F,)`` term
    per chunk)."""
    if jnp.ndim(dhat) == 0:
        return total + by_reach
    rows = jnp.maximum(pairs, 0)
    for side in (0, 1):  # d sqrt(a b) / d a = sqrt(a b) / (2 a)
        total = total.at[rows[:, side]].add(by_reach * reach / (2 * dhat[rows[:, side]]))
    return total


def barrier_energy(vertices, faces, pairs, count, dhat, chunk: int = 64):
    """$\\sum$ of [`pair_barrier`][tritri_jax._distance.pair_barrier] over the first ``count`` of
    ``pairs`` (distances in ``dhat``: a scalar, or a reach per face, a pair taking the geometric mean
    of its two faces', ``pair_reach``); differentiable in ``vertices`` and ``dhat`` to any order.

    A ``lax.scan`` over chunks of ``chunk`` rows, each behind a ``lax.cond`` on whether it holds a
    live row. Phase 2's buffer is sized for growth (four times the close pairs at its start), and
    evaluating all of it cost 4.0 ms for the energy and 12.5 ms with its gradient, against 0.9 and
    6.1 ms now (pretzel, 232 of 1,024 rows live). A scan of conds is differentiable in both modes,
    unlike a loop with a traced trip count, and traces the barrier once (a ``lax.switch`` over
    prefix sizes traced it per branch and doubled phase 2's compile time).

    Its first derivatives are one such scan that takes each live chunk's gradient (a custom JVP):
    reverse mode through the scan of conds cost 4.9 ms on the figure-of-eight knot's 231 close pairs
    in a 1,024-row buffer, against 0.4 ms for the energy; the gradient scan takes 1.2 ms."""
    return _barrier_energy(chunk, vertices, faces, pairs, count, dhat)


def _barrier_scan(vertices, faces, pairs, count, dhat, chunk: int, gradient: bool):
    """``barrier_energy``'s sum, and with ``gradient`` its derivatives in ``vertices`` and ``dhat``."""
    zero = jnp.zeros((), vertices.dtype)
    total = (zero, jnp.zeros_like(vertices), jnp.zeros(jnp.shape(dhat), vertices.dtype)) if gradient else zero
    capacity = pairs.shape[0]
    if capacity == 0:
        return total
    chunk = min(chunk, capacity)
    pad = -capacity % chunk
    rows = jnp.concatenate([pairs, jnp.full((pad, 2), -1, pairs.dtype)]).reshape(-1, chunk, 2)
    slots = jnp.arange(capacity + pad).reshape(-1, chunk)

    def one_chunk(total, chunk_rows):
        rows, slots = chunk_rows
        same = shared_vertices(faces, rows)

        def chunk_sum(u, v, dhat):  # a scalar dhat, or each row's reach
            batched = 0 if jnp.ndim(dhat) else None
            values = jax.vmap(pair_barrier, in_axes=(0, 0, 0, batched))(u, v, same, dhat**2)
            return jnp.sum(jnp.where(slots < count, values, 0))

        def live():
            u, v = pair_triangles(vertices, faces, rows)
            reach = pair_reach(dhat, rows) if jnp.ndim(dhat) else dhat
            if not gradient:
                return total + chunk_sum(u, v, reach)
            value, (du, dv, by_reach) = jax.value_and_grad(chunk_sum, argnums=(0, 1, 2))(u, v, reach)
            corners = faces[jnp.maximum(rows, 0)].reshape(-1, 6)
            moved = scatter_to_vertices(jnp.stack([du, dv], 1).reshape(-1, 18), corners, vertices.shape[0])
            return total[0] + value, total[1] + moved, _add_reach_gradient(total[2], dhat, rows, reach, by_reach)

        return lax.cond(slots[0] < count, live, lambda: total), None

    return lax.scan(one_chunk, total, (rows, slots))[0]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _barrier_energy(chunk, vertices, faces, pairs, count, dhat):
    return _barrier_scan(vertices, faces, pairs, count, dhat, chunk, gradient=False)


@_barrier_energy.defjvp
def _barrier_energy_jvp(chunk, primals, tangents):
    vertices, faces, pairs, count, dhat = primals
    vertices_dot, _, _, _, dhat_dot = tangents
    value, by_vertices, by_dhat = _barrier_scan(vertices, faces, pairs, count, dhat, chunk, gradient=True)
    return value, jnp.sum(by_vertices * vertices_dot) + jnp.sum(by_dhat * dhat_dot)


class BlockSystem(NamedTuple):
    """A sum of dense per-pair 18 x 18 blocks: ``blocks[p]`` acts on the six corners ``corners[p]``."""

    corners: Int[Array, "P 6"]
    blocks: Float[Array, "P 18 18"]


def _primitive_gauss_newton(points, dhat_sq, edge_edge: bool):
    """Gauss-Newton block of one primitive pair's barrier term, in the distance ratio $\\rho = d / \\hat d$ (PSD):

    $$ m\\, B''(\\rho)\\, \\nabla \\rho \\nabla \\rho^T
       = m \\left(b''(r) + \\frac{b'(r)}{2 r}\\right) \\nabla r \\nabla r^T,
       \\qquad B(\\rho) = b(\\rho^2), $$

    exact along the distance gradient (Gauss-Newton in $r = \\rho^2$ would drop $2 b'(r) < 0$ there).
    The weight is positive wherever the log is evaluated; it is clamped at 0 on the linear
    continuation below the floor. ``12 x 12``, in the order of the four points.
    """

    def ratio(q):
        r, mollifier = primitive_ratio(q.reshape(4, 3), dhat_sq, edge_edge)
        return r, (r, mollifier)

    gradient, (r, mollifier) = jax.jacfwd(ratio, has_aux=True)(points.reshape(-1))
    slope = jax.grad(barrier)(r)
    curvature = jax.grad(jax.grad(barrier))(r) + safe_divide(slope, 2 * r)
    return mollifier * jnp.maximum(curvature, 0.0) * jnp.outer(gradient, gradient)


def _primitive_hessian(points, dhat_sq, edge_edge: bool):
    """Exact ``12 x 12`` Hessian of one primitive pair's barrier term, in the order of its four points.

    Forward over forward: it compiled in 1.0 and 1.3 s (point-triangle, edge-edge, 32 rows) against
    1.5 and 2.2 s for ``jax.hessian``'s forward over reverse, and ran as fast (4,096 rows: 60 and
    89 ms against 52 and 99 ms)."""
    barrier_term = functools.partial(_flat_barrier, dhat_sq=dhat_sq, edge_edge=edge_edge)
    return jax.jacfwd(jax.jacfwd(barrier_term))(points.reshape(-1))


def _flat_barrier(q, dhat_sq, edge_edge: bool):
    return primitive_barrier(q.reshape(4, 3), dhat_sq, edge_edge)


def _distinct(keys, valid):
    """Among the rows of ``keys`` (``(N, k)`` int32) where ``valid``: one representative per distinct
    row (their indices, compacted into ``N`` slots), how many rows share it, and how many distinct
    rows there are."""
    size = keys.shape[0]
    keys = jnp.where(valid[:, None], keys, jnp.iinfo(jnp.int32).max)
    *sorted_keys, order = lax.sort((*keys.T, jnp.arange(size, dtype=jnp.int32)), num_keys=keys.shape[1])
    sorted_keys = jnp.stack(sorted_keys, axis=1)
    first = jnp.concatenate([jnp.ones(1, bool), jnp.any(sorted_keys[1:] != sorted_keys[:-1], axis=1)])
    first &= jnp.arange(size) < jnp.sum(valid)
    starts = jnp.nonzero(first, size=size, fill_value=size)[0]
    distinct = jnp.sum(first)
    ends = jnp.where(jnp.arange(size) + 1 < distinct, jnp.roll(starts, -1), jnp.sum(valid))
    return order[jnp.minimum(starts, size - 1)], jnp.where(jnp.arange(size) < distinct, ends - starts, 0), distinct


def _canonical(points, edge_edge: bool):
    """A key per primitive pair (``(N, 4)`` vertex ids), the same for every face pair that holds it:
    the point and the triangle's sorted corners, or the two edges' sorted ends, in order."""
    if not edge_edge:
        return jnp.concatenate([points[:, :1], jnp.sort(points[:, 1:], axis=1)], axis=1)
    first, second = jnp.sort(points[:, :2], axis=1), jnp.sort(points[:, 2:], axis=1)
    swap = (first[:, 0] > second[:, 0]) | ((first[:, 0] == second[:, 0]) & (first[:, 1] > second[:, 1]))
    return jnp.where(swap[:, None], jnp.concatenate([second, first], 1), jnp.concatenate([first, second], 1))


def _live_blocks(vertices, faces, pairs, count, dhat, exact, chunk: int = 32) -> BlockSystem:
    """18 x 18 blocks over the first ``count`` pairs (the other rows zero) that sum to the sum over
    them of ``_primitive_hessian`` (``exact``) or ``_primitive_gauss_newton`` for each of their
    primitive pairs closer than ``dhat``: the pairs' barrier Hessian, or its Gauss-Newton form.

    Only those primitive pairs are evaluated (the others' terms and derivatives are zero: the
    barrier is $C^2$ at $\\hat d$), and each once: the same edge-edge pair belongs to up to four face
    pairs, a point-triangle pair to as many as the point has faces. Each is evaluated for one of
    its face pairs, times its count, in a fori loop over chunks of ``chunk`` up to their number,
    point-triangle and edge-edge apart. Duplicates are found by sorting keys (``_distinct``) when
    there are at most as many primitive pairs within ``dhat`` as the buffer has rows, else each is
    evaluated (sorting costs ~0.4 us a row: 7.7 ms for the 18k edge-edge slots of a 2,048-row
    buffer). Measured at the end of the figure-of-eight knot's relax (497 close pairs): 2,173 of
    their 7,455 primitive pairs are within ``dhat``, 482 of them distinct. The exact blocks took
    66 ms per Newton step when all 15 primitive pairs of each face pair were differentiated, 39 ms
    for those within ``dhat``, and 15 ms for the distinct ones; the Gauss-Newton blocks 19, 11 and
    5.7 ms."""
    capacity = pairs.shape[0]
    dhat_sq = pair_reach(dhat, pairs) ** 2 if jnp.ndim(dhat) else dhat**2
    corners = faces[jnp.maximum(pairs, 0)].reshape(-1, 6)
    u, v = pair_triangles(lax.stop_gradient(vertices), faces, pairs)
    distances = jax.vmap(lambda a, b, same: primitive_distances_sq(a, b, same, SOA))
    dist, counted, _ = distances(u, v, shared_vertices(faces, pairs))
    active = (jnp.arange(capacity) < count)[:, None] & counted & (dist < jnp.reshape(dhat_sq, (-1, 1)))
    blocks = jnp.zeros((capacity, 18, 18), vertices.dtype)
    if capacity == 0:
        return BlockSystem(corners, blocks)
    for edge_edge, kinds in ((False, slice(0, NUM_POINT_TRIANGLE)), (True, slice(NUM_POINT_TRIANGLE, None))):
        table = jnp.asarray(PRIMITIVE_CORNERS[kinds], jnp.int32)
        blocks = _add_kind(blocks, vertices, corners, active[:, kinds], table, dhat_sq, edge_edge, exact, chunk)
    return BlockSystem(corners, blocks)


def _add_kind(blocks, vertices, corners, active, table, dhat_sq, edge_edge: bool, exact, chunk: int):
    """``_live_blocks`` for one kind of primitive pair: ``active`` ``(P, m)`` marks those within
    their pair's ``dhat_sq`` (``(P,)``, or one for all), ``table`` ``(m, 4)`` their corners among
    the face pair's six; each distinct one (or each one, when more are active than ``P``) is added,
    times its count, into ``blocks``."""
    capacity, kinds = active.shape
    flat = active.reshape(-1)
    size, total = flat.shape[0], jnp.sum(flat)
    entries = jnp.nonzero(flat, size=size, fill_value=0)[0].astype(jnp.int32)

    def where(entry):  # a primitive pair's face pair and its four corners there
        return entry // kinds, table[entry % kinds]

    def distinct():
        row, slots = where(entries[:capacity])
        keys = _canonical(jnp.take_along_axis(corners[row], slots, axis=1), edge_edge)
        chosen, times, number = _distinct(keys, jnp.arange(capacity) < total)
        pad = jnp.zeros(size - capacity, jnp.int32)
        chosen = jnp.concatenate([entries[:capacity][chosen], pad])
        return chosen, jnp.concatenate([times, pad]).astype(jnp.int32), number.astype(jnp.int32)

    def each():
        return entries, (jnp.arange(size) < total).astype(jnp.int32), total.astype(jnp.int32)

    chosen, multiplicity, number = lax.cond(total <= capacity, distinct, each)
    pad = jnp.zeros(chunk, jnp.int32)
    chosen, multiplicity = jnp.concatenate([chosen, pad]), jnp.concatenate([multiplicity, pad])

    def body(k, blocks):
        row, slots = where(lax.dynamic_slice_in_dim(chosen, k * chunk, chunk))
        times = lax.dynamic_slice_in_dim(multiplicity, k * chunk, chunk).astype(vertices.dtype)
        points = vertices[jnp.take_along_axis(corners[row], slots, axis=1)]
        reach_sq = dhat_sq[row] if jnp.ndim(dhat_sq) else dhat_sq
        values = times[:, None, None] * _primitive_blocks(points, reach_sq, edge_edge, exact)
        dofs = (3 * slots[:, :, None] + jnp.arange(3)).reshape(-1, 12)
        return blocks.at[row[:, None, None], dofs[:, :, None], dofs[:, None, :]].add(values)

    return lax.fori_loop(0, (number + chunk - 1) // chunk, body, blocks)


def _primitive_blocks(points, dhat_sq, edge_edge: bool, exact):
    """``_primitive_hessian`` (``exact``) or ``_primitive_gauss_newton`` of each row of ``points``
    ``(N, 4, 3)`` with its ``dhat_sq`` (``(N,)``, or one for all); ``exact`` a bool, traced or not
    (one set of buffers and loops serves both)."""
    batched = 0 if jnp.ndim(dhat_sq) else None
    hessian = jax.vmap(lambda p, d: _primitive_hessian(p, d, edge_edge), in_axes=(0, batched))
    gauss_newton = jax.vmap(lambda p, d: _primitive_gauss_newton(p, d, edge_edge), in_axes=(0, batched))
    if isinstance(exact, bool):
        return (hessian if exact else gauss_newton)(points, dhat_sq)
    return lax.cond(exact, hessian, gauss_newton, points, dhat_sq)


def barrier_blocks(vertices, faces, pairs, count, dhat, *, exact) -> BlockSystem:
    """The Hessian of ``barrier_energy`` over the first ``count`` of ``pairs``, as blocks on those
    pairs (``_live_blocks``: their sum is the matrix, not each its own pair's); ``exact`` (a bool,
    traced or not) chooses the exact Hessian or its PSD Gauss-Newton form.

    The exact one is not projected: a block may be indefinite (the barrier's pull along a distance's
    tangent is concave); the sum with a stiff elastic part is PSD near a minimum, and CG stops on
    negative curvature elsewhere. Projected blocks, or Gauss-Newton ones, drop that curvature and
    Newton then converges only linearly, ~0.6 per step (docs/untangling.md)."""
    return _live_blocks(vertices, faces, pairs, count, dhat, exact)


def block_vector_product(system: BlockSystem, x: Float[Array, "V 3"]) -> Float[Array, "V 3"]:
    """$\\left(\\sum_p H_p\\right) x$ for a [`BlockSystem`][tritri_jax._barrier.BlockSystem]."""
    local = x[system.corners].reshape(-1, 18)
    return scatter_to_vertices(jnp.einsum("pnm,pm->pn", system.blocks, local), system.corners, x.shape[0])

"""Layer 3: lift the pair kernels to a mesh: gather candidate pairs, vmap, sum, scatter.

The solver-facing pieces never form an 18 x 18 block: a [`PairSystem`][tritri_jax.PairSystem]
keeps each pair's Gauss-Newton factor (a 2 x 18 orthonormal basis and a 2 x 2 PSD core), and
[`hessian_vector_product`][tritri_jax.hessian_vector_product] applies the summed Hessian with one
gather, two small contractions per pair and one segment sum.
"""

import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _exact
from ._broad_phase import CandidatePairs, candidate_pairs, stream_compact
from ._distance import (
    NUM_POINT_TRIANGLE,
    PRIMITIVE_CORNERS,
    barrier,
    pair_barrier,
    primitive_barrier,
    primitive_distances_sq,
    primitive_ratio,
)
from ._kernels import certainly_apart, classify, crossing_length, gauss_newton_factor, pair_energy
from ._safe import safe_divide
from ._types import Array, Faces, Float, Int, Vertices
from ._vec3 import SOA

_MEASURES = {"energy": pair_energy, "length": crossing_length}


# ----------------------------------------------------------------------------- input checks


def check_mesh(vertices, faces, *, name="mesh"):
    """Validate a mesh at a public entry point and return ``(vertices, faces)`` as JAX arrays.

    Shape and dtype problems raise ``ValueError`` at trace time. Value problems (non-finite
    coordinates, indices out of range, a face repeating a vertex) raise ``ValueError`` right away
    on concrete input; on traced input they become an ``equinox`` runtime error. Nothing passed in
    is modified. Empty meshes and zero-area faces are valid.
    """
    vertices = jnp.asarray(vertices)
    faces = jnp.asarray(faces)
    if vertices.ndim != 2 or vertices.shape[-1] != 3:
        raise ValueError(f"{name}: vertices must have shape (V, 3), got {vertices.shape}")
    if faces.ndim != 2 or faces.shape[-1] != 3:
        if faces.size == 0:
            faces = faces.reshape(0, 3)
        else:
            raise ValueError(f"{name}: faces must have shape (F, 3), got {faces.shape}")
    if not jnp.issubdtype(vertices.dtype, jnp.floating):
        if jnp.issubdtype(vertices.dtype, jnp.integer):
            vertices = vertices.astype(jnp.result_type(float))
        else:
            raise ValueError(f"{name}: vertices must be floating point, got {vertices.dtype}")
    if not jnp.issubdtype(faces.dtype, jnp.integer):
        raise ValueError(f"{name}: faces must be integers, got {faces.dtype}")
    faces = faces.astype(jnp.int32)
    num_vertices = vertices.shape[0]
    if isinstance(vertices, jax.core.Tracer) or isinstance(faces, jax.core.Tracer):
        bad_value = ~jnp.all(jnp.isfinite(vertices))
        vertices = eqx.error_if(vertices, bad_value, f"{name}: vertices contain NaN or infinite coordinates")
        out_of_range = jnp.any((faces < 0) | (faces >= num_vertices))
        faces = eqx.error_if(faces, out_of_range, f"{name}: face indices out of range [0, {num_vertices})")
        repeated = jnp.any((faces[:, 0] == faces[:, 1]) | (faces[:, 1] == faces[:, 2]) | (faces[:, 0] == faces[:, 2]))
        faces = eqx.error_if(faces, repeated, f"{name}: a face repeats a vertex")
        return vertices, faces
    v, f = np.asarray(vertices), np.asarray(faces)
    if not np.all(np.isfinite(v)):
        rows = np.flatnonzero(~np.all(np.isfinite(v), axis=1))
        raise ValueError(f"{name}: vertices contain NaN or infinite coordinates (first at vertex {rows[0]})")
    if f.size and (f.min() < 0 or f.max() >= num_vertices):
        row = int(np.flatnonzero(np.any((f < 0) | (f >= num_vertices), axis=1))[0])
        raise ValueError(f"{name}: face {row} = {f[row].tolist()} has an index out of range [0, {num_vertices})")
    repeated = (f[:, 0] == f[:, 1]) | (f[:, 1] == f[:, 2]) | (f[:, 0] == f[:, 2])
    if np.any(repeated):
        row = int(np.flatnonzero(repeated)[0])
        raise ValueError(f"{name}: face {row} = {f[row].tolist()} repeats a vertex")
    return vertices, faces


# ----------------------------------------------------------------------------- gather / scatter


def pair_triangles(vertices: Vertices, faces: Faces, pairs: Int[Array, "P 2"]):
    """The two triangles of every pair: ``(u, v)``, each ``(P, 3, 3)``. Padding rows (``-1``) give face 0."""
    safe = jnp.maximum(pairs, 0)
    tri = vertices[faces[safe]]  # (P, 2, 3, 3)
    return tri[:, 0], tri[:, 1]


def pair_mask(candidates: CandidatePairs):
    """Which of the ``capacity`` slots hold a pair."""
    return jnp.arange(candidates.pairs.shape[0]) < jnp.minimum(candidates.count, candidates.pairs.shape[0])


def scatter_to_vertices(values: Float[Array, "P 18"], corner_vertices: Int[Array, "P 6"], num_vertices: int):
    """Sum per-pair 18-vectors into a ``(V, 3)`` array (a segment sum over the six corners)."""
    return jax.ops.segment_sum(values.reshape(-1, 3), corner_vertices.reshape(-1), num_segments=num_vertices)


def _default_capacity(num_faces):
    return max(1024, 1 << math.ceil(math.log2(max(16 * num_faces, 1))))


def _candidates_for(vertices, faces, capacity, skip_vertex_adjacent, cell_size):
    """Candidates inside a (possibly traced) computation, raising on overflow."""
    if capacity is None:
        capacity = _default_capacity(faces.shape[0])
    candidates = candidate_pairs(
        jax.lax.stop_gradient(vertices),
        faces,
        capacity=capacity,
        cell_size=cell_size,
        skip_vertex_adjacent=skip_vertex_adjacent,
    )
    pairs = eqx.error_if(
        candidates.pairs,
        candidates.overflowed,
        "broad phase overflow: more candidate pairs than `capacity`; pass a larger capacity",
    )
    return candidates._replace(pairs=pairs)


# ----------------------------------------------------------------------------- energies


def intersection_energy(
    vertices: Vertices,
    faces: Faces,
    *,
    margin=0.0,
    measure: str = "energy",
    capacity: int | None = None,
    cell_size=None,
    skip_vertex_adjacent: bool = False,
) -> Float[Array, ""]:
    """Sum of the pair energies of all crossing pairs of a mesh: $E = \\sum_{(i,j)} T(f_i, f_j)$.

    Differentiable in ``vertices`` with ``jax.grad`` (the set of pairs is a constant of the
    differentiation) and usable inside a user's jitted loss. The broad phase runs inside; under
    ``jit`` its ``capacity`` (static) defaults to ``16 F`` rounded up to a power of two, and an
    overflow raises a runtime error asking for more.

    **Arguments:**

    - ``vertices`` ``(V, 3)``, ``faces`` ``(F, 3)``.
    - ``margin``: widen each pair's interval by this length (see [`pair_energy`][tritri_jax.pair_energy]).
    - ``measure``: ``"energy"`` (the paper's $T$, Eq. 2) or ``"length"`` (the crossing-segment
      length $\\ell$ of [`crossing_length`][tritri_jax.crossing_length]).
    - ``capacity``, ``cell_size``, ``skip_vertex_adjacent``: broad-phase options of
      [`candidate_pairs`][tritri_jax.candidate_pairs].

    ```python
    >>> import jax, tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(6)
    >>> energy = tt.intersection_energy(vertices, faces)
    >>> float(energy) > 0, jax.grad(tt.intersection_energy)(vertices, faces).shape
    (True, (124, 3))

    ```
    """
    if measure not in _MEASURES:
        raise ValueError(f"measure must be one of {sorted(_MEASURES)}, got {measure!r}")
    vertices, faces = check_mesh(vertices, faces)
    if faces.shape[0] < 2:
        return jnp.zeros((), vertices.dtype) + 0 * jnp.sum(vertices)
    candidates = _candidates_for(vertices, faces, capacity, skip_vertex_adjacent, cell_size)
    return pairs_energy(vertices, faces, candidates.pairs, pair_mask(candidates), margin=margin, measure=measure)


def pairs_energy(vertices, faces, pairs, mask, *, margin=0.0, measure="energy"):
    """The mesh energy over a given pair list (``pairs`` ``(P, 2)``, ``mask`` ``(P,)``)."""
    u, v = pair_triangles(vertices, faces, pairs)
    if measure == "energy":
        values = jax.vmap(lambda a, b: pair_energy(a, b, margin=margin))(u, v)
    else:
        values = jax.vmap(_MEASURES[measure])(u, v)
    return jnp.sum(jnp.where(mask, values, 0))


class PairSystem(NamedTuple):
    """Per-pair Gauss-Newton data of a mesh, for matrix-free Newton steps.

    - ``energy``: the summed energy; ``gradient``: ``(V, 3)``.
    - ``corners``: ``(P, 6)`` vertex indices of each pair's two faces.
    - ``basis`` ``(P, 2, 18)`` and ``core`` ``(P, 2, 2)``: pair ``p``'s projected Hessian is
      ``basis[p].T @ core[p] @ basis[p]``; inactive pairs have a zero core.
    """

    energy: Float[Array, ""]
    gradient: Float[Array, "V 3"]
    corners: Int[Array, "P 6"]
    basis: Float[Array, "P 2 18"]
    core: Float[Array, "P 2 2"]


def pair_system(vertices: Vertices, faces: Faces, pairs, mask, *, margin=0.0) -> PairSystem:
    """Energy, gradient and factored PSD Gauss-Newton Hessian of the mesh energy over ``pairs``."""
    u, v = pair_triangles(vertices, faces, pairs)
    factor = jax.vmap(lambda a, b: gauss_newton_factor(a, b, margin=margin))(u, v)
    corners = faces[jnp.maximum(pairs, 0)].reshape(-1, 6)
    gradient = jnp.where(mask[:, None], factor.gradient, 0)
    core = jnp.where(mask[:, None, None], factor.core, 0)
    return PairSystem(
        energy=jnp.sum(jnp.where(mask, factor.energy, 0)),
        gradient=scatter_to_vertices(gradient, corners, vertices.shape[0]),
        corners=corners,
        basis=factor.basis,
        core=core,
    )


def hessian_vector_product(system: PairSystem, x: Float[Array, "V 3"]) -> Float[Array, "V 3"]:
    """$\\left(\\sum_p H_p^+\\right) x$ from the factored blocks, without forming any matrix."""
    local = x[system.corners].reshape(-1, 18)
    y = jnp.einsum("pkn,pn->pk", system.basis, local)
    z = jnp.einsum("pkl,pl->pk", system.core, y)
    out = jnp.einsum("pkn,pk->pn", system.basis, z)
    return scatter_to_vertices(out, system.corners, x.shape[0])


# ----------------------------------------------------------------------------- barrier (near pairs)


def shared_vertices(faces: Faces, pairs: Int[Array, "P 2"]):
    """``(P, 3, 3)`` bool: vertex ``i`` of each pair's first face is vertex ``j`` of its second."""
    corners = faces[jnp.maximum(pairs, 0)]
    return corners[:, 0, :, None] == corners[:, 1, None, :]


def barrier_energy(vertices, faces, pairs, count, dhat, chunk: int = 64):
    """$\\sum$ of [`pair_barrier`][tritri_jax._distance.pair_barrier] over the first ``count`` of
    ``pairs`` (distances in ``dhat``); differentiable in ``vertices`` and ``dhat`` to any order.

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
    total = (zero, jnp.zeros_like(vertices), zero) if gradient else zero
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

        def chunk_sum(u, v, dhat):
            values = jax.vmap(pair_barrier, in_axes=(0, 0, 0, None))(u, v, same, dhat**2)
            return jnp.sum(jnp.where(slots < count, values, 0))

        def live():
            u, v = pair_triangles(vertices, faces, rows)
            if not gradient:
                return total + chunk_sum(u, v, dhat)
            value, (du, dv, ddhat) = jax.value_and_grad(chunk_sum, argnums=(0, 1, 2))(u, v, dhat)
            corners = faces[jnp.maximum(rows, 0)].reshape(-1, 6)
            moved = scatter_to_vertices(jnp.stack([du, dv], 1).reshape(-1, 18), corners, vertices.shape[0])
            return total[0] + value, total[1] + moved, total[2] + ddhat

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
    return value, jnp.sum(by_vertices * vertices_dot) + by_dhat * dhat_dot


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

    gradient, (r, mollifier) = jax.grad(ratio, has_aux=True)(points.reshape(-1))
    slope = jax.grad(barrier)(r)
    curvature = jax.grad(jax.grad(barrier))(r) + safe_divide(slope, 2 * r)
    return mollifier * jnp.maximum(curvature, 0.0) * jnp.outer(gradient, gradient)


def _primitive_hessian(points, dhat_sq, edge_edge: bool):
    """Exact ``12 x 12`` Hessian of one primitive pair's barrier term, in the order of its four points."""
    return jax.hessian(lambda q: primitive_barrier(q.reshape(4, 3), dhat_sq, edge_edge))(points.reshape(-1))


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
    dhat_sq = dhat**2
    corners = faces[jnp.maximum(pairs, 0)].reshape(-1, 6)
    u, v = pair_triangles(lax.stop_gradient(vertices), faces, pairs)
    distances = jax.vmap(lambda a, b, same: primitive_distances_sq(a, b, same, SOA))
    dist, counted, _ = distances(u, v, shared_vertices(faces, pairs))
    active = (jnp.arange(capacity) < count)[:, None] & counted & (dist < dhat_sq)
    blocks = jnp.zeros((capacity, 18, 18), vertices.dtype)
    if capacity == 0:
        return BlockSystem(corners, blocks)
    for edge_edge, kinds in ((False, slice(0, NUM_POINT_TRIANGLE)), (True, slice(NUM_POINT_TRIANGLE, None))):
        table = jnp.asarray(PRIMITIVE_CORNERS[kinds], jnp.int32)
        blocks = _add_kind(blocks, vertices, corners, active[:, kinds], table, dhat_sq, edge_edge, exact, chunk)
    return BlockSystem(corners, blocks)


def _add_kind(blocks, vertices, corners, active, table, dhat_sq, edge_edge: bool, exact, chunk: int):
    """``_live_blocks`` for one kind of primitive pair: ``active`` ``(P, m)`` marks those within
    ``dhat``, ``table`` ``(m, 4)`` their corners among the face pair's six; each distinct one (or
    each one, when more are active than ``P``) is added, times its count, into ``blocks``."""
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
        values = times[:, None, None] * _primitive_blocks(points, dhat_sq, edge_edge, exact)
        dofs = (3 * slots[:, :, None] + jnp.arange(3)).reshape(-1, 12)
        return blocks.at[row[:, None, None], dofs[:, :, None], dofs[:, None, :]].add(values)

    return lax.fori_loop(0, (number + chunk - 1) // chunk, body, blocks)


def _primitive_blocks(points, dhat_sq, edge_edge: bool, exact):
    """``_primitive_hessian`` (``exact``) or ``_primitive_gauss_newton`` of each row of ``points``
    ``(N, 4, 3)``; ``exact`` a bool, traced or not (one set of buffers and loops serves both)."""
    hessian = jax.vmap(lambda p: _primitive_hessian(p, dhat_sq, edge_edge))
    gauss_newton = jax.vmap(lambda p: _primitive_gauss_newton(p, dhat_sq, edge_edge))
    if isinstance(exact, bool):
        return (hessian if exact else gauss_newton)(points)
    return lax.cond(exact, hessian, gauss_newton, points)


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
    """$\\left(\\sum_p H_p\\right) x$ for a [`BlockSystem`][tritri_jax._mesh_energy.BlockSystem]."""
    local = x[system.corners].reshape(-1, 18)
    return scatter_to_vertices(jnp.einsum("pnm,pm->pn", system.blocks, local), system.corners, x.shape[0])


# ----------------------------------------------------------------------------- detection


_candidates_jit = jax.jit(candidate_pairs, static_argnames=("capacity", "skip_vertex_adjacent", "include_shared_edges"))


class Detection(NamedTuple):
    """What the device part of detection found (fixed shapes; for the solver and ``detect``).

    ``pairs`` ``(flagged_capacity, 2)``: the candidate pairs that the float kernel calls crossing or
    ambiguous (within rounding distance of flipping), with both verdicts in ``crossing`` and
    ``ambiguous``; rows past ``num_flagged`` are padding. The three counts are true counts even past
    their buffers, so a caller can tell which buffer to grow.
    """

    pairs: Int[Array, "K 2"]
    crossing: Array
    ambiguous: Array
    num_flagged: Int[Array, ""]
    num_candidates: Int[Array, ""]
    num_survivors: Int[Array, ""]

    def mask(self):
        """Which rows of ``pairs`` hold a pair."""
        return jnp.arange(self.pairs.shape[0]) < jnp.minimum(self.num_flagged, self.pairs.shape[0])

    def overflowed(self, capacity, survivor_capacity):
        return (
            (self.num_candidates > capacity)
            | (self.num_survivors > survivor_capacity)
            | (self.num_flagged > self.pairs.shape[0])
        )


def detect_on_device(
    vertices,
    faces,
    *,
    capacity: int,
    survivor_capacity: int,
    flagged_capacity: int,
    cell_size=None,
    skip_vertex_adjacent: bool = False,
    include_shared_edges: bool = True,
) -> Detection:
    """Broad phase, plane-side early-out and float kernel, all inside ``jit``, each stage streamed over
    the previous stage's actual count (not its capacity), so that the kernels run on the few pairs
    that need them."""
    candidates = candidate_pairs(
        vertices,
        faces,
        capacity=capacity,
        cell_size=cell_size,
        skip_vertex_adjacent=skip_vertex_adjacent,
        include_shared_edges=include_shared_edges,
    )
    return judge_pairs(
        vertices,
        faces,
        candidates.pairs,
        candidates.count,
        survivor_capacity=survivor_capacity,
        flagged_capacity=flagged_capacity,
    )


def judge_pairs(
    vertices, faces, pairs, count, *, survivor_capacity: int, flagged_capacity: int, keep_ambiguous: bool = True
) -> Detection:
    """The early-out and float kernel of ``detect_on_device`` on a given pair list (its first ``count``
    rows). With ``keep_ambiguous=False`` only crossing pairs are kept, so ``num_flagged`` counts them."""
    capacity = pairs.shape[0]
    num_candidates = jnp.minimum(count, capacity)
    chunk = min(1 << 15, _bucket(faces.shape[0]), _bucket(capacity))

    corners = vertices[faces]  # (F, 3, 3), gathered once: per pair, two row reads instead of six

    def survive(slot):
        rows = pairs[jnp.minimum(slot, capacity - 1)]
        u, v = corners[jnp.maximum(rows[:, 0], 0)], corners[jnp.maximum(rows[:, 1], 0)]
        return (slot < num_candidates) & ~jax.vmap(certainly_apart)(u, v), rows

    empty = jnp.full((survivor_capacity, 2), -1, jnp.int32)
    survivors, num_survivors = stream_compact(survive, num_candidates, chunk, empty)
    stored = jnp.minimum(num_survivors, survivor_capacity)

    def judge(slot):
        rows = survivors[jnp.minimum(slot, survivor_capacity - 1)]
        u, v = pair_triangles(vertices, faces, rows)
        crossing, ambiguous = jax.vmap(classify)(u, v)
        keep = (crossing | ambiguous) if keep_ambiguous else crossing
        return (slot < stored) & keep, (rows, crossing, ambiguous)

    flagged = (
        jnp.full((flagged_capacity, 2), -1, jnp.int32),
        jnp.zeros(flagged_capacity, bool),
        jnp.zeros(flagged_capacity, bool),
    )
    (rows, crossing, ambiguous), num_flagged = stream_compact(judge, stored, chunk, flagged)
    return Detection(rows, crossing, ambiguous, num_flagged, count, num_survivors)


_detect_on_device_jit = jax.jit(
    detect_on_device,
    static_argnames=(
        "capacity",
        "survivor_capacity",
        "flagged_capacity",
        "skip_vertex_adjacent",
        "include_shared_edges",
    ),
)
detection_jits = (_candidates_jit, _detect_on_device_jit)  # what ``untangle`` clears when crowded


def detect(vertices, faces, *, capacity=None, cell_size=None, skip_vertex_adjacent=False):
    """Eager detection: the device pipeline of ``detect_on_device`` with capacities grown on overflow,
    then exact settling of the ambiguous pairs on the host.

    Returns ``(pairs, capacity used)`` with ``pairs`` a numpy ``(K, 2)`` array (unsorted).
    """
    num_faces = faces.shape[0]
    capacity = capacity or _default_capacity(num_faces)
    survivor_capacity = _bucket(2 * num_faces)
    flagged_capacity = _bucket(num_faces // 4)
    while True:
        found = _detect_on_device_jit(
            vertices,
            faces,
            capacity=capacity,
            survivor_capacity=survivor_capacity,
            flagged_capacity=flagged_capacity,
            cell_size=cell_size,
            skip_vertex_adjacent=skip_vertex_adjacent,
        )
        if int(found.num_candidates) > capacity:
            capacity = _bucket(int(found.num_candidates))
        elif int(found.num_survivors) > survivor_capacity:
            survivor_capacity = _bucket(int(found.num_survivors))
        elif int(found.num_flagged) > flagged_capacity:
            flagged_capacity = _bucket(int(found.num_flagged))
        else:
            break
    n = int(found.num_flagged)
    pairs, crossing, ambiguous = (
        np.asarray(found.pairs[:n]),
        np.array(found.crossing[:n]),
        np.asarray(found.ambiguous[:n]),
    )
    if ambiguous.any():
        v, f = np.asarray(vertices, np.float64), np.asarray(faces)
        for k in np.flatnonzero(ambiguous):
            i, j = pairs[k]
            crossing[k] = _exact.decide(v[f[i]], v[f[j]], f[i], f[j])
    return pairs[crossing].astype(np.int64), capacity


def _bucket(n):
    """Round sizes up to powers of two, so repeated calls reuse a few compiled shapes."""
    return max(1024, 1 << math.ceil(math.log2(max(n, 1))))


def find_intersections(vertices: Vertices, faces: Faces, *, skip_vertex_adjacent: bool = False, cell_size=None):
    """All crossing face pairs of a mesh, as a sorted ``(K, 2)`` numpy array of ``(i, j)``, ``i < j``.

    The float kernels decide every candidate pair inside ``jit`` and flag those within rounding
    distance of touching; those few are settled on the host in exact rational arithmetic, so the
    answer is exact for the input's binary values and agrees with libigl's
    ``predicates::find_self_intersections``:

    - pairs sharing no vertex are reported when the closed triangles meet (touching counts: a mesh
      whose faces only touch is not intersection-free);
    - pairs sharing one vertex are reported when one folds through the other (that vertex lies
      exactly on both planes; meeting only at it is not an intersection);
    - pairs sharing an edge are reported only when folded flat onto each other (coplanar overlap);
    - zero-area faces never intersect anything.

    The broad-phase capacity is chosen and grown automatically.

    **Arguments:**

    - ``vertices`` ``(V, 3)`` float, ``faces`` ``(F, 3)`` int (numpy or JAX arrays).
    - ``skip_vertex_adjacent``: skip every pair that shares a vertex, as the paper does.
    - ``cell_size``: broad-phase grid cell size (default: derived from the faces' extents).

    ```python
    >>> import tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(8)
    >>> pairs = tt.find_intersections(vertices, faces)
    >>> pairs.shape[1], bool((pairs[:, 0] < pairs[:, 1]).all())
    (2, True)

    ```
    """
    vertices, faces = check_mesh(vertices, faces)
    if faces.shape[0] < 2:
        return np.zeros((0, 2), np.int64)
    pairs, _ = detect(vertices, faces, cell_size=cell_size, skip_vertex_adjacent=skip_vertex_adjacent)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]

"""Layer 3: lift the pair kernels to a mesh: gather candidate pairs, vmap, sum, scatter.

The solver-facing pieces never form an 18 x 18 block: a [`PairSystem`][tritri_jax.PairSystem]
keeps each pair's Gauss-Newton factor (a 2 x 18 orthonormal basis and a 2 x 2 PSD core), and
[`hessian_vector_product`][tritri_jax.hessian_vector_product] applies the summed Hessian with one
gather, two small contractions per pair and one segment sum.
"""

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _exact
from ._broad_phase import CandidatePairs, candidate_pairs, stream_compact
from ._distance import barrier, pair_barrier, primitive_distances_sq
from ._kernels import certainly_apart, classify, crossing_length, gauss_newton_factor, pair_energy
from ._safe import safe_divide
from ._types import Array, Faces, Float, Int, Vertices

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
    ``pairs`` (distances in ``dhat``).

    A ``lax.scan`` over chunks of ``chunk`` rows, each behind a ``lax.cond`` on whether it holds a
    live row. Phase 2's buffer is sized for growth (four times the close pairs at its start), and
    evaluating all of it cost 4.0 ms for the energy and 12.5 ms with its gradient, against 0.9 and
    6.1 ms now (pretzel, 232 of 1,024 rows live). A scan of conds is differentiable in both modes,
    unlike a loop with a traced trip count, and traces the barrier once (a ``lax.switch`` over
    prefix sizes traced it per branch and doubled phase 2's compile time)."""
    capacity = pairs.shape[0]
    if capacity == 0:
        return jnp.zeros((), vertices.dtype)
    chunk = min(chunk, capacity)
    pad = -capacity % chunk
    rows = jnp.concatenate([pairs, jnp.full((pad, 2), -1, pairs.dtype)]).reshape(-1, chunk, 2)
    slots = jnp.arange(capacity + pad).reshape(-1, chunk)

    def one_chunk(total, chunk_rows):
        rows, slots = chunk_rows

        def live():
            u, v = pair_triangles(vertices, faces, rows)
            values = jax.vmap(pair_barrier, in_axes=(0, 0, 0, None))(u, v, shared_vertices(faces, rows), dhat**2)
            return jnp.sum(jnp.where(slots < count, values, 0))

        return total + lax.cond(slots[0] < count, live, lambda: jnp.zeros((), vertices.dtype)), None

    return lax.scan(one_chunk, jnp.zeros((), vertices.dtype), (rows, slots))[0]


class BlockSystem(NamedTuple):
    """A sum of dense per-pair 18 x 18 blocks: ``blocks[p]`` acts on the six corners ``corners[p]``."""

    corners: Int[Array, "P 6"]
    blocks: Float[Array, "P 18 18"]


def _barrier_block(u, v, same, dhat_sq):
    """Gauss-Newton block of one pair's barrier in the distances $\\rho_k = d_k / \\hat d$ (PSD):

    $$ \\sum_k m_k\\, B''(\\rho_k)\\, \\nabla \\rho_k \\nabla \\rho_k^T
       = \\sum_k m_k \\left(b''(r_k) + \\frac{b'(r_k)}{2 r_k}\\right) \\nabla r_k \\nabla r_k^T,
       \\qquad B(\\rho) = b(\\rho^2), $$

    exact along each distance gradient (Gauss-Newton in $r = \\rho^2$ would drop $2 b'(r) < 0$ there).
    The weight is positive wherever the log is evaluated; it is clamped at 0 on the linear
    continuation below the floor.
    """

    def ratios(x):
        dist, counted, molli = primitive_distances_sq(x[:9].reshape(3, 3), x[9:].reshape(3, 3), same)
        r = dist / dhat_sq
        return r, (r, counted, molli)

    x = jnp.concatenate([u.reshape(-1), v.reshape(-1)])
    jacobian, (r, counted, molli) = jax.jacfwd(ratios, has_aux=True)(x)
    slope = jax.vmap(jax.grad(barrier))(r)
    curvature = jax.vmap(jax.grad(jax.grad(barrier)))(r) + safe_divide(slope, 2 * r)
    weight = jnp.where(counted, molli * jnp.maximum(curvature, 0.0), 0.0)
    return jnp.einsum("kn,k,km->nm", jacobian, weight, jacobian)


def _pair_barrier_hessian(u, v, same, dhat_sq):
    """Exact 18 x 18 Hessian of one pair's barrier (in the order ``u``'s corners, then ``v``'s)."""

    def energy(x):
        return pair_barrier(x[:9].reshape(3, 3), x[9:].reshape(3, 3), same, dhat_sq)

    return jax.hessian(energy)(jnp.concatenate([u.reshape(-1), v.reshape(-1)]))


def _live_blocks(block, vertices, faces, pairs, count, dhat, chunk: int = 16) -> BlockSystem:
    """``block(u, v, same, dhat_sq)`` of the first ``count`` pairs, in chunks of ``chunk`` up to the
    live count (a per-pair Hessian costs ~0.1 ms: all of a 1024-slot buffer took 275 ms per Newton
    step for 6 live pairs); the other rows are zero."""
    capacity = pairs.shape[0]
    chunk = min(chunk, capacity)
    padded = jnp.concatenate([pairs, jnp.full((chunk, 2), -1, pairs.dtype)])

    def body(k, blocks):
        rows = lax.dynamic_slice_in_dim(padded, k * chunk, chunk)
        u, v = pair_triangles(vertices, faces, rows)
        values = jax.vmap(block, in_axes=(0, 0, 0, None))(u, v, shared_vertices(faces, rows), dhat**2)
        live = k * chunk + jnp.arange(chunk) < count
        return lax.dynamic_update_slice_in_dim(blocks, jnp.where(live[:, None, None], values, 0), k * chunk, 0)

    blocks = jnp.zeros((capacity + chunk, 18, 18), vertices.dtype)
    blocks = lax.fori_loop(0, (jnp.minimum(count, capacity) + chunk - 1) // chunk, body, blocks)
    return BlockSystem(faces[jnp.maximum(pairs, 0)].reshape(-1, 6), blocks[:capacity])


def barrier_gauss_newton(vertices, faces, pairs, count, dhat) -> BlockSystem:
    """PSD Gauss-Newton blocks of ``barrier_energy`` over the first ``count`` of ``pairs``."""
    return _live_blocks(_barrier_block, vertices, faces, pairs, count, dhat)


def barrier_hessian(vertices, faces, pairs, count, dhat) -> BlockSystem:
    """Exact per-pair Hessian blocks of ``barrier_energy`` over the first ``count`` of ``pairs``.
    Not projected: a block may be indefinite (the barrier's pull along a distance's tangent is
    concave); the sum with a stiff elastic part is PSD near a minimum, and CG stops on negative
    curvature elsewhere. Projected blocks, or Gauss-Newton ones, drop that curvature and Newton then
    converges only linearly, ~0.6 per step (docs/untangling.md)."""
    return _live_blocks(_pair_barrier_hessian, vertices, faces, pairs, count, dhat)


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

r"""Layer 4: phase 1 of ``untangle``: smoothed descent on the length of the intersection curve.

Phase 1 recipe (DESIGN.md §1, "What did reach zero"): on a mesh scaled to unit bounding-box
diagonal, with ``u = max(h, resolution)`` its length unit (``h`` the mean edge length), each step

1. re-detects the crossing pairs (broad phase, plane-side early-out and float predicate, inside
   ``jit``, each stage on the previous one's survivors only);
2. takes the gradient ``g`` of the summed crossing-segment length $\sum \ell$ on the crossing
   pairs (it vanishes continuously as a crossing shrinks or a poke retracts, and does not fade);
3. smooths it in the metric of the mesh Laplacian, $d = -(I + \lambda L)^{-2} g$, two matrix-free
   CG solves ("large steps", Nicolet et al. 2021), $\lambda$ in squared edge rings times
   $(u / h)^2$ so that a finer mesh smooths over as much of the surface;
4. scales the step so the largest vertex move is ``step_fraction * u`` (no line search);
5. halves $\lambda$ (down to ``min_smoothing``) when ``patience`` steps have not taken a tenth off
   the crossing count, and keeps the best state seen (counted with no buffer full);
6. if ``max_steps`` pass without reaching zero, starts over from the input with another recipe
   (``restarts`` times): a quarter of the smoothing, then half the step with the full smoothing,
   alternately. Measured: a fixed 0.2 h step left the three-twist knot oscillating around 50 pairs
   for 400 steps, while 0.1 h untangled it in 30; a deep fold that 80 rings of smoothing left at 61
   pairs untangled with 20 (docs/untangling.md).

It stops when the float predicate finds no crossing pair; the eager wrapper then certifies the
result with the exact detection of ``find_intersections`` and resumes if that disagrees.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.sparse.linalg import cg

from ._detect import detect_on_device, detect_on_devices, find_intersections
from ._elastic import laplacian_matrix
from ._fairing import fair_crossings
from ._global import global_moves
from ._memory import releasable_jit
from ._mesh_energy import pairs_energy
from ._multigrid import Ell, ell
from ._sizes import bucket, pad_mesh, slot_bucket
from ._types import Array


class Capacities(NamedTuple):
    """Static buffer sizes of the detection inside phase 1 (grown by the eager wrapper)."""

    candidates: int
    survivors: int
    flagged: int

    @staticmethod
    def for_faces(num_faces, candidates=None):
        return Capacities(candidates or bucket(16 * num_faces), bucket(2 * num_faces), bucket(num_faces // 4))

    def doubled(self):
        return Capacities(*(2 * c for c in self))


def crossing_pairs(x, faces, capacities: Capacities, num_faces=None, device_mesh=None):
    """The pairs the float predicate calls crossing (``pairs``, ``crossing`` mask) and an overflow flag.
    ``num_faces``: as in ``candidate_pairs`` (the rows of ``faces`` past it are shape padding).
    ``device_mesh``: each device finds its share of the pairs (``_detect.detect_on_devices``;
    ``capacities`` per device); all of them come back replicated (each device's buffer in turn, so
    a big face's pairs come in its device's share, not last as on one device), and what follows
    computes what it would on one device, up to the order of the pairs' sums."""
    options = dict(
        capacity=capacities.candidates,
        survivor_capacity=capacities.survivors,
        flagged_capacity=capacities.flagged,
        include_shared_edges=False,
        num_faces=num_faces,
    )
    if device_mesh is None:
        found = detect_on_device(x, faces, **options)
        crossing = found.crossing & found.mask()
        return found.pairs, crossing, found.overflowed(capacities.candidates, capacities.survivors)
    found = detect_on_devices(x, faces, device_mesh=device_mesh, **options)
    everywhere = jax.sharding.NamedSharding(device_mesh, jax.sharding.PartitionSpec())
    crossing = found.crossing & found.mask()
    pairs, crossing = (jax.sharding.reshard(a.reshape(-1, *a.shape[2:]), everywhere) for a in (found.pairs, crossing))
    return pairs, crossing, jnp.any(found.overflowed(capacities.candidates, capacities.survivors))


def length_gradient(x, faces, pairs, crossing):
    """The intersection-curve length $\\sum \\ell$ over the crossing pairs, and its gradient."""
    return jax.value_and_grad(pairs_energy)(x, faces, pairs, crossing, measure="length")


class _State(NamedTuple):
    x: Array
    best_x: Array
    best_count: Array
    count: Array
    smoothing: Array
    stall: Array
    reference: Array  # the count when the stall counter was last reset
    step: Array
    history: Array
    lengths: Array
    overflowed: Array


def _phase1(
    x0,
    faces,
    num_faces,
    laplace: Ell,
    h,
    state,
    step_fraction,
    step_limit,
    min_smoothing,
    cg_iters,
    *,
    capacities,
    patience,
    device_mesh=None,
):
    """Phase-1 steps from ``state`` until no float crossing, ``step_limit`` steps, or an overflow.

    The mesh may be padded to its shape bucket (``_sizes.pad_mesh``): the faces past ``num_faces``
    take part in nothing, and the padding vertices, in no edge and no crossing, never move.

    ``laplace``: the mesh's uniform Laplacian as an ELLPACK matrix, one gather per slot (up to 100
    products per step, in the two smoothing solves). As two scatters over the edges
    (``_elastic.laplacian``), phase 1 took 0.45 s on the pretzel, against 0.29 s now, in the same
    20 steps."""

    def smooth(g, lam):
        def op(y):
            return y + lam * laplace(y)

        y, _ = cg(op, g, x0=g, maxiter=cg_iters)
        y, _ = cg(op, y, x0=y, maxiter=cg_iters)
        return y

    def cond(s):
        return (s.step < step_limit) & (s.count != 0) & ~s.overflowed

    def body(s):
        pairs, crossing, overflowed = crossing_pairs(s.x, faces, capacities, num_faces, device_mesh)
        count = jnp.sum(crossing).astype(jnp.int32)
        # a full buffer undercounts: such a count is no minimum (it would pin the best state to the
        # point where the buffer overflowed, whatever later steps reach); the wrapper grows the
        # buffers and resumes from this state
        improved = (count < s.best_count) & ~overflowed
        best_x = jnp.where(improved, s.x, s.best_x)
        best_count = jnp.where(improved, count, s.best_count)
        # progress is a tenth off the count since the last reset, not any new minimum: a count that
        # creeps down (a deep fold's) halves the smoothing as a stalled one does
        progress = improved & (10 * count <= 9 * s.reference)
        stall = jnp.where(progress, 0, s.stall + ~overflowed)
        lam = jnp.where(stall >= patience, jnp.maximum(s.smoothing / 2, min_smoothing), s.smoothing)
        reference = jnp.where(progress | (stall >= patience), count, s.reference)  # (no reset when overflowed)
        stall = jnp.where(stall >= patience, 0, stall)
        length, g = length_gradient(s.x, faces, pairs, crossing)
        d = -smooth(g, lam)
        largest = jnp.max(jnp.sqrt(jnp.sum(d * d, axis=1)))
        d = d * jnp.where(largest > 0, step_fraction * h / jnp.where(largest > 0, largest, 1), 0)
        moving = (count > 0) & ~overflowed
        return _State(
            x=jnp.where(moving, s.x + d, s.x),
            best_x=best_x,
            best_count=best_count,
            count=count,
            smoothing=lam,
            stall=stall,
            reference=reference,
            step=s.step + moving.astype(jnp.int32),
            history=s.history.at[s.step].set(count, mode="drop"),
            lengths=s.lengths.at[s.step].set(length, mode="drop"),
            overflowed=overflowed,
        )

    return lax.while_loop(cond, body, state)


phase1_jit = releasable_jit(_phase1, static_argnames=("capacities", "patience", "device_mesh"))


class Phase1(NamedTuple):
    """What ``run_phase1`` returns: the state ``x`` and the exact crossing pairs there, phase-1
    steps over all attempts, ``(counts, lengths)`` per step, the detection's buffer sizes it ended
    with, the fairing steps taken after stalled attempts (``_fairing``) and the global moves kept
    (``_global``)."""

    x: Array
    remaining: np.ndarray
    steps: int
    history: tuple[np.ndarray, np.ndarray]
    capacities: Capacities
    fairing_steps: int
    global_moves: int


def run_phase1(problem, settings, progress, floor: Capacities | None = None) -> Phase1:
    """Phase 1 with restarts on ``problem`` (``untangle``'s normalised mesh) with ``settings`` (its
    ``UntangleOptions``); the detection's buffers start at ``floor`` and grow on overflow. An attempt
    that ends with crossings left is followed, from its best state, by rigid global moves (parts
    moved clear of each other), up to ``settings.fairing_steps`` fairing steps, then global moves
    that also push regions back (``settings.global_moves`` in all); the next attempt starts from
    the input, or from the last state a global move reached.

    Runs on the mesh padded to its shape bucket (and the Laplacian's slots to theirs), so that the
    meshes of one bucket share one compiled phase 1."""
    dtype = problem.theta.dtype
    num_vertices, num_faces = problem.theta.shape[0], problem.faces.shape[0]
    theta, faces = (jnp.asarray(a) for a in pad_mesh(np.asarray(problem.theta), np.asarray(problem.faces)))
    capacities = Capacities.for_faces(faces.shape[0], settings.capacity)
    if floor is not None:
        capacities = Capacities(*map(max, capacities, floor))
    laplace = ell(laplacian_matrix(problem.edges_np, theta.shape[0]), dtype, width=slot_bucket)
    # phase 1's length unit: the mean edge length, or ``resolution`` where the mesh is finer, so that
    # a fine mesh steps (and smooths, over as much of the surface) as a coarser one of the same shape
    unit = max(problem.h, settings.resolution)
    rings = (unit / problem.h) ** 2  # the smoothing's lambda counts squared edge rings
    cg_iters = jnp.int32(np.ceil(settings.cg_iters * unit / problem.h))  # CG's reach in rings: sqrt(lambda)
    histories, lengths, total_steps, fairing, moves = [], [], 0, 0, 0
    start = theta
    chunk = 10 if progress else settings.max_steps
    for attempt in range(settings.restarts + 1):
        # each attempt after the first changes what moves: a quarter of the smoothing (more local
        # moves), then half the step with the full smoothing, and so on alternately
        fraction = settings.step_fraction / 2 ** (attempt // 2)
        smoothing = settings.smoothing / 4 ** (attempt % 2)
        state = _State(
            x=start,
            best_x=start,
            best_count=jnp.int32(jnp.iinfo(jnp.int32).max),
            count=jnp.int32(-1),
            smoothing=jnp.asarray(smoothing * rings, dtype),
            stall=jnp.int32(0),
            reference=jnp.int32(jnp.iinfo(jnp.int32).max // 10),
            step=jnp.int32(0),
            history=jnp.full((settings.max_steps,), -1, jnp.int32),
            lengths=jnp.zeros((settings.max_steps,), dtype),
            overflowed=jnp.bool_(False),
        )
        while True:
            limit = min(int(state.step) + chunk, settings.max_steps)
            state = phase1_jit(
                theta,
                faces,
                np.int32(num_faces),
                laplace,
                unit,
                state,
                jnp.asarray(fraction, dtype),
                jnp.int32(limit),
                jnp.asarray(settings.min_smoothing * rings, dtype),
                cg_iters,
                capacities=capacities,
                patience=settings.patience,
                device_mesh=settings.device_mesh,
            )
            if bool(state.overflowed):
                capacities = capacities.doubled()
                state = state._replace(overflowed=jnp.bool_(False))
                continue
            if progress:
                progress("untangle", total_steps + int(state.step), int(state.count))
            if int(state.count) != 0 and int(state.step) < settings.max_steps:
                continue
            x1 = jnp.asarray(np.asarray(state.x if int(state.count) == 0 else state.best_x)[:num_vertices])
            remaining = find_intersections(x1, problem.faces, device_mesh=settings.device_mesh)
            if len(remaining) and int(state.count) == 0 and int(state.step) < settings.max_steps:
                state = state._replace(count=jnp.int32(-1))  # exact check disagrees (touching): keep going
                continue
            break
        total_steps += int(state.step)
        histories.append(np.asarray(state.history[: int(state.step)]))
        lengths.append(np.asarray(state.lengths[: int(state.step)]))
        # escalation, cheapest for the shape first: a connected part moved clear of another (rigid),
        # fairing the crossing region, then global moves that also push regions back
        for kind in ("clear", "fair", "push"):
            if not len(remaining):
                break
            if kind == "fair" and settings.fairing_steps:
                faired, remaining, taken = fair_crossings(
                    x1,
                    problem.faces,
                    problem.edges_np,
                    problem.h,
                    unit,
                    remaining,
                    settings.fairing_steps,
                    rest=np.asarray(problem.theta),
                )
                x1, fairing = jnp.asarray(faired), fairing + taken
            elif kind != "fair" and moves < settings.global_moves:
                moved, remaining, taken = global_moves(
                    x1,
                    problem.faces,
                    problem.edges_np,
                    remaining,
                    unit,
                    settings.global_moves - moves,
                    origin=np.asarray(problem.theta),
                    pushes=kind == "push",
                )
                x1, moves = jnp.asarray(moved), moves + taken
                if taken:
                    start = jnp.asarray(pad_mesh(np.asarray(moved), np.asarray(problem.faces))[0])
        if len(remaining) == 0:
            break
    history = (np.concatenate(histories), np.concatenate(lengths))
    return Phase1(x1, remaining, total_steps, history, capacities, fairing, moves)

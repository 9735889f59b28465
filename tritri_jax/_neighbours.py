"""Layer 4: phase 2's neighbour lists: which face pairs can come within the barrier's reach, or cross,
anywhere along a capped Newton step.

A list holds the face pairs whose boxes, grown by $\\hat d/2$ + a skin, overlap, and stays valid while
no vertex is farther than the skin from the point it was built at (``advance`` keeps it, ``neighbours``
rebuilds it). The face pairs that share a vertex are kept apart from the broad phase: a lower bound of
each one's distance is carried from list to list and measured only where it falls below what a list
needs (``adjacent_bounds``). ``close_pairs`` (the barrier's pairs), ``checked_pairs`` and
``crossing_check`` (the line search's admissibility test) read a list.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._barrier import pair_reach, shared_vertices
from ._broad_phase import candidate_pairs, face_bounds, stream_compact
from ._detect import judge_pairs
from ._distance import pair_distance_sq
from ._elastic import ElasticPattern, RestShape, rest_shape
from ._mesh_energy import pair_triangles
from ._multigrid import Multigrid
from ._types import Array


class RelaxSetup(eqx.Module):
    """What phase 2 needs besides the positions: connectivity, buffer sizes (static) and weights."""

    faces: Array
    edges: Array
    adjacent: Array  # (A, 2) the face pairs that share a vertex or an edge (``adjacent_face_pairs``)
    capacity: int = eqx.field(static=True)  # neighbour-list slots (face pairs that share no vertex)
    active_capacity: int = eqx.field(static=True)  # pairs closer than dhat (barrier Hessian blocks)
    survivor_capacity: int = eqx.field(static=True)  # neighbours the crossing check examines closely
    bending: float
    pull: float
    margin: float  # dhat, in mean rest edge lengths h
    barrier_weight: float
    max_step: float  # largest vertex move per Newton step, in h
    pattern: ElasticPattern  # where the elastic Hessian's blocks sit (``elastic_hessian``)
    preconditioner: Multigrid | None = None  # of the constant elastic stiffness (``stiffness_matrix``)
    # With shape padding (``_sizes.pad_relax``): how many rows of ``faces`` and ``edges`` are real
    # (traced, so that the meshes of one bucket share the compiled phase 2); ``None``: all of them.
    num_faces: Array | None = None
    num_edges: Array | None = None
    local_reach: bool = eqx.field(static=True, default=False)  # a barrier reach per face (``barrier_reach``)

    def rest(self, theta) -> RestShape:
        """The rest shape ``theta`` measured on this mesh's (real) edges."""
        return rest_shape(theta, self.edges, num_edges=self.num_edges)


class Neighbours(eqx.Module):
    """A neighbour list and what is measured on it, valid while no vertex is farther than ``skin``
    from ``reference``, the point it was built at (see ``neighbours``).

    - ``pairs``, ``num_pairs``: the rows the crossing check reads: the nearby pairs (first rows)
      when they fit, else every neighbour (then the adjacent pairs that can cross are added at
      each point checked); ``capacity`` + A rows;
    - ``count``, ``overflowed``: the broad phase's true count (also past the buffer), and whether it
      was past it;
    - ``nearby``, ``num_nearby``: the pairs that can come within ``dhat`` during a step (unusable,
      and ``close_pairs`` falls back to all the neighbours, when more than fit);
    - ``origin``, ``close``, ``num_close``: the pairs closer than ``dhat`` at ``origin``, the last
      point it was used at, where the gradient and the Hessian are taken next;
    - ``bound``: for each face pair of ``setup.adjacent``, a lower bound of the distance between
      its non-incident primitives at ``reference`` (exact where it matters, ``adjacent_bounds``)."""

    pairs: Array
    num_pairs: Array
    count: Array
    overflowed: Array
    nearby: Array
    num_nearby: Array
    reference: Array
    skin: Array
    origin: Array
    close: Array
    num_close: Array
    bound: Array


_NEARBY_ROWS = 16  # nearby-list rows per row of the close-pair buffer
# the largest reach, in h, for which the nearby pairs are measured: beyond it they do not fit their
# buffer (figure-of-eight knot: 2.4k nearby at 0.125 h, 17k of 46k neighbours at 0.25 h)
_NEARBY_REACH = 0.125


def _nearby_rows(setup: RelaxSetup) -> int:
    return min(_NEARBY_ROWS * setup.active_capacity, setup.capacity)


def adjacent_face_pairs(faces) -> np.ndarray:
    """``(A, 2)`` int32, ``i < j``: the face pairs that share one vertex or two (an edge), each once
    (eager, NumPy). Phase 2's broad phase skips them: their boxes always meet, and on the benchmark
    meshes they were three quarters of the neighbours at small reach and most of every close-pair
    search (docs/untangling.md, "Neighbour lists and close pairs")."""
    faces = np.asarray(faces, np.int64)
    if len(faces) < 2:
        return np.zeros((0, 2), np.int32)
    vertex, face = faces.ravel(), np.repeat(np.arange(len(faces)), 3)
    order = np.argsort(vertex, kind="stable")
    vertex, face = vertex[order], face[order]
    found = []
    for offset in range(1, len(vertex)):  # corners of one vertex are contiguous: offsets up to its degree
        same = vertex[offset:] == vertex[:-offset]
        if not same.any():
            break
        found.append(np.stack([face[:-offset][same], face[offset:][same]], 1))
    if not found:
        return np.zeros((0, 2), np.int32)
    pairs = np.sort(np.concatenate(found), axis=1)
    keys, shared = np.unique(pairs[:, 0] * len(faces) + pairs[:, 1], return_counts=True)
    keys = keys[shared < 3]  # three shared vertices: a repeated face, no non-incident primitives
    return np.stack([keys // len(faces), keys % len(faces)], 1).astype(np.int32)


def _face_moves(x, reference, faces):
    """How far each face's farthest corner is from where it was at ``reference``: no point of the
    face moved farther (on the straight path between them too)."""
    moved = jnp.sqrt(jnp.sum((x - reference) ** 2, axis=1))
    return jnp.max(moved[faces], axis=1)


def _distances_sq(x, setup: RelaxSetup, rows):
    """The squared distance between the non-incident primitives of each face pair of ``rows``."""
    u, v = pair_triangles(x, setup.faces, rows)
    return jax.vmap(pair_distance_sq)(u, v, shared_vertices(setup.faces, rows))


def _adjacent_gaps(x, setup: RelaxSetup, bound, reference):
    """Lower bounds at ``x`` of the distances of ``setup.adjacent``, from ``bound`` at ``reference``:
    less how far the two faces have moved since (the distance between a primitive of each can
    shrink by no more)."""
    moved = _face_moves(x, reference, setup.faces)
    return bound - moved[setup.adjacent[:, 0]] - moved[setup.adjacent[:, 1]]


def adjacent_bounds(x, setup: RelaxSetup, bound, reference, below):
    """Lower bounds at ``x`` of the distances of ``setup.adjacent``: the bounds at ``reference``
    (``bound``; ``-inf`` where unknown) less how far the two faces have moved since
    (``_adjacent_gaps``), with the pairs whose bound is below ``below`` measured at ``x`` instead
    (so the bounds are exact there).

    Their distances change slowly: on the pretzel, after one step capped at 0.25 h, 10 % of the
    27k adjacent pairs had a bound below ``dhat`` (face moves), 81 % by the largest move alone."""
    num = setup.adjacent.shape[0]
    if num == 0:
        return bound
    bound = _adjacent_gaps(x, setup, bound, reference)

    def below_bound(slots):
        return (slots < num) & (bound[jnp.minimum(slots, num - 1)] < below), slots

    chunk = min(num, 1 << 14)
    order, count = stream_compact(below_bound, num, chunk, jnp.full((num,), num, jnp.int32))
    chunk = min(num, 1 << 10)

    def measure(state):
        start, bound = state
        slots = start + jnp.arange(chunk, dtype=jnp.int32)
        which = jnp.where(slots < count, order[jnp.minimum(slots, num - 1)], num)  # num: dropped
        rows = setup.adjacent[jnp.minimum(which, num - 1)]
        return start + chunk, bound.at[which].set(jnp.sqrt(_distances_sq(x, setup, rows)), mode="drop")

    _, bound = lax.while_loop(lambda s: s[0] < count, measure, (jnp.int32(0), bound))
    return bound


def _adjacent_below(x, setup: RelaxSetup, bound, reference, distance, into):
    """Append to ``into`` (buffer, count) the adjacent pairs whose bound at ``reference``, less their
    faces' moves since, is below ``distance``: every one that can be closer than it at ``x``."""
    num = setup.adjacent.shape[0]
    if num == 0:
        return into
    gap = _adjacent_gaps(x, setup, bound, reference)

    def candidate(slots):
        slot = jnp.minimum(slots, num - 1)
        return (slots < num) & (gap[slot] < distance), setup.adjacent[slot]

    return stream_compact(candidate, num, min(num, 1 << 14), *into)


def _fits(nearby, num_nearby):
    """Whether all the nearby pairs are in their buffer (if not, they are unusable: close pairs are
    then searched for among all the neighbours, and the crossing check reads all of them)."""
    return num_nearby <= nearby.shape[0]


def neighbours(x, setup: RelaxSetup, h, reach=None, previous: Neighbours | None = None, close_reach=None) -> Neighbours:
    """Face pairs that can come within ``dhat`` of each other, or cross, at any point no vertex of
    which is farther than ``reach`` from ``x`` (default: the largest step, ``max_step * h``).

    Also the pairs closer than ``dhat + 2 reach`` now: no point of a triangle moves farther than its
    corners, so only they can be closer than ``dhat`` anywhere within that reach. ``close_pairs`` at
    the line search's trial points then measures a few hundred pairs instead of every neighbour
    (measured on the figure-of-eight knot near the minimum, adjacent faces included: 26,088
    neighbours, 314 nearby, 51 close). They are also
    all the pairs that can cross there (two triangles that cross at a point have no distance there;
    going there from ``x``, intersection-free, their nearest primitives first meet, each moving no
    farther than ``reach``), so the crossing check reads only them.

    And the pairs closer than ``dhat`` at ``x``, found once for the energy's gradient and the
    Hessian there: at the full step cap (no nearby list) each search cost 19 ms on the pretzel.

    The broad phase skips the face pairs that share a vertex (``setup.adjacent``; their boxes
    always meet, and the distances of all 27k of them took 9 ms on the pretzel). They enter through
    lower bounds of their distances (``adjacent_bounds``), carried over from ``previous`` (a list
    built before, or ``None``) and measured again only where they are below what is asked of them
    here (``dhat + 2 reach``, or ``dhat`` without a nearby list).

    ``dhat`` is ``margin * h``; ``close_reach`` (a reach per face, at most that; ``None``: ``dhat``)
    is what the close pairs must be within (a pair: the geometric mean of its faces')."""
    reach = setup.max_step * h if reach is None else reach
    dhat = setup.margin * h
    close_reach = dhat if close_reach is None else close_reach
    x = lax.stop_gradient(x)
    candidates = candidate_pairs(
        x,
        setup.faces,
        capacity=setup.capacity,
        skip_vertex_adjacent=True,
        padding=0.5 * dhat + reach,
        num_faces=setup.num_faces,
    )
    count = jnp.minimum(candidates.count, setup.capacity)
    # room behind the neighbours for the adjacent pairs that can be close or cross at a trial point
    # (``_search_close``, ``checked_pairs``)
    pairs = jnp.concatenate([candidates.pairs, jnp.full(setup.adjacent.shape, -1, jnp.int32)])
    measured = reach <= _NEARBY_REACH * h  # beyond, the nearby pairs do not fit: not measured
    if previous is None:
        bound, at = jnp.full(setup.adjacent.shape[:1], -jnp.inf, x.dtype), x
    else:  # a list of all zeros (the loop's start) has no bounds
        bound, at = jnp.where(previous.skin > 0, previous.bound, -jnp.inf), previous.reference
    bound = adjacent_bounds(x, setup, bound, at, jnp.where(measured, dhat + 2 * reach, dhat))
    rows = _nearby_rows(setup)  # close_pairs reads the size back from the buffer

    def nearby_pairs():  # the broad phase padded the boxes by as much: only the distances can drop one
        found = _within(x, setup, pairs, count, dhat + 2 * reach, rows)
        return _adjacent_below(x, setup, bound, x, dhat + 2 * reach, found)  # exact at x below that

    nearby, num_nearby = lax.cond(
        measured, nearby_pairs, lambda: (jnp.full((rows, 2), -1, jnp.int32), jnp.int32(rows + 1))
    )
    close, num_close = _search_close(x, setup, pairs, count, nearby, num_nearby, close_reach, bound, x)
    usable = _fits(nearby, num_nearby)
    checked = lax.dynamic_update_slice(pairs, jnp.where(usable, nearby, pairs[:rows]), (0, 0))
    num_checked = jnp.where(usable, num_nearby, count)
    return Neighbours(
        checked,
        num_checked,
        candidates.count,
        candidates.overflowed,
        nearby,
        num_nearby,
        x,
        reach,
        x,
        close,
        num_close,
        bound,
    )


def advance(x, setup: RelaxSetup, h, reach, previous: Neighbours | None, close_reach=None) -> Neighbours:
    """``neighbours`` for a step from ``x`` that moves no vertex farther than ``reach``: the previous
    list (``previous``, or ``None``) with its close pairs measured again at ``x``, while ``x`` plus
    the step stays within its skin and its nearby pairs are usable; else a new list, with a skin of
    twice the reach where the nearby pairs are still measured at that (near the minimum the steps
    are far smaller than the smallest cap, and one list serves several of them). ``close_reach``:
    as in ``neighbours``."""
    skin = jnp.where(2 * reach <= _NEARBY_REACH * h, 2 * reach, reach)
    close_reach = setup.margin * h if close_reach is None else close_reach
    if previous is None:
        return neighbours(x, setup, h, skin, close_reach=close_reach)
    x = lax.stop_gradient(x)
    moved = jnp.sqrt(jnp.max(jnp.sum((x - previous.reference) ** 2, axis=1), initial=0.0))
    keep = (
        _fits(previous.nearby, previous.num_nearby)
        & ~previous.overflowed
        & (previous.skin > 0)
        & (moved + reach <= previous.skin)
    )

    def kept():
        rows, active = previous.nearby, setup.active_capacity
        close, num_close = _within(x, setup, rows, previous.num_nearby, close_reach, active)
        return eqx.tree_at(lambda n: (n.origin, n.close, n.num_close), previous, (x, close, num_close))

    return lax.cond(keep, kept, lambda: neighbours(x, setup, h, skin, previous, close_reach))


def _closer_than(x, setup: RelaxSetup, pairs, count, distance, capacity: int):
    """The first ``count`` rows of ``pairs`` with non-incident primitives closer than ``distance``,
    compacted into ``capacity`` rows, and their true count.

    Two passes: the boxes' gap (cheap) drops most pairs, the primitive distances decide the rest."""
    rows_in = pairs.shape[0]
    lo, hi = face_bounds(x, setup.faces)
    pad = 0.5 * jnp.asarray(distance)[..., None]  # a face's box grown by half its reach: a superset
    lo, hi = (lo - pad).T, (hi + pad).T
    chunk = min(rows_in, 1 << 14)

    def boxes_meet(slot):
        rows = pairs[jnp.minimum(slot, rows_in - 1)]
        i, j = rows[:, 0], rows[:, 1]
        meet = jnp.all((lo[:, i] <= hi[:, j]) & (lo[:, j] <= hi[:, i]), axis=0)
        return (slot < count) & meet, rows

    boxed, num_boxed = stream_compact(boxes_meet, count, chunk, jnp.full_like(pairs, -1))
    return _within(x, setup, boxed, num_boxed, distance, capacity)


def _within(x, setup: RelaxSetup, pairs, count, distance, capacity: int):
    """The first ``count`` rows of ``pairs`` whose non-incident primitives are closer than
    ``distance`` (a scalar, or a reach per face: ``pair_reach``), compacted into ``capacity`` rows,
    and their true count (1k-row chunks: few pairs are close, and a 16k chunk of distances cost 15 ms)."""
    rows_in = pairs.shape[0]

    def within(slot):
        rows = pairs[jnp.minimum(slot, rows_in - 1)]
        return (slot < count) & (_distances_sq(x, setup, rows) < pair_reach(distance, rows) ** 2), rows

    empty = jnp.full((capacity, 2), -1, jnp.int32)
    return stream_compact(within, jnp.minimum(count, rows_in), min(rows_in, 1 << 10), empty)


def _search_close(x, setup: RelaxSetup, pairs, count, nearby, num_nearby, dhat, bound, reference):
    """The pairs closer than ``dhat`` at ``x``: among ``nearby`` when they all fit there, else among
    the first ``count`` rows of ``pairs`` (the neighbours) and the adjacent pairs that can be (their
    ``bound`` at ``reference``)."""

    def among_all():  # the adjacent pairs go behind the neighbours, in the room left for them
        rows, num_rows = _adjacent_below(x, setup, bound, reference, jnp.max(dhat), (pairs, count))
        return _closer_than(x, setup, rows, num_rows, dhat, setup.active_capacity)

    return lax.cond(
        _fits(nearby, num_nearby),
        lambda: _within(x, setup, nearby, num_nearby, dhat, setup.active_capacity),
        among_all,
    )


def close_pairs(x, setup: RelaxSetup, near: Neighbours, dhat):
    """The neighbours closer than ``dhat`` (some non-incident primitives within ``dhat``), compacted
    into ``active_capacity`` rows, and their true count. A set, not a value: no derivative flows.

    Read from ``near`` at the point it was built for (``dhat`` must then be the margin it used),
    measured at any other."""
    x, dhat = lax.stop_gradient(x), lax.stop_gradient(dhat)
    return lax.cond(
        jnp.all(x == near.origin),
        lambda: (near.close, near.num_close),
        lambda: _search_close(
            x, setup, near.pairs, near.num_pairs, near.nearby, near.num_nearby, dhat, near.bound, near.reference
        ),
    )


def checked_pairs(x, setup: RelaxSetup, near: Neighbours):
    """The face pairs that can cross at ``x`` (a point within ``near``'s skin), as ``(rows, count)``:
    the nearby pairs when they fit; else the neighbours and the adjacent pairs whose distance bound
    no longer excludes a contact (within a millionth of the skin)."""
    pairs, count = near.pairs, near.num_pairs
    return lax.cond(
        _fits(near.nearby, near.num_nearby),
        lambda: (pairs, count),
        lambda: _adjacent_below(
            lax.stop_gradient(x), setup, near.bound, near.reference, 1e-6 * near.skin, (pairs, count)
        ),
    )


def crossing_check(x, setup: RelaxSetup, near: Neighbours):
    """The float predicate on the pairs that can cross at ``x`` (``checked_pairs``; ambiguous pairs
    count as crossing): the line search's admissibility test, also used to size its survivor buffer."""
    pairs, count = checked_pairs(x, setup, near)
    return judge_pairs(
        x,
        setup.faces,
        pairs,
        count,
        survivor_capacity=setup.survivor_capacity,
        flagged_capacity=8,
        keep_ambiguous=False,
    )

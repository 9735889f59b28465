"""Layer 4: phase 2 of ``untangle``, relax: restore the shape of an intersection-free mesh.

Inexact Newton-CG (``newton_cg``) on

$$ E(x) = E_{\\text{elastic}}(x; \\theta) + \\kappa \\sum_{\\text{near pairs}} b\\left(d^2 / \\hat d^2\\right) $$

with ``theta`` the input (rest shape and pull target), $\\hat d$ = ``margin * h`` and $b$ the IPC log
barrier on the distances between the non-incident primitives of near face pairs (``_distance``).
The barrier is continuous and grows without bound as two primitives meet, so Newton reaches a
stationary point (the interval energy $T$ used before jumps where a triangle leaves the other's
plane, and its line search stalled there: docs/untangling.md). Each Newton step

- builds one neighbour list: the face pairs whose boxes, grown by $\\hat d/2$ + the step cap,
  overlap (``prepare``). Every pair that can be within $\\hat d$, or cross, anywhere along the
  capped step is in it, so the line search evaluates the exact energy at its trial points without
  another broad phase;
- solves $(J^T J + \\kappa H_b)\\, d = -g$ by CG, with the elastic Gauss-Newton operator and PSD
  Gauss-Newton blocks of the barrier on the pairs closer than $\\hat d$;
- caps the step at ``max_step * h`` per vertex and backtracks (Armijo), rejecting every trial at
  which the float predicate finds a crossing pair among the neighbours.

A few exact-Hessian steps then polish the stationary point, where ``untangle`` gets its implicit VJP.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from ._broad_phase import candidate_pairs, face_bounds, stream_compact
from ._distance import pair_distance_sq
from ._elastic import elastic_energy, elastic_gauss_newton, rest_shape
from ._mesh_energy import (
    barrier_energy,
    barrier_gauss_newton,
    block_vector_product,
    judge_pairs,
    pair_mask,
    pair_triangles,
    shared_vertices,
)
from ._newton import conjugate_gradient, newton_cg
from ._types import Array


class RelaxSetup(eqx.Module):
    """What phase 2 needs besides the positions: connectivity, buffer sizes (static) and weights."""

    faces: Array
    edges: Array
    capacity: int = eqx.field(static=True)  # neighbour-list slots
    active_capacity: int = eqx.field(static=True)  # pairs closer than dhat (barrier Hessian blocks)
    survivor_capacity: int = eqx.field(static=True)  # neighbours the crossing check examines closely
    bending: float
    pull: float
    margin: float  # dhat, in mean rest edge lengths h
    barrier_weight: float
    max_step: float  # largest vertex move per Newton step, in h


class Neighbours(eqx.Module):
    """A neighbour list valid for one Newton step (see the module docstring)."""

    pairs: Array
    mask: Array
    overflowed: Array


def neighbours(x, setup: RelaxSetup, h) -> Neighbours:
    """Face pairs that can come within ``dhat`` of each other, or cross, during one capped step."""
    padding = h * (0.5 * setup.margin + setup.max_step)
    candidates = candidate_pairs(
        lax.stop_gradient(x), setup.faces, capacity=setup.capacity, include_shared_edges=True, padding=padding
    )
    return Neighbours(candidates.pairs, pair_mask(candidates), candidates.overflowed)


def close_pairs(x, setup: RelaxSetup, near: Neighbours, dhat):
    """The neighbours closer than ``dhat`` (some non-incident primitives within ``dhat``), compacted
    into ``active_capacity`` rows, and their true count. A set, not a value: no derivative flows.

    Two passes: the boxes' gap (cheap) drops most neighbours, the primitive distances decide the rest.
    """
    x, dhat = lax.stop_gradient(x), lax.stop_gradient(dhat)
    capacity = near.pairs.shape[0]
    lo, hi = face_bounds(x, setup.faces)
    lo, hi = (lo - 0.5 * dhat).T, (hi + 0.5 * dhat).T
    chunk = min(capacity, 1 << 14)

    def boxes_meet(slot):
        rows = near.pairs[jnp.minimum(slot, capacity - 1)]
        i, j = rows[:, 0], rows[:, 1]
        meet = jnp.all((lo[:, i] <= hi[:, j]) & (lo[:, j] <= hi[:, i]), axis=0)
        return near.mask[jnp.minimum(slot, capacity - 1)] & meet, rows

    boxed, num_boxed = stream_compact(boxes_meet, jnp.sum(near.mask), chunk, jnp.full_like(near.pairs, -1))

    def within(slot):
        rows = boxed[jnp.minimum(slot, capacity - 1)]
        u, v = pair_triangles(x, setup.faces, rows)
        close = jax.vmap(pair_distance_sq)(u, v, shared_vertices(setup.faces, rows)) < dhat**2
        return (slot < num_boxed) & close, rows

    return stream_compact(within, num_boxed, chunk, jnp.full((setup.active_capacity, 2), -1, jnp.int32))


def crossing_check(x, setup: RelaxSetup, near: Neighbours):
    """The float predicate on the neighbours at ``x`` (ambiguous pairs count as crossing): the
    line search's admissibility test, also used to size its survivor buffer."""
    return judge_pairs(
        x,
        setup.faces,
        near.pairs,
        jnp.sum(near.mask),
        survivor_capacity=setup.survivor_capacity,
        flagged_capacity=8,
        keep_ambiguous=False,
    )


def relax_energy(x, theta, setup: RelaxSetup, near: Neighbours):
    """Elastic energy to the rest shape ``theta`` plus the barrier on the neighbours closer than
    ``dhat``; ``inf`` if they do not fit in ``active_capacity`` (or the neighbour list overflowed)."""
    rest = rest_shape(theta, setup.edges)
    dhat = setup.margin * rest.h
    elastic = elastic_energy(x, rest, bending=setup.bending, pull=setup.pull)
    close, count = close_pairs(x, setup, near, dhat)
    mask = jnp.arange(setup.active_capacity) < count
    energy = elastic + setup.barrier_weight * barrier_energy(x, setup.faces, close, mask, dhat)
    return jnp.where(near.overflowed | (count > setup.active_capacity), jnp.inf, energy)


def relax(x1, theta, setup: RelaxSetup, *, iters: int, polish: int, cg_iters: int, tol=1e-7):
    """Phase 2 from ``x1``: up to ``iters`` Gauss-Newton-CG steps, then up to ``polish`` exact-Hessian
    Newton steps (none compiled when 0), each loop stopping when the gradient's max-norm is below ``tol``.

    Returns both ``NewtonResult``s (the second is the first, with zero counts, when ``polish`` is 0)."""
    rest = rest_shape(theta, setup.edges)
    dhat = setup.margin * rest.h

    def prepare(x):
        return neighbours(x, setup, rest.h)

    def energy(x, near):
        return relax_energy(x, theta, setup, near)

    def gauss_newton(x, near):
        elastic = elastic_gauss_newton(x, rest, bending=setup.bending, pull=setup.pull)
        close, count = close_pairs(x, setup, near, dhat)
        mask = jnp.arange(setup.active_capacity) < count
        blocks = barrier_gauss_newton(x, setup.faces, close, mask, dhat)
        return lambda v: elastic(v) + setup.barrier_weight * block_vector_product(blocks, v)

    def accept(x, near):
        found = crossing_check(x, setup, near)
        return (found.num_flagged == 0) & (found.num_survivors <= setup.survivor_capacity)

    options = dict(
        prepare=prepare,
        accept=accept,
        cg_iters=cg_iters,
        max_step=setup.max_step * rest.h,
        tol=tol,
        damping=1e-10,
    )
    first = newton_cg(energy, x1, hessian=gauss_newton, max_iters=iters, **options)
    if polish == 0:  # nothing to compile for the exact Hessian
        return first, first._replace(
            iterations=jnp.zeros_like(first.iterations), cg_iterations=jnp.zeros_like(first.cg_iterations)
        )
    second = newton_cg(energy, first.x, max_iters=polish, **options)
    return first, second


relax_jit = jax.jit(relax, static_argnames=("iters", "polish", "cg_iters", "tol"))


def close_count(x, theta, setup: RelaxSetup):
    """For the eager sizing of the buffers at ``x``: how many neighbours are closer than ``dhat``,
    how many the crossing check examines closely (survivors of its plane-side early-out), and
    whether the neighbour list overflowed."""
    rest = rest_shape(theta, setup.edges)
    near = neighbours(x, setup, rest.h)
    found = crossing_check(x, setup, near)
    return close_pairs(x, setup, near, setup.margin * rest.h)[1], found.num_survivors, near.overflowed


close_count_jit = jax.jit(close_count)


def adjoint(x_star, theta, setup: RelaxSetup, cotangent, cg_iters: int):
    """Implicit-function VJP at a stationary point: solve $H \\lambda = \\bar x$ with the exact Hessian of
    $E$ (neighbours fixed), return $-(\\partial_\\theta \\nabla_x E)^T \\lambda$."""
    near = neighbours(x_star, setup, rest_shape(theta, setup.edges).h)

    def gradient(x, th):
        return jax.grad(relax_energy)(x, th, setup, near)

    _, hvp = jax.linearize(lambda x: gradient(x, theta), x_star)
    lam, _ = conjugate_gradient(lambda v: hvp(v) + 1e-12 * v, cotangent, maxiter=cg_iters, rtol=1e-12)
    _, vjp = jax.vjp(lambda th: gradient(x_star, th), theta)
    return -vjp(lam)[0]


adjoint_jit = jax.jit(adjoint, static_argnames=("cg_iters",))

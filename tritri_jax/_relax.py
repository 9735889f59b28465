"""Layer 4: phase 2 of ``untangle``, relax: restore the shape of an intersection-free mesh.

Inexact Newton-CG (``newton_cg``) on

$$ E(x) = E_{\\text{elastic}}(x; \\theta) + \\kappa \\sum_{\\text{near pairs}} b\\left(d^2 / \\hat d^2\\right) $$

with ``theta`` the input (rest shape and pull target), $\\hat d$ = ``margin * h`` (with ``local_reach``
less on thin faces: ``barrier_reach``) and $b$ the IPC log barrier on the distances between the non-incident
primitives of near face pairs (``_distance``).
The barrier is continuous and grows without bound as two primitives meet, so Newton reaches a
stationary point (the interval energy $T$ used before jumps where a triangle leaves the other's
plane, and its line search stalled there: docs/untangling.md). Each Newton step

- builds one neighbour list, or keeps the last one while the step stays within its skin
  (``advance``): the face pairs whose boxes, grown by $\\hat d/2$ + the skin, overlap, and the
  face pairs that share a vertex through lower bounds of their distances carried from list to
  list (``adjacent_bounds``). Every pair that can be within $\\hat d$, or cross, anywhere along
  the capped step is in it, so the line search evaluates the exact energy at its trial points
  without another broad phase. The cap adapts (4 x the last step, within ``max_step * h`` / 16 and
  ``max_step * h``), so near the minimum the list holds little more than the close pairs;
- solves $H d = -g$ by CG preconditioned with a multigrid V-cycle of the constant elastic
  stiffness (``_multigrid``), $H$ = a PSD Gauss-Newton operator far from the minimum and the exact
  Hessian near it (``relax``), the barrier's part as dense blocks on the pairs closer than $\\hat d$;
- backtracks (Armijo), or doubles an accepted full step while the energy keeps falling (a log
  barrier's Newton step only doubles a tiny gap), rejecting every trial at which the float
  predicate finds a crossing pair among the neighbours (asked before the energy: every backtrack
  measured on the pretzel was a trial that crossed).

``untangle`` gets its implicit VJP at the stationary point this reaches.
"""

import jax
import jax.numpy as jnp
import numpy as np

from ._barrier import barrier_blocks, barrier_energy, block_vector_product
from ._elastic import elastic_energy, elastic_hessian
from ._memory import releasable_jit
from ._multigrid import v_cycle
from ._neighbours import Neighbours, RelaxSetup, advance, close_pairs, crossing_check, neighbours
from ._newton import conjugate_gradient, newton_loop
from ._safe import safe_norm


def barrier_reach(setup: RelaxSetup, theta, h):
    """The barrier's $\\hat d$: ``margin * h``; with ``setup.local_reach`` one per face ``(F,)``, half
    the face's smallest rest altitude (its area over its longest edge) where that is less, so that no
    face's barrier reaches farther than half its own width.

    With one $\\hat d$ for all faces, a mesh whose edges span 1000x (slivers, fans) has faces that
    share no vertex closer than $\\hat d$ at rest, about a sliver's width apart: the barrier pushes
    the clean input apart (a graded torus: 41-50 Newton steps, worst edge ratio 0.35-0.39; with the
    local reach none). ``untangle`` turns it on for meshes where it changes at least a tenth of the
    faces (``uneven_share``): on the ISIR meshes it changes 0-2.4 % of them, and phase 2 then took
    29-50 Newton steps instead of 24-27 on three (the figure-of-eight knot stopped short of
    stationary). The neighbour lists still search within
    ``margin * h`` (a superset); a pair takes the geometric mean of its faces'
    (``_barrier.pair_reach``). Differentiable in the rest shape."""
    dhat = setup.margin * h
    if not setup.local_reach:
        return dhat
    return jnp.minimum(dhat, jnp.maximum(half_altitudes(theta, setup.faces, h), 1e-3 * dhat))


def half_altitudes(theta, faces, h):
    """Half of each face's smallest altitude, its area over its longest edge (``(F,)``); an edge
    shorter than ``1e-3 * h`` counts as that long, so a collapsed face gets zero, not NaN."""
    a, b, c = (theta[faces[:, k]] for k in range(3))
    twice_area = safe_norm(jnp.cross(b - a, c - a))
    longest = jnp.maximum(jnp.maximum(safe_norm(b - a), safe_norm(c - b)), safe_norm(a - c))
    return 0.5 * twice_area / jnp.maximum(longest, 1e-3 * h)


UNEVEN_SHARE = 0.1  # ``untangle``'s ``local_reach="auto"``: on from this share of thin faces


def uneven_share(theta: np.ndarray, faces: np.ndarray, margin: float, h: float) -> float:
    """The share of ``faces`` (host arrays) whose half rest altitude is below the barrier's reach
    ``margin * h`` (``h``: the mean edge length): those that ``barrier_reach`` gives a smaller
    reach. 0-2.4 % on the ISIR meshes, 7 % on a trefoil tube, 13-17 % on crumpled sheets, 55 % on a
    torus whose edges span 1000x."""
    if len(faces) == 0:
        return 0.0
    return float(np.mean(np.asarray(half_altitudes(jnp.asarray(theta), jnp.asarray(faces), h)) < margin * h))


def relax_energy(x, theta, setup: RelaxSetup, near: Neighbours):
    """Elastic energy to the rest shape ``theta`` plus the barrier on the neighbours closer than
    their $\\hat d$ (``barrier_reach``); ``inf`` if the neighbours closer than ``margin * h`` do not
    fit in ``active_capacity`` (or the neighbour list overflowed)."""
    rest = setup.rest(theta)
    elastic = elastic_energy(x, rest, bending=setup.bending, pull=setup.pull)
    dhat = barrier_reach(setup, theta, rest.h)
    close, count = close_pairs(x, setup, near, dhat)
    barrier = barrier_energy(x, setup.faces, close, count, dhat)
    energy = elastic + setup.barrier_weight * barrier
    return jnp.where(near.overflowed | (count > setup.active_capacity), jnp.inf, energy)


def relax(x1, theta, setup: RelaxSetup, *, iters: int, polish: int, cg_iters: int, tol=1e-7, switch=100.0):
    """Phase 2 from ``x1``: Newton-CG, CG preconditioned by ``setup.preconditioner`` (a multigrid of
    the constant elastic stiffness), each step capped adaptively (``step_growth``: the neighbour
    list only reaches as far as the step can go, so it shrinks near the minimum). Up to
    ``iters + polish`` steps, each with one of two operators (only the first if ``polish`` is 0):

    - far from the minimum (the gradient's max-norm above ``switch``, or 100x below the start's if
      that is lower), a PSD one: the elastic Gauss-Newton operator and the barrier's Gauss-Newton
      blocks. Far from the minimum the exact one stops CG on negative curvature after 2-4 iterations;
    - near it, the exact Hessian (the barrier's exact per-pair blocks are possibly indefinite);
      also within 4x the switch once ``iters`` steps are spent. The Gauss-Newton blocks drop the
      barrier's (negative) curvature across each distance gradient, and with them Newton converged
      only linearly, by ~0.6 per step; with the exact Hessian it converges quadratically. Measured
      (docs/untangling.md): at a fixed switch of 1 the three-twist knot crawled along a contact
      (|g| ~ 9 after 50 steps), at 100 it converges in 20; the trefoil reaches |g| = 36 and with
      the exact Hessian from there it did not converge in 20 steps; the figure-of-eight knot
      crawled from |g| 240 to 210 in 6 Gauss-Newton steps, then took 12 exact ones to 3e-8 (20
      more Gauss-Newton ones reached only 14).

    CG stops at a relative residual of 0.1 with the first operator and 1e-2 with the second: far
    from the minimum a rough direction does as well (trefoil knot: 948 -> 605 CG iterations in the
    same 18 steps, 4.3 -> 2.0 s; at 0.3 the figure-of-eight gained and the trefoil and pretzel lost).

    The elastic part of either is assembled into 3 x 3 blocks once per step (``elastic_hessian``: a
    CG product 0.65 -> 0.32 ms on the trefoil knot). One ``newton_loop``, so its energy, gradient,
    neighbour list and crossing check compile once (two loops, one per operator, compiled for twice
    as long).

    A step whose line search met a point past the close-pair buffer (the energy is ``inf`` there)
    stops the loop at the point it accepted, for ``_phase2.run_relax`` to grow the buffer and
    resume: phase 2 pulls surfaces that phase 1 pushed apart back into contact, and on two
    overlapping 20k-face spheres the close pairs grew from 400 to over the buffer's 4,096, where
    8 Newton steps of 100 CG iterations each, every one cut short by the buffer, took 1 % off the
    energy before relax stalled. Returns its ``NewtonResult`` and whether it stopped so."""
    rest = setup.rest(theta)
    dhat = barrier_reach(setup, theta, rest.h)

    def prepare(x, reach, previous):
        return advance(x, setup, rest.h, reach, previous, dhat)

    def energy(x, near):
        return relax_energy(x, theta, setup, near)

    def near_minimum(progress):  # use the exact Hessian
        threshold = jnp.minimum(switch, 1e-2 * progress.initial_gradient_norm)
        exact = (progress.gradient_norm < threshold) | (
            (progress.iteration >= iters) & (progress.gradient_norm < 4 * threshold)
        )
        return exact & (polish > 0)

    def hessian(x, near, progress):
        exact = near_minimum(progress)
        elastic = elastic_hessian(x, rest, setup.pattern, bending=setup.bending, pull=setup.pull, exact=exact)
        close, count = near.close, near.num_close  # built at x
        blocks = barrier_blocks(x, setup.faces, close, count, dhat, exact=exact)

        def product(v):
            return elastic(v) + setup.barrier_weight * block_vector_product(blocks, v)

        return product

    def accept(x, near):
        found = crossing_check(x, setup, near)
        return (found.num_flagged == 0) & (found.num_survivors <= setup.survivor_capacity)

    def preconditioner(x, near):
        return lambda r: v_cycle(setup.preconditioner, r)

    return newton_loop(
        energy,
        x1,
        hessian=hessian,
        accept=accept,
        prepare=prepare,
        preconditioner=None if setup.preconditioner is None else preconditioner,
        max_iters=iters + polish,
        cg_iters=cg_iters,
        cg_rtol=lambda progress: jnp.where(near_minimum(progress), 1e-2, 0.1),
        tol=tol,
        max_step=setup.max_step * rest.h,
        step_growth=4.0,
        damping=1e-10,
        line_search_steps=12,
        expand=True,
        stop_when_blocked=True,
    )


relax_jit = releasable_jit(relax, static_argnames=("iters", "polish", "cg_iters", "tol", "switch"))


def close_count(x, theta, setup: RelaxSetup):
    """For the eager sizing of the buffers at ``x``: how many neighbours are closer than ``dhat``,
    how many the crossing check examines closely (survivors of its plane-side early-out), how many
    neighbours there are (also past the list), and whether their list overflowed."""
    rest = setup.rest(theta)
    near = neighbours(x, setup, rest.h, close_reach=barrier_reach(setup, theta, rest.h))
    found = crossing_check(x, setup, near)
    close = near.num_close
    return close, found.num_survivors, near.count, near.overflowed


close_count_jit = releasable_jit(close_count)


def adjoint(x_star, theta, setup: RelaxSetup, cotangent, cg_iters: int):
    """Implicit-function VJP at a stationary point: solve $H \\lambda = \\bar x$ with the exact Hessian of
    $E$ (neighbours fixed) by CG preconditioned with the multigrid of the elastic stiffness, return
    $-(\\partial_\\theta \\nabla_x E)^T \\lambda$ and the solve's relative residual. Unpreconditioned,
    500 iterations left a relative residual of 3e-4 on the cinquefoil knot and 1e-2 on the
    three-twist knot (gradient errors 3e-4 and 2e-2); preconditioned it reaches 1e-12 in 256 and 399."""
    h = setup.rest(theta).h
    near = neighbours(x_star, setup, h, close_reach=barrier_reach(setup, theta, h))

    def gradient(x, th):
        return jax.grad(relax_energy)(x, th, setup, near)

    _, hvp = jax.linearize(lambda x: gradient(x, theta), x_star)

    def operator(v):
        return hvp(v) + 1e-12 * v

    precondition = None if setup.preconditioner is None else (lambda r: v_cycle(setup.preconditioner, r))
    lam, _ = conjugate_gradient(operator, cotangent, maxiter=cg_iters, rtol=1e-12, precondition=precondition)
    residual = jnp.linalg.norm(operator(lam) - cotangent) / jnp.maximum(jnp.linalg.norm(cotangent), 1e-300)
    _, vjp = jax.vjp(lambda th: gradient(x_star, th), theta)
    return -vjp(lam)[0], residual


adjoint_jit = releasable_jit(adjoint, static_argnames=("cg_iters",))

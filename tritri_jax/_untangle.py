"""Layer 4/5: untangling, phase 1: smoothed descent on the intersection-curve length.

Recipe (DESIGN.md §1, "What did reach zero"): on a mesh scaled to unit bounding-box diagonal, with
``h`` its mean edge length, each step

1. re-detects the crossing pairs (broad phase + float predicate, inside ``jit``);
2. takes the gradient ``g`` of the summed crossing-segment length $\\sum \\ell$ (it vanishes
   continuously as a crossing shrinks or a poke retracts, and does not fade);
3. smooths it in the metric of the mesh Laplacian, $d = -(I + \\lambda L)^{-2} g$, two matrix-free
   CG solves ("large steps", Nicolet et al. 2021);
4. scales the step so the largest vertex move is ``step_fraction * h`` (no line search);
5. halves $\\lambda$ (down to ``min_smoothing``) when ``patience`` steps set no new minimum of the
   crossing count, and keeps the best state seen.
6. if ``max_steps`` pass without reaching zero, starts over from the input with half the step
   (``restarts`` times): measured, a fixed 0.2 h step left the three-twist knot oscillating around
   50 pairs for 400 steps, while 0.1 h untangled it in 30 (docs/untangling.md).

It stops when the float predicate finds no crossing pair; the eager wrapper then certifies the
result with the exact detection of ``find_intersections`` and resumes if that disagrees.
Phase 2 relaxes the result: inexact Newton-CG on elastic energy (springs, bending, a weak pull to
the input) plus a margin energy on pairs closer than ``margin * h``, with every line-search trial
that creates a crossing rejected, to a stationary point. There ``untangle`` is differentiable by the
implicit function theorem (one adjoint CG solve), not by differentiating iterations.
"""

import math
import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.sparse.linalg import cg

from ._broad_phase import candidate_pairs
from ._elastic import elastic_energy, elastic_gauss_newton, laplacian, rest_shape, unique_edges
from ._kernels import crossing_length, intersects
from ._mesh_energy import (
    check_mesh,
    find_intersections,
    hessian_vector_product,
    pair_mask,
    pair_system,
    pair_triangles,
    pairs_energy,
    scatter_to_vertices,
)
from ._newton import conjugate_gradient, newton_cg
from ._types import Array, Bool, Float, Int


class UntangleResult(NamedTuple):
    """Result of [`untangle`][tritri_jax.untangle].

    - ``vertices``: ``(V, 3)`` the untangled positions (the best state found), in the input's frame.
    - ``converged``: the exact detection finds no crossing pair in ``vertices``.
    - ``iterations``: phase-1 steps taken, over all attempts; ``relax_iterations``, ``relax_cg_iterations``: phase 2's.
    - ``num_intersections``: crossing pairs left in ``vertices`` (exact detection).
    - ``history``: ``(iterations,)`` crossing-pair counts (float predicate) at each step's start
      (for ``method="paper"``: the count after each kappa round).
    - ``max_displacement``, ``mean_displacement``: vertex moves relative to the bounding-box diagonal.
    - ``worst_edge_ratio``: the smallest of (edge length / input length) and its inverse.
    - ``relax_energy``, ``relax_gradient_norm``: phase 2's energy and max-norm gradient at the end.
    - ``seconds``: wall time of the solve (compile included on the first call of a shape).
    """

    vertices: Float[Array, "V 3"]
    converged: Bool[Array, ""]
    iterations: Int[Array, ""]
    num_intersections: Int[Array, ""]
    history: Int[Array, " steps"]
    max_displacement: Float[Array, ""]
    mean_displacement: Float[Array, ""]
    worst_edge_ratio: Float[Array, ""]
    relax_iterations: Int[Array, ""]
    relax_cg_iterations: Int[Array, ""]
    relax_energy: Float[Array, ""]
    relax_gradient_norm: Float[Array, ""]
    seconds: float


class _State(NamedTuple):
    x: Array
    best_x: Array
    best_count: Array
    count: Array
    smoothing: Array
    stall: Array
    step: Array
    history: Array
    overflowed: Array


def _crossings(x, faces, capacity):
    candidates = candidate_pairs(x, faces, capacity=capacity)
    u, v = pair_triangles(x, faces, candidates.pairs)
    crossing = jax.vmap(intersects)(u, v) & pair_mask(candidates)
    return candidates, u, v, crossing


def _length_gradient(x, faces, candidates, u, v, crossing):
    gu, gv = jax.vmap(jax.grad(crossing_length, argnums=(0, 1)))(u, v)
    g = jnp.concatenate([gu, gv], axis=1).reshape(-1, 18)
    g = jnp.where(crossing[:, None], g, 0)
    corners = faces[jnp.maximum(candidates.pairs, 0)].reshape(-1, 6)
    return scatter_to_vertices(g, corners, x.shape[0])


def _phase1(
    x0, faces, edges, degree, h, state, step_fraction, *, capacity, max_steps, min_smoothing, patience, cg_iters
):
    def smooth(g, lam):
        def op(y):
            return y + lam * laplacian(y, edges, degree)

        y, _ = cg(op, g, x0=g, maxiter=cg_iters)
        y, _ = cg(op, y, x0=y, maxiter=cg_iters)
        return y

    def cond(s):
        return (s.step < max_steps) & (s.count != 0) & ~s.overflowed

    def body(s):
        candidates, u, v, crossing = _crossings(s.x, faces, capacity)
        count = jnp.sum(crossing).astype(jnp.int32)
        improved = count < s.best_count
        best_x = jnp.where(improved, s.x, s.best_x)
        best_count = jnp.minimum(count, s.best_count)
        stall = jnp.where(improved, 0, s.stall + 1)
        lam = jnp.where(stall >= patience, jnp.maximum(s.smoothing / 2, min_smoothing), s.smoothing)
        stall = jnp.where(stall >= patience, 0, stall)
        g = _length_gradient(s.x, faces, candidates, u, v, crossing)
        d = -smooth(g, lam)
        largest = jnp.max(jnp.sqrt(jnp.sum(d * d, axis=1)))
        d = d * jnp.where(largest > 0, step_fraction * h / jnp.where(largest > 0, largest, 1), 0)
        moving = (count > 0) & ~candidates.overflowed
        return _State(
            x=jnp.where(moving, s.x + d, s.x),
            best_x=best_x,
            best_count=best_count,
            count=count,
            smoothing=lam,
            stall=stall,
            step=s.step + moving.astype(jnp.int32),
            history=s.history.at[s.step].set(count, mode="drop"),
            overflowed=candidates.overflowed,
        )

    return lax.while_loop(cond, body, state)


_phase1_jit = jax.jit(_phase1, static_argnames=("capacity", "max_steps", "min_smoothing", "patience", "cg_iters"))


class _RelaxSetup(eqx.Module):
    faces: Array
    edges: Array
    capacity: int = eqx.field(static=True)
    bending: float
    pull: float
    margin: float
    margin_weight: float


def _relax_energy(x, theta, setup, pairs, mask):
    """Elastic energy to the rest shape ``theta`` plus the margin energy on the given pairs."""
    rest = rest_shape(theta, setup.edges)
    elastic = elastic_energy(x, rest, bending=setup.bending, pull=setup.pull)
    near = pairs_energy(x, setup.faces, pairs, mask, margin=setup.margin * rest.h)
    return elastic + setup.margin_weight * near / rest.h**4


def _near_pairs(x, setup):
    candidates = candidate_pairs(lax.stop_gradient(x), setup.faces, capacity=setup.capacity)
    return candidates.pairs, pair_mask(candidates), candidates.overflowed


def _relax(x1, theta, setup: _RelaxSetup, iters: int, polish: int, cg_iters: int):
    """Phase 2: Gauss-Newton-CG, then exact-Hessian Newton to polish the stationary point."""
    rest = rest_shape(theta, setup.edges)

    def energy(x):
        pairs, mask, _ = _near_pairs(x, setup)
        return _relax_energy(x, theta, setup, pairs, mask)

    def gauss_newton(x):
        pairs, mask, _ = _near_pairs(x, setup)
        elastic = elastic_gauss_newton(x, rest, bending=setup.bending, pull=setup.pull)
        system = pair_system(x, setup.faces, pairs, mask, margin=setup.margin * rest.h)
        weight = setup.margin_weight / rest.h**4
        return lambda v: elastic(v) + weight * hessian_vector_product(system, v)

    def accept(x):
        candidates, _, _, crossing = _crossings(x, setup.faces, setup.capacity)
        return ~jnp.any(crossing) & ~candidates.overflowed

    options = dict(accept=accept, cg_iters=cg_iters, max_step=0.5 * rest.h, tol=1e-10 / rest.h, damping=1e-10)
    first = newton_cg(energy, x1, hessian=gauss_newton, max_iters=iters, **options)
    second = newton_cg(energy, first.x, max_iters=polish, **options)
    return first, second


_relax_jit = jax.jit(_relax, static_argnames=("iters", "polish", "cg_iters"))


def _adjoint(x_star, theta, setup, cotangent, cg_iters):
    """Implicit-function VJP: solve $H \\lambda = \\bar x$, return $-(\\partial_\\theta \\nabla_x E)^T \\lambda$."""
    pairs, mask, _ = _near_pairs(x_star, setup)

    def gradient(x, th):
        return jax.grad(_relax_energy)(x, th, setup, pairs, mask)

    _, hvp = jax.linearize(lambda x: gradient(x, theta), x_star)
    lam, _ = conjugate_gradient(lambda v: hvp(v) + 1e-12 * v, cotangent, maxiter=cg_iters, rtol=1e-12)
    _, vjp = jax.vjp(lambda th: gradient(x_star, th), theta)
    return -vjp(lam)[0]


def _paper_route(theta, setup: _RelaxSetup, kappa, *, rounds: int, iters: int, growth: float, cg_iters: int):
    """The paper's route: Newton on elastic + kappa * sum T, Gauss-Newton pair blocks, CG, a line
    search that scores trial points with the pairs detected there, kappa continuation. No step is
    rejected for creating crossings (the paper has no such rule); the step is capped at 0.5 h."""
    rest = rest_shape(theta, setup.edges)

    def counts(x):
        return jnp.sum(_crossings(x, setup.faces, setup.capacity)[3]).astype(jnp.int32)

    def one_round(carry, _):
        x, kappa = carry

        def energy(y):
            pairs, mask, _ = _near_pairs(y, setup)
            elastic = elastic_energy(y, rest, bending=setup.bending, pull=setup.pull)
            return elastic + kappa * pairs_energy(y, setup.faces, pairs, mask) / rest.h**4

        def gauss_newton(y):
            pairs, mask, _ = _near_pairs(y, setup)
            elastic = elastic_gauss_newton(y, rest, bending=setup.bending, pull=setup.pull)
            system = pair_system(y, setup.faces, pairs, mask)
            return lambda v: elastic(v) + kappa / rest.h**4 * hessian_vector_product(system, v)

        result = newton_cg(
            energy,
            x,
            hessian=gauss_newton,
            max_iters=iters,
            cg_iters=cg_iters,
            max_step=0.5 * rest.h,
            tol=1e-10 / rest.h,
            damping=1e-10,
        )
        return (result.x, kappa * growth), (counts(result.x), result.iterations, result.cg_iterations)

    (x, _), (history, newton, cg_total) = lax.scan(one_round, (theta, kappa), None, length=rounds)
    return x, history, jnp.sum(newton), jnp.sum(cg_total)


_paper_route_jit = jax.jit(_paper_route, static_argnames=("rounds", "iters", "cg_iters"))


_adjoint_jit = jax.jit(_adjoint, static_argnames=("cg_iters",))


def untangle(
    vertices,
    faces,
    *,
    max_steps: int = 150,
    restarts: int = 2,
    smoothing: float = 20.0,
    min_smoothing: float = 1.25,
    step_fraction: float = 0.2,
    patience: int = 10,
    cg_iters: int = 50,
    method: str = "length",
    paper_rounds: int = 6,
    paper_kappa: float = 1.0,
    relax: bool = True,
    relax_iters: int = 20,
    relax_polish: int = 5,
    relax_cg_iters: int = 100,
    bending: float = 1.0,
    pull: float = 1e-2,
    margin: float = 0.05,
    margin_weight: float = 10.0,
    capacity: int | None = None,
) -> UntangleResult:
    """Make a self-intersecting mesh intersection-free: untangle (phase 1), then relax (phase 2).

    Phase 1 descends on the length of the intersection curve, smoothed by the mesh Laplacian, with a
    capped step and the crossings re-detected every step. Phase 2 restores the shape (elastic energy
    to the input, a margin energy on near pairs) by Newton-CG while rejecting every step that would
    create a crossing. Both phases are certified by the exact
    [`find_intersections`][tritri_jax.find_intersections]: ``converged`` is true only when it finds no
    pair; if the relaxed mesh failed that check, the phase-1 mesh is returned. Connectivity is never
    changed; several meshes passing through each other are one mesh with more faces.

    Differentiable (eagerly, with ``jax.grad``; not under ``jit``): the VJP of ``vertices`` with
    respect to the input vertices (which are also the rest shape) comes from the implicit function
    theorem at phase 2's stationary point, one adjoint CG solve, not from differentiating iterations.

    **Arguments:** ``vertices`` ``(V, 3)``, ``faces`` ``(F, 3)``. Phase 1: ``max_steps`` (per attempt),
    ``restarts`` (attempts after the first that did not reach zero: each starts over from the input
    with half the step),
    ``smoothing`` (initial $\\lambda$), ``min_smoothing``, ``step_fraction`` (largest vertex move per
    step, in mean edge lengths ``h``), ``patience``, ``cg_iters``. Phase 2 also takes ``relax_polish``
    (exact-Hessian Newton steps after the Gauss-Newton ones) and ``relax_cg_iters``. ``method="paper"`` replaces phase 1
    by the paper's route (Newton on elastic + $\\kappa \\sum T$ with Gauss-Newton pair blocks and
    $\\kappa$ multiplied by 10 for each of ``paper_rounds`` rounds from ``paper_kappa``); it is there to be
    measured against the default and rarely reaches zero. Phase 2: ``relax``,
    ``relax_iters``, ``bending`` and ``pull`` weights, ``margin`` (in ``h``), ``margin_weight``.
    ``capacity``: broad-phase slots (grown on overflow).

    ```python
    >>> import jax, tritri_jax as tt
    >>> jax.config.update("jax_enable_x64", True)
    >>> vertices, faces = tt.scenes.two_spheres(6)
    >>> result = tt.untangle(vertices, faces)
    >>> bool(result.converged), int(result.num_intersections)
    (True, 0)

    ```
    """
    vertices, faces = check_mesh(vertices, faces)
    faces_np = np.asarray(faces)
    options = dict(
        max_steps=max_steps,
        restarts=restarts,
        smoothing=smoothing,
        min_smoothing=min_smoothing,
        step_fraction=step_fraction,
        patience=patience,
        cg_iters=cg_iters,
        method=method,
        paper_rounds=paper_rounds,
        paper_kappa=paper_kappa,
        relax=relax,
        relax_iters=relax_iters,
        relax_polish=relax_polish,
        relax_cg_iters=relax_cg_iters,
        bending=bending,
        pull=pull,
        margin=margin,
        margin_weight=margin_weight,
        capacity=capacity,
    )
    box = {}

    @jax.custom_vjp
    def solve(v):
        box["result"], box["backward"] = _solve(np.asarray(v), faces_np, **options)
        return jnp.asarray(box["result"].vertices, v.dtype)

    def forward(v):
        out = solve(v)
        return out, None

    def backward(_, cotangent):
        if box["backward"] is None:
            raise ValueError("untangle is differentiable only when phase 2 ran and converged (relax=True)")
        return (box["backward"](cotangent).astype(cotangent.dtype),)

    solve.defvjp(forward, backward)
    out = solve(vertices)
    return box["result"]._replace(vertices=out)


def _solve(
    v_np,
    f_np,
    *,
    max_steps,
    restarts,
    smoothing,
    min_smoothing,
    step_fraction,
    patience,
    cg_iters,
    method,
    paper_rounds,
    paper_kappa,
    relax,
    relax_iters,
    relax_polish,
    relax_cg_iters,
    bending,
    pull,
    margin,
    margin_weight,
    capacity,
):
    start = time.perf_counter()
    dtype = v_np.dtype
    v64 = np.asarray(v_np, np.float64)
    lo, hi = (v64.min(0), v64.max(0)) if len(v64) else (np.zeros(3), np.ones(3))
    centre, diagonal = 0.5 * (lo + hi), float(np.linalg.norm(hi - lo)) or 1.0
    theta = jnp.asarray((v64 - centre) / diagonal, dtype)
    faces = jnp.asarray(f_np, jnp.int32)
    edges_np = unique_edges(f_np)
    edges = jnp.asarray(edges_np)
    h = (
        float(np.linalg.norm(np.diff(np.asarray(theta, np.float64)[edges_np], axis=1), axis=-1).mean())
        if len(edges_np)
        else 1.0
    )
    degree = jax.ops.segment_sum(jnp.ones(2 * len(edges_np), dtype), edges.reshape(-1), theta.shape[0])
    capacity = capacity or max(1024, 1 << math.ceil(math.log2(16 * max(len(f_np), 1))))

    def fresh():
        return _State(
            x=theta,
            best_x=theta,
            best_count=jnp.int32(jnp.iinfo(jnp.int32).max),
            count=jnp.int32(-1),
            smoothing=jnp.asarray(smoothing, dtype),
            stall=jnp.int32(0),
            step=jnp.int32(0),
            history=jnp.full((max_steps,), -1, jnp.int32),
            overflowed=jnp.bool_(False),
        )

    state = fresh()
    setup = _RelaxSetup(faces, edges, capacity, bending, pull, margin, margin_weight)
    if method == "paper":
        x1, rounds, newton_steps, _ = _paper_route_jit(
            theta, setup, jnp.asarray(paper_kappa, dtype), rounds=paper_rounds, iters=20, growth=10.0, cg_iters=100
        )
        remaining = find_intersections(x1, faces)
        state = state._replace(step=newton_steps, history=rounds)
    elif method == "length":
        histories, total_steps, fraction = [], 0, step_fraction
        for _ in range(restarts + 1):
            state = fresh()
            while True:
                state = _phase1_jit(
                    theta,
                    faces,
                    edges,
                    degree,
                    h,
                    state,
                    jnp.asarray(fraction, dtype),
                    capacity=capacity,
                    max_steps=max_steps,
                    min_smoothing=min_smoothing,
                    patience=patience,
                    cg_iters=cg_iters,
                )
                if bool(state.overflowed):
                    capacity *= 2
                    state = state._replace(overflowed=jnp.bool_(False))
                    continue
                x1 = state.x if int(state.count) == 0 else state.best_x
                remaining = find_intersections(x1, faces)
                if len(remaining) and int(state.count) == 0 and int(state.step) < max_steps:
                    state = state._replace(count=jnp.int32(-1))  # exact check disagrees (touching): keep going
                    continue
                break
            total_steps += int(state.step)
            histories.append(np.asarray(state.history[: int(state.step)]))
            if len(remaining) == 0:
                break
            fraction /= 2  # start over from the input with shorter steps
        state = state._replace(step=jnp.int32(total_steps), history=jnp.asarray(np.concatenate(histories)))
    else:
        raise ValueError(f"method must be 'length' or 'paper', got {method!r}")
    final, backward = x1, None
    relax_stats = (0, 0, float("nan"), float("nan"))
    if relax and len(remaining) == 0 and len(f_np) > 1:
        first, second = _relax_jit(x1, theta, setup, relax_iters, relax_polish, cg_iters=relax_cg_iters)
        relaxed = second.x
        relax_stats = (
            int(first.iterations) + int(second.iterations),
            int(first.cg_iterations) + int(second.cg_iterations),
            float(second.energy),
            float(second.gradient_norm),
        )
        if len(find_intersections(relaxed, faces)) == 0:
            final = relaxed

            def backward(cotangent):
                if not relax_stats[3] < 1e-6:
                    raise ValueError(
                        "untangle: the implicit gradient needs phase 2 to end at a stationary point, but its "
                        f"gradient norm is {relax_stats[3]:.3g} (> 1e-6); raise relax_iters or relax_polish"
                    )
                grad_theta = _adjoint_jit(relaxed, theta, setup, jnp.asarray(cotangent, dtype) * diagonal, cg_iters=500)
                return grad_theta / diagonal

    out = np.asarray(final, np.float64) * diagonal + centre
    move = np.linalg.norm(out - v64, axis=1) / diagonal
    if len(edges_np):
        ratio = np.linalg.norm(out[edges_np[:, 0]] - out[edges_np[:, 1]], axis=1) / np.maximum(
            np.linalg.norm(v64[edges_np[:, 0]] - v64[edges_np[:, 1]], axis=1), 1e-300
        )
        worst = float(np.min(np.minimum(ratio, 1 / np.maximum(ratio, 1e-300))))
    else:
        worst = 1.0
    steps = int(state.step)
    history = state.history
    result = UntangleResult(
        vertices=out.astype(dtype),
        converged=jnp.bool_(len(remaining) == 0),
        iterations=jnp.int32(steps),
        num_intersections=jnp.int32(len(remaining)),
        history=history,
        max_displacement=jnp.asarray(move.max() if len(move) else 0.0),
        mean_displacement=jnp.asarray(move.mean() if len(move) else 0.0),
        worst_edge_ratio=jnp.asarray(worst),
        relax_iterations=jnp.int32(relax_stats[0]),
        relax_cg_iterations=jnp.int32(relax_stats[1]),
        relax_energy=jnp.asarray(relax_stats[2]),
        relax_gradient_norm=jnp.asarray(relax_stats[3]),
        seconds=time.perf_counter() - start,
    )
    return result, backward

"""Layer 4: ``newton_cg``, a generic inexact Newton loop (matrix-free CG, backtracking line search).

Usable for any energy: the untangling solver's relaxation phase and the paper's route are two
instances. Everything runs in one ``lax.while_loop``, so it is jittable end to end.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._types import Array, Bool, Float, Int


class NewtonResult(NamedTuple):
    """Result of [`newton_cg`][tritri_jax.newton_cg].

    ``x`` the last accepted iterate; ``energy`` and ``gradient_norm`` (max-norm; ``inf`` where the
    energy is not finite, and the loop stops there) at it; ``iterations``
    Newton steps taken; ``cg_iterations`` summed over all steps; ``converged``: the gradient norm
    fell below ``tol``; ``stalled``: no step length in the line search was acceptable.
    """

    x: Array
    energy: Float[Array, ""]
    gradient_norm: Float[Array, ""]
    iterations: Int[Array, ""]
    cg_iterations: Int[Array, ""]
    converged: Bool[Array, ""]
    stalled: Bool[Array, ""]


def conjugate_gradient(matvec, b, *, maxiter: int, rtol, precondition=None):
    """Solve ``A x = b`` for PSD ``A`` given as ``matvec``; returns ``(x, iterations)``.

    ``precondition``: ``r -> M^{-1} r`` for a symmetric positive definite ``M`` close to ``A``
    (preconditioned CG), or ``None``. Stops when ``|r| <= rtol |b|``, after ``maxiter`` iterations,
    or on a direction of non-positive curvature (then the iterate so far is returned, still a
    descent direction for Newton).
    """

    def dot(a, c):
        return jnp.sum(a * c)

    if precondition is None:
        precondition = lambda r: r  # noqa: E731
    x = jnp.zeros_like(b)
    r = b
    z0 = precondition(b)
    p = z0
    rz = dot(r, z0)
    target = rtol**2 * dot(b, b)

    def cond(state):
        _, r, _, _, k, stop = state
        return (k < maxiter) & (dot(r, r) > target) & ~stop

    def body(state):
        x, r, p, rz, k, _ = state
        ap = matvec(p)
        curvature = dot(p, ap)
        ok = curvature > 0
        alpha = jnp.where(ok, rz / jnp.where(ok, curvature, 1), 0)
        x = x + alpha * p
        r = r - alpha * ap
        z = precondition(r)
        rz_new = dot(r, z)
        p = z + (rz_new / jnp.where(rz > 0, rz, 1)) * p
        return x, r, p, rz_new, k + 1, ~ok

    x, _, _, _, k, _ = lax.while_loop(cond, body, (x, r, p, rz, jnp.int32(0), jnp.bool_(False)))
    x = jnp.where(jnp.any(x != 0), x, z0)  # nothing learned (first direction flat): preconditioned steepest descent
    return x, k


def _expand(energy, accept, x, d, aux, alpha, trial, e_trial, ok, largest, cap, doublings: int):
    """``newton_cg(expand=True)``: from an accepted full step, double it while the energy falls."""
    limit = jnp.where(largest > 0, cap / jnp.where(largest > 0, largest, 1), jnp.inf)  # no cap: largest is 0
    limit = jnp.minimum(limit, 2.0**doublings)

    def cond(state):
        m, _, going = state
        return going & (2 * m <= limit)

    def body(state):
        m, e_m, _ = state
        e_next = energy(x + 2 * m * d, aux)
        better = (e_next < e_m) & jnp.isfinite(e_next)
        return jnp.where(better, 2 * m, m), jnp.where(better, e_next, e_m), better

    m, _, _ = lax.while_loop(cond, body, (alpha, e_trial, ok & (alpha == 1)))
    further = x + m * d
    take = lax.cond(m > 1, lambda: accept(further, aux), lambda: jnp.bool_(False))
    return jnp.where(take, m, alpha), jnp.where(take, further, trial)


def newton_cg(
    energy: Callable,
    x0,
    *,
    hessian: Callable | None = None,
    accept: Callable | None = None,
    prepare: Callable | None = None,
    preconditioner: Callable | None = None,
    max_iters: int = 50,
    cg_iters: int = 100,
    cg_rtol: float = 1e-2,
    tol: float = 1e-8,
    max_step=None,
    step_growth: float | None = None,
    damping: float = 0.0,
    line_search_steps: int = 12,
    expand: bool = False,
) -> NewtonResult:
    """Minimise ``energy(x)`` by inexact Newton: CG on $(H + \\mu I) d = -g$, then backtracking.

    **Arguments:**

    - ``energy``: ``x -> scalar``, differentiable with ``jax.grad``.
    - ``x0``: starting point (any array shape).
    - ``hessian``: ``x -> (v -> H(x) v)``, built once per Newton step, with ``H`` positive
      semi-definite (a Gauss-Newton operator, say); default: the exact Hessian by linearising the
      gradient (CG stops on negative curvature).
    - ``accept``: ``x_trial -> bool``; trial points it rejects are never taken (e.g. "creates no
      crossing"). It is asked only about trials that already satisfy the Armijo condition.
      Default: accept all.
    - ``prepare``: ``x -> aux`` (a PyTree), computed once per accepted point and passed as a second
      argument to ``energy``, ``hessian`` and ``accept`` (a neighbour list valid for the whole line
      search, say; ``grad`` is taken in ``x`` only). Default: none, and the callables take ``x`` alone.
    - ``preconditioner``: ``x -> (r -> M^{-1} r)``, built once per Newton step like ``hessian``, with
      ``M`` symmetric positive definite and close to the Hessian (preconditioned CG); default: none.
    - ``max_iters``, ``cg_iters``, ``cg_rtol``: Newton and CG budgets; CG's relative tolerance.
    - ``tol``: stop when $\\max |g| <$ ``tol``.
    - ``max_step``: cap on the largest row norm of each step (rows of ``x`` are points), or ``None``.
    - ``step_growth``: with ``max_step``, an adaptive cap: each step's is ``step_growth`` times the
      previous step's largest row norm, within ``[max_step / 16, max_step]`` (the first step's is
      ``max_step``), and ``prepare`` is called as ``prepare(x, cap)`` (a neighbour list then only
      needs to reach as far as the step can go: near a minimum the steps, and the lists, shrink).
    - ``damping``: $\\mu \\ge 0$ added to the Hessian.
    - ``line_search_steps``: halvings tried before declaring a stall (Armijo condition, $c = 10^{-4}$,
      with a slack of 16 ulp of the energy: below that its decrease is round-off, and the gradient decides).
    - ``expand``: when the full step is accepted, also try 2, 4, 8, ... times it (within the cap,
      ``line_search_steps`` doublings without one) while the energy keeps falling, and take the
      last one that ``accept`` allows. A log barrier at distance $\\epsilon$ has Newton steps
      that only double $\\epsilon$: from a start where two surfaces almost touch, Newton took one
      step per doubling (17 steps from $10^{-8}$ on the figure-of-eight knot).

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> result = tt.newton_cg(lambda x: jnp.sum((x - 3.0) ** 2) + jnp.sum(x**4), jnp.zeros(4))
    >>> bool(result.converged), round(float(result.x[0]), 4)
    (True, 1.0)

    ```
    """
    if step_growth is not None and max_step is None:
        raise ValueError("newton_cg: step_growth needs max_step")
    if prepare is None:
        f, h, a = energy, hessian, accept
        energy = lambda x, _: f(x)  # noqa: E731
        hessian = None if h is None else (lambda x, _: h(x))
        accept = None if a is None else (lambda x, _: a(x))
        pc = preconditioner
        preconditioner = None if pc is None else (lambda x, _: pc(x))
        prepare = lambda x: None  # noqa: E731
    if step_growth is None:
        prepare_at = lambda x, cap: prepare(x)  # noqa: E731
    else:
        prepare_at = prepare
    value_and_grad = jax.value_and_grad(energy)
    if hessian is None:

        def hessian(x, aux):
            return jax.linearize(lambda y: value_and_grad(y, aux)[1], x)[1]

    if accept is None:

        def accept(x, aux):
            return jnp.bool_(True)

    def gradient_norm(e, g):  # inf where the energy is not finite (e.g. a full buffer): never "converged"
        return jnp.where(jnp.isfinite(e), jnp.max(jnp.abs(g)), jnp.inf)

    def cond(state):
        x, aux, e, g, k, cg_total, stalled, _ = state
        return (k < max_iters) & (gradient_norm(e, g) >= tol) & ~stalled & jnp.isfinite(e)

    def body(state):
        x, aux, e, g, k, cg_total, _, cap = state
        operator = hessian(x, aux)
        precondition = None if preconditioner is None else preconditioner(x, aux)
        d, cg_k = conjugate_gradient(
            lambda v: operator(v) + damping * v, -g, maxiter=cg_iters, rtol=cg_rtol, precondition=precondition
        )
        slope = jnp.sum(g * d)
        d = jnp.where(slope < 0, d, -g)  # never go uphill
        slope = jnp.where(slope < 0, slope, -jnp.sum(g * g))
        largest = jnp.zeros((), d.dtype)  # the capped step's largest row norm (for step_growth)
        if max_step is not None:
            largest = jnp.max(jnp.sqrt(jnp.sum(d.reshape(d.shape[0], -1) ** 2, axis=-1)))
            shrink = jnp.minimum(1.0, cap / jnp.where(largest > 0, largest, 1))
            d, slope, largest = d * shrink, slope * shrink, largest * shrink

        # round-off in the energy: near a minimum its change falls below it while the gradient, a sum
        # of terms far smaller than the energy, is still accurate (the trefoil stalled at |g| 1.1e-6)
        slack = 16 * jnp.finfo(e.dtype).eps * jnp.abs(e)

        def ls_cond(ls):
            alpha, _, _, ok, _, j = ls
            return ~ok & (j < line_search_steps)

        def ls_body(ls):
            alpha, _, _, _, _, j = ls
            trial = x + alpha * d
            e_trial = energy(trial, aux)
            bound = e + 1e-4 * alpha * slope
            strict = (e_trial <= bound) & jnp.isfinite(e_trial)
            armijo = (e_trial <= bound + slack) & jnp.isfinite(e_trial)
            ok = lax.cond(armijo, lambda: accept(trial, aux), lambda: jnp.bool_(False))
            return jnp.where(ok, alpha, alpha / 2), trial, e_trial, ok, strict, j + 1

        one = jnp.ones((), e.dtype)
        no = jnp.bool_(False)
        state = (one, x, e, no, no, jnp.int32(0))
        alpha, trial, e_trial, ok, strict, _ = lax.while_loop(ls_cond, ls_body, state)
        if expand:
            alpha, trial = _expand(
                energy, accept, x, d, aux, alpha, trial, e_trial, ok, largest, cap, line_search_steps
            )
        if step_growth is not None:
            cap = jnp.where(ok, jnp.clip(step_growth * alpha * largest, max_step / 16, max_step), cap).astype(cap.dtype)

        def moved():
            aux_new = prepare_at(trial, cap)
            e_new, g_new = value_and_grad(trial, aux_new)
            return trial, aux_new, e_new, g_new

        new = lax.cond(ok, moved, lambda: (x, aux, e, g))
        # a step accepted only within the energy's round-off must shrink the gradient, else it is a stall
        ok = ok & (strict | (gradient_norm(new[2], new[3]) < gradient_norm(e, g)))
        x, aux, e, g = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, (x, aux, e, g))
        return x, aux, e, g, k + ok.astype(jnp.int32), cg_total + cg_k, ~ok, cap

    cap0 = jnp.asarray(jnp.inf if max_step is None else max_step, jax.tree_util.tree_leaves(x0)[0].dtype)
    aux0 = prepare_at(x0, cap0)
    e0, g0 = value_and_grad(x0, aux0)
    state = (x0, aux0, e0, g0, jnp.int32(0), jnp.int32(0), jnp.bool_(False), cap0)
    x, _, e, g, k, cg_total, stalled, _ = lax.while_loop(cond, body, state)
    gnorm = gradient_norm(e, g)
    return NewtonResult(x, e, gnorm, k, cg_total, gnorm < tol, stalled)

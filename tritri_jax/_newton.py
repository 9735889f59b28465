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

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> result = tt.newton_cg(lambda x: jnp.sum((x - 1.0) ** 2), jnp.zeros(3))
    >>> bool(result.converged), int(result.iterations) >= 1, float(result.energy) < 1e-8
    (True, True, True)

    ```
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
      crossing"). While backtracking it is asked first, and the energy is evaluated only at the
      trial points it allows (in ``untangle``'s phase 2 every backtrack measured on the pretzel was
      a trial point that crossed, where the energy had fallen). Default: accept all.
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
        prepare_at = lambda x, cap, previous: prepare(x)  # noqa: E731
    else:
        prepare_at = lambda x, cap, previous: prepare(x, cap)  # noqa: E731
    if hessian is None:
        value_and_grad = jax.value_and_grad(energy)

        def hessian(x, aux):
            return jax.linearize(lambda y: value_and_grad(y, aux)[1], x)[1]

    if accept is None:

        def accept(x, aux):
            return jnp.bool_(True)

    result, _ = newton_loop(
        energy,
        x0,
        hessian=lambda x, aux, progress: hessian(x, aux),
        accept=accept,
        prepare=prepare_at,
        preconditioner=preconditioner,
        max_iters=max_iters,
        cg_iters=cg_iters,
        cg_rtol=cg_rtol,
        tol=tol,
        max_step=max_step,
        step_growth=step_growth,
        damping=damping,
        line_search_steps=line_search_steps,
        expand=expand,
    )
    return result


class NewtonProgress(NamedTuple):
    """What ``newton_loop`` tells its ``hessian`` besides the point: the step's number, the gradient's
    max-norm at the point and at the start (a solver can choose its operator by them)."""

    iteration: Int[Array, ""]
    gradient_norm: Float[Array, ""]
    initial_gradient_norm: Float[Array, ""]


def newton_loop(
    energy: Callable,
    x0,
    *,
    hessian: Callable,
    accept: Callable,
    prepare: Callable,
    preconditioner: Callable | None,
    max_iters: int,
    cg_iters: int,
    cg_rtol,
    tol,
    max_step,
    step_growth: float | None,
    damping: float,
    line_search_steps: int,
    expand: bool,
    stop_when_blocked: bool = False,
) -> tuple[NewtonResult, Bool[Array, ""]]:
    """The loop behind [`newton_cg`][tritri_jax.newton_cg], with its callables in their full form:
    ``energy(x, aux)``, ``accept(x, aux)``, ``prepare(x, cap, previous)`` (``previous``: the aux of
    the last accepted point, all zeros at the start, ``None`` when only its shape is asked for; a
    neighbour list can be kept while it is still valid), ``preconditioner(x, aux)`` or ``None``,
    and ``hessian(x, aux, progress)`` with ``progress`` a ``NewtonProgress``; ``cg_rtol`` a number
    or ``progress -> rtol``.

    Each callable appears once in the traced loop, so it is compiled once: the start is evaluated
    by the loop's first pass (which takes no step), and one line-search loop both backtracks and
    expands. Measured on phase 2 of ``untangle`` (trefoil knot): two call sites each of the energy,
    its gradient, ``prepare`` and ``accept`` made a graph twice as large, and compiling it took
    twice as long.

    With ``stop_when_blocked``, a step whose line search met a point that ``accept`` allowed but whose
    energy was not finite (a buffer in ``aux`` too small there) stops the loop at the point it
    accepted, reported as ``stalled``, for the caller to grow the buffer and resume. Returns the
    ``NewtonResult`` and whether the loop stopped so."""
    value_and_grad = jax.value_and_grad(energy)

    def gradient_norm(e, g):  # inf where the energy is not finite (e.g. a full buffer): never "converged"
        return jnp.where(jnp.isfinite(e), jnp.max(jnp.abs(g)), jnp.inf)

    def evaluate(x, cap, previous):
        aux = prepare(x, cap, previous)
        e, g = value_and_grad(x, aux)
        return x, aux, e, g

    def cond(state):
        x, aux, e, g, k, cg_total, stalled, _, _, fresh, _ = state
        going = (k < max_iters) & (gradient_norm(e, g) >= tol) & ~stalled & jnp.isfinite(e)
        return fresh | going

    def line_search(x, aux, e, d, slope, largest, cap):
        """Backtracking (Armijo) from the full step; with ``expand``, an accepted full step is then
        doubled while the energy falls, and the last multiple is taken if ``accept`` allows it.
        Returns ``(multiple of d taken, accepted, Armijo held strictly, a point accept allowed had a
        non-finite energy)``."""
        # round-off in the energy: near a minimum its change falls below it while the gradient, a sum
        # of terms far smaller than the energy, is still accurate (the trefoil stalled at |g| 1.1e-6)
        slack = 16 * jnp.finfo(e.dtype).eps * jnp.abs(e)
        limit = jnp.where(largest > 0, cap / jnp.where(largest > 0, largest, 1), jnp.inf)  # no cap: largest is 0
        limit = jnp.minimum(limit, 2.0**line_search_steps) if expand else jnp.zeros_like(limit)
        backtrack, expanding, confirm, done = 0, 1, 2, 3

        def ls_cond(ls):
            return ls[3] != done

        def ls_body(ls):
            alpha, m, e_m, mode, ok, strict, blocked, j = ls
            scale = jnp.where(mode == backtrack, alpha, jnp.where(mode == expanding, 2 * m, m))
            point = x + scale * d
            # backtracking asks accept first: the energy at a point it rejects is not needed
            asked = (mode == backtrack) | (mode == confirm)
            allowed = lax.cond(asked, lambda: accept(point, aux), lambda: jnp.bool_(False))
            measured = (mode == expanding) | ((mode == backtrack) & allowed)
            e_p = lax.cond(measured, lambda: energy(point, aux), lambda: jnp.where(mode == confirm, e_m, jnp.inf))
            bound = e + 1e-4 * alpha * slope
            finite = jnp.isfinite(e_p)
            armijo = (e_p <= bound + slack) & finite
            # backtracking: taken (then expand if it was the full step), or halve, or give up
            taken = allowed & armijo & (mode == backtrack)
            grow = taken & (alpha == 1) & (2 <= limit)
            halve = (mode == backtrack) & ~taken
            # expanding: keep doubling while the energy falls (by more than its round-off: doubling a
            # Newton step at the minimum, within it, grew the gradient and stalled the loop), then
            # confirm the multiple reached
            better = (mode == expanding) & (e_p < e_m - slack) & finite
            m_new = jnp.where(taken, alpha, jnp.where(better, 2 * m, m))
            after_expanding = jnp.where(better & (4 * m <= limit), expanding, jnp.where(m_new > 1, confirm, done))
            # confirming: the expanded point if accept allows it, else the full step
            m_new = jnp.where((mode == confirm) & ~allowed, jnp.ones_like(m), m_new)
            after_taking = jnp.where(grow, expanding, done)
            after_halving = jnp.where(j + 1 < line_search_steps, backtrack, done)
            mode_new = jnp.select(
                [taken, halve, mode == expanding], [after_taking, after_halving, after_expanding], done
            )
            mode_new = mode_new.astype(jnp.int32)
            e_m = jnp.where(taken | better, e_p, e_m)
            strict = jnp.where(taken, (e_p <= bound) & finite, strict)
            alpha = jnp.where(halve, alpha / 2, alpha)
            blocked = blocked | ((mode == backtrack) & allowed & ~finite)
            return alpha, m_new, e_m, mode_new, ok | taken, strict, blocked, j + halve.astype(jnp.int32)

        one = jnp.ones((), e.dtype)
        no = jnp.bool_(False)
        state = (one, one, e, jnp.int32(backtrack), no, no, no, jnp.int32(0))
        alpha, m, _, _, ok, strict, blocked, _ = lax.while_loop(ls_cond, ls_body, state)
        return jnp.where(ok, m, alpha), ok, strict, blocked

    def body(state):
        x, aux, e, g, k, cg_total, _, cap, g_start, fresh, _ = state

        def step():
            progress = NewtonProgress(k, gradient_norm(e, g), g_start)
            operator = hessian(x, aux, progress)
            rtol = cg_rtol(progress) if callable(cg_rtol) else cg_rtol
            precondition = None if preconditioner is None else preconditioner(x, aux)
            d, cg_k = conjugate_gradient(
                lambda v: operator(v) + damping * v, -g, maxiter=cg_iters, rtol=rtol, precondition=precondition
            )
            slope = jnp.sum(g * d)
            d = jnp.where(slope < 0, d, -g)  # never go uphill
            slope = jnp.where(slope < 0, slope, -jnp.sum(g * g))
            largest = jnp.zeros((), d.dtype)  # the capped step's largest row norm (for step_growth)
            if max_step is not None:
                largest = jnp.max(jnp.sqrt(jnp.sum(d.reshape(d.shape[0], -1) ** 2, axis=-1)))
                shrink = jnp.minimum(1.0, cap / jnp.where(largest > 0, largest, 1))
                d, slope, largest = d * shrink, slope * shrink, largest * shrink
            alpha, ok, strict, blocked = line_search(x, aux, e, d, slope, largest, cap)
            new_cap = cap
            if step_growth is not None:
                grown = jnp.clip(step_growth * alpha * largest, max_step / 16, max_step)
                new_cap = jnp.where(ok, grown, cap).astype(cap.dtype)
            return x + alpha * d, ok, strict, blocked, cg_k, new_cap

        def start():  # the first pass evaluates the start and takes no step
            return x, jnp.bool_(True), jnp.bool_(True), jnp.bool_(False), jnp.int32(0), cap

        trial, ok, strict, blocked, cg_k, cap = lax.cond(fresh, start, step)
        new = lax.cond(ok, lambda: evaluate(trial, cap, aux), lambda: (x, aux, e, g))
        # a step accepted only within the energy's round-off must shrink the gradient, else it is a stall
        ok = ok & (strict | (gradient_norm(new[2], new[3]) < gradient_norm(e, g)))
        x, aux, e, g = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, (x, aux, e, g))
        g_start = jnp.where(fresh, gradient_norm(e, g), g_start)
        taken = ok & ~fresh
        halt = ok & blocked & stop_when_blocked
        stop = ~ok | halt
        return x, aux, e, g, k + taken.astype(jnp.int32), cg_total + cg_k, stop, cap, g_start, jnp.bool_(False), halt

    cap0 = jnp.asarray(jnp.inf if max_step is None else max_step, jax.tree_util.tree_leaves(x0)[0].dtype)
    aux0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(prepare, x0, cap0, None))
    e0 = jnp.zeros((), jax.eval_shape(energy, x0, aux0).dtype)
    g0 = jnp.zeros_like(x0)
    gnorm0 = jnp.zeros((), e0.dtype)
    no = jnp.bool_(False)
    state = (x0, aux0, e0, g0, jnp.int32(0), jnp.int32(0), no, cap0, gnorm0, jnp.bool_(True), no)
    x, _, e, g, k, cg_total, stalled, _, _, _, halted = lax.while_loop(cond, body, state)
    gnorm = gradient_norm(e, g)
    return NewtonResult(x, e, gnorm, k, cg_total, gnorm < tol, stalled), halted

"""Layer 4: the generic newton_cg: convergence, step caps (fixed and adaptive), admissibility, the
prepare hook, and preconditioned CG."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tritri_jax as tt
from tritri_jax._newton import conjugate_gradient, newton_loop


def _rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_reaches_the_minimum_of_rosenbrock():
    result = jax.jit(lambda x: tt.newton_cg(_rosenbrock, x, max_iters=200, tol=1e-10))(jnp.full(6, -0.5))
    assert bool(result.converged) and not bool(result.stalled)
    np.testing.assert_allclose(np.asarray(result.x), 1.0, atol=1e-8)
    assert float(result.gradient_norm) < 1e-10 and int(result.cg_iterations) >= int(result.iterations)


def test_step_cap_and_rejected_trials_are_respected():
    energy = lambda x: jnp.sum((x - 3.0) ** 2)  # noqa: E731
    wall = lambda x: jnp.all(x[:, 0] <= 1.0)  # noqa: E731  trials past x = 1 are inadmissible
    path = []

    def accept(x):
        jax.debug.callback(lambda y: path.append(np.asarray(y)), x)
        return wall(x)

    x0 = jnp.zeros((4, 3))
    result = tt.newton_cg(energy, x0, accept=accept, max_iters=30, max_step=0.25)
    assert bool(wall(result.x)) and float(result.x[0, 0]) > 0.9  # pressed against the wall, not through it
    jax.effects_barrier()
    reach = [np.linalg.norm(trial - np.asarray(x0), axis=-1).max() for trial in path]
    assert int(result.iterations) >= 4 and max(reach) <= 0.25 * (int(result.iterations) + 1) + 1e-12  # capped
    assert bool(result.stalled)  # no admissible descent left at the wall


def test_backtracking_never_evaluates_the_energy_where_accept_rejects():
    wall = lambda x: jnp.all(x[:, 0] <= 1.0)  # noqa: E731
    measured = []

    def energy(x):  # evaluated by value, gradient and line search alike
        jax.debug.callback(lambda y: measured.append(np.asarray(y)), x)
        return jnp.sum((x - 3.0) ** 2)

    result = tt.newton_cg(energy, jnp.zeros((4, 3)), accept=wall, max_iters=30, max_step=0.25)
    jax.effects_barrier()
    assert bool(result.stalled) and float(result.x[0, 0]) > 0.9  # halved against the wall, then stopped
    assert len(measured) > int(result.iterations) + 1  # trial points, besides the iterates
    assert all(np.all(point[:, 0] <= 1.0) for point in measured)


def test_prepare_runs_once_per_accepted_point_and_feeds_every_callable():
    calls = []

    def prepare(x):
        jax.debug.callback(lambda: calls.append(1))
        return {"centre": jnp.round(x)}  # an auxiliary value, fixed during one line search

    def energy(x, aux):
        return jnp.sum((x - 2.0) ** 2) + 0.0 * jnp.sum(aux["centre"])

    result = tt.newton_cg(energy, jnp.zeros(3), prepare=prepare, hessian=lambda x, aux: lambda v: 2 * v)
    jax.effects_barrier()
    assert bool(result.converged)
    np.testing.assert_allclose(np.asarray(result.x), 2.0)
    assert len(calls) == int(result.iterations) + 1  # the start, then each accepted point


def test_a_point_where_the_energy_is_not_finite_is_never_called_converged():
    # the auxiliary value at the new point makes the energy infinite there (a full buffer, say);
    # trials are scored with the old one, so the step is taken, and the loop must stop unconverged
    def energy(x, aux):
        return jnp.sum((x - 3.0) ** 2) + jnp.where(aux[0] > 1.0, jnp.inf, 0.0)

    result = tt.newton_cg(energy, jnp.zeros(2), prepare=lambda x: x, hessian=lambda x, aux: lambda v: 2 * v)
    assert not bool(result.converged) and float(result.gradient_norm) == np.inf
    assert int(result.iterations) == 1 and not np.isfinite(float(result.energy))


def test_preconditioned_cg_solves_the_same_system_in_fewer_iterations():
    scale = jnp.logspace(0, 4, 40)  # condition number 1e4, ill-scaled on purpose
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.normal(size=(40, 40)))
    a = jnp.asarray(np.diag(np.asarray(scale)) + 1e-2 * q @ np.diag(rng.random(40)) @ q.T)
    b = jnp.asarray(rng.normal(size=40))
    plain, k_plain = conjugate_gradient(lambda v: a @ v, b, maxiter=400, rtol=1e-10)
    jacobi, k_jacobi = conjugate_gradient(lambda v: a @ v, b, maxiter=400, rtol=1e-10, precondition=lambda r: r / scale)
    expected = np.linalg.solve(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(plain), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jacobi), expected, rtol=1e-6)
    assert int(k_jacobi) * 3 < int(k_plain)


def test_adaptive_step_cap_follows_the_steps_and_reaches_prepare():
    caps = []

    def prepare(x, cap):
        jax.debug.callback(lambda c: caps.append(float(c)), cap)
        return None

    def energy(x, aux):
        return jnp.sum((x - 3.0) ** 2) + 0.1 * jnp.sum(x**4)

    x0 = jnp.zeros((5, 3))
    result = tt.newton_cg(energy, x0, prepare=prepare, max_step=0.5, step_growth=4.0, tol=1e-10, max_iters=60)
    jax.effects_barrier()
    assert bool(result.converged)
    assert caps[0] == 0.5 and all(0.5 / 16 - 1e-12 <= c <= 0.5 + 1e-12 for c in caps)
    assert caps[-1] < 0.5  # near the minimum the steps, and so the caps, have shrunk
    with pytest.raises(ValueError, match="step_growth needs max_step"):
        tt.newton_cg(energy, x0, prepare=prepare, step_growth=4.0)


def test_a_scalar_unknown_works():
    result = tt.newton_cg(lambda x: (x - 2.0) ** 2 + 0.5 * x**4, jnp.asarray(0.0), tol=1e-10)
    assert bool(result.converged) and abs(float(2 * (result.x - 2.0) + 2 * result.x**3)) < 1e-9


def test_expansion_escapes_a_log_barrier_start_in_a_few_steps():
    """From 1e-8 on -log(x) + x, each Newton step only doubles x; expand=True doubles the step
    itself, within the cap, while the energy falls (and never past an inadmissible point)."""

    def energy(x):
        return jnp.sum(jnp.where(x > 0, x - jnp.log(jnp.where(x > 0, x, 1.0)), jnp.inf))

    x0 = jnp.full((1, 1), 1e-8)
    plain = tt.newton_cg(energy, x0, max_iters=60, tol=1e-9, max_step=4.0)
    expanded = tt.newton_cg(energy, x0, max_iters=60, tol=1e-9, max_step=4.0, expand=True)
    for result in (plain, expanded):
        assert bool(result.converged)
        np.testing.assert_allclose(np.asarray(result.x), 1.0, atol=1e-8)
    assert int(plain.iterations) >= 25 and int(expanded.iterations) <= 10
    below = tt.newton_cg(energy, x0, max_iters=60, tol=1e-9, max_step=4.0, expand=True, accept=lambda x: x[0, 0] < 0.5)
    assert float(below.x[0, 0]) < 0.5 and bool(below.stalled)  # expansion asks accept like every step


def test_a_step_cut_short_by_a_non_finite_energy_stops_the_loop_when_asked():
    """``newton_loop(stop_when_blocked=True)`` (phase 2: a trial point past the close-pair buffer,
    where the energy is ``inf``) stops at the point the line search accepted, reported as stalled
    and halted; without it the loop crawls along the wall; resumed with the wall moved, it finishes."""

    def run(x0, wall, stop_when_blocked):
        return newton_loop(
            lambda x, aux: jnp.where(x[0, 0] > wall, jnp.inf, jnp.sum((x - 3.0) ** 2)),
            x0,
            hessian=lambda x, aux, progress: lambda v: 2.0 * v,
            accept=lambda x, aux: jnp.bool_(True),
            prepare=lambda x, cap, previous: None,
            preconditioner=None,
            max_iters=50,
            cg_iters=10,
            cg_rtol=1e-8,
            tol=1e-10,
            max_step=0.5,
            step_growth=None,
            damping=0.0,
            line_search_steps=8,
            expand=False,
            stop_when_blocked=stop_when_blocked,
        )

    x0 = jnp.zeros((1, 1))  # steps of 0.5 (the cap) to 1.0, then 1.5 is past the wall: 1.25, 1.125
    halted, blocked = run(x0, 1.2, True)
    assert bool(blocked) and bool(halted.stalled) and not bool(halted.converged)
    assert int(halted.iterations) == 3 and float(halted.x[0, 0]) == pytest.approx(1.125)
    crawled, blocked = run(x0, 1.2, False)
    assert not bool(blocked) and int(crawled.iterations) > 3 and float(crawled.x[0, 0]) <= 1.2
    resumed, blocked = run(halted.x, 10.0, True)
    assert bool(resumed.converged) and not bool(resumed.stalled) and not bool(blocked)
    np.testing.assert_allclose(np.asarray(resumed.x), 3.0, atol=1e-10)

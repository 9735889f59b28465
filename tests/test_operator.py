"""``untangle`` as a JAX operator: inside ``jit`` and ``vmap``, reverse-mode derivatives inside
``jit``, the gradient fallbacks, forward mode refused with a message, ``Untangler``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tritri_jax as tt

from .compiles import CompileCount

VERTICES, FACES = tt.scenes.two_spheres(6)
WEIGHTS = np.random.default_rng(0).normal(size=VERTICES.shape)


@pytest.fixture(scope="module")
def eager():
    return tt.untangle(VERTICES, FACES)


def _loss(**options):
    return lambda x: jnp.sum(WEIGHTS * tt.untangle(x, FACES, **options).vertices)


def _same_result(traced, eager):
    """Every field of ``traced`` (from inside a transformation) equals ``eager``'s; ``history`` is
    padded past ``iterations``."""
    np.testing.assert_array_equal(np.asarray(traced.vertices), np.asarray(eager.vertices))
    steps = int(eager.iterations)
    np.testing.assert_array_equal(np.asarray(traced.history)[:steps], np.asarray(eager.history))
    np.testing.assert_array_equal(np.asarray(traced.history)[steps:], -1)
    np.testing.assert_allclose(np.asarray(traced.history_length)[:steps], np.asarray(eager.history_length))
    for name in eager._fields[1:-2]:
        if not name.startswith("history"):
            np.testing.assert_array_equal(np.asarray(getattr(traced, name)), np.asarray(getattr(eager, name)), name)
    assert traced.options == eager.options


def test_untangle_inside_jit_is_the_eager_result(eager):
    faces = jnp.asarray(FACES)
    closed_over = jax.jit(lambda x: tt.untangle(x, FACES))(VERTICES)
    traced_faces = jax.jit(tt.untangle)(VERTICES, faces)  # the whole result leaves jit; faces traced too
    for result in (closed_over, traced_faces):
        _same_result(result, eager)
        assert result.history.shape == (eager.options.max_steps * (eager.options.restarts + 1),)
    assert bool(closed_over.converged) and int(closed_over.num_intersections) == 0


def test_untangle_under_vmap_solves_each_mesh_of_a_batch():
    rng = np.random.default_rng(1)
    batch = np.stack([VERTICES, VERTICES * 1.05, VERTICES + 0.01 * rng.normal(size=VERTICES.shape)])
    results = jax.vmap(lambda x: tt.untangle(x, FACES))(batch)
    assert results.vertices.shape == batch.shape and results.converged.shape == (3,)
    for k, mesh in enumerate(batch):
        alone = tt.untangle(mesh, FACES)
        np.testing.assert_array_equal(np.asarray(results.vertices[k]), np.asarray(alone.vertices))
        assert int(results.num_intersections[k]) == 0 and int(results.iterations[k]) == int(alone.iterations)


def test_gradient_inside_jit_is_the_eager_one_and_finite_differences():
    loss = _loss()
    eager = jax.grad(loss)(jnp.asarray(VERTICES))
    value, inside = jax.jit(jax.value_and_grad(loss))(jnp.asarray(VERTICES))
    np.testing.assert_allclose(np.asarray(inside), np.asarray(eager), rtol=1e-9, atol=1e-12)
    assert np.isclose(float(value), float(loss(VERTICES)))
    direction = np.random.default_rng(2).normal(size=VERTICES.shape)
    eps = 1e-5  # central differences of the whole operator (phase 1, phase 2 to 5e-7, certification)
    compiled = jax.jit(loss)
    fd = (float(compiled(VERTICES + eps * direction)) - float(compiled(VERTICES - eps * direction))) / (2 * eps)
    np.testing.assert_allclose(float(jnp.sum(inside * direction)), fd, rtol=1e-5)


@pytest.fixture
def rebuilt(monkeypatch):
    """No VJP kept from a forward pass inside a transformation: the backward one rebuilds it."""
    from tritri_jax import _operator

    monkeypatch.setattr(_operator, "_RECENT", _operator._Recent(size=0))


def test_a_rebuilt_gradient_inside_jit_is_the_eager_one_also_for_a_soup(rebuilt):
    soup, soup_faces = VERTICES[FACES].reshape(-1, 3), np.arange(3 * len(FACES)).reshape(-1, 3)
    weights = np.random.default_rng(4).normal(size=soup.shape)
    for vertices, faces, w in ((VERTICES, FACES, WEIGHTS), (soup, soup_faces, weights)):

        def loss(x, faces=faces, w=w):
            return jnp.sum(w * tt.untangle(x, faces).vertices)

        eager = jax.grad(loss)(jnp.asarray(vertices))
        inside = jax.jit(jax.grad(loss))(jnp.asarray(vertices))
        np.testing.assert_allclose(np.asarray(inside), np.asarray(eager), rtol=1e-9, atol=1e-12)


def test_the_vjp_of_an_eager_solve_applied_inside_jit():
    x = jnp.asarray(VERTICES)
    _, vjp = jax.vjp(lambda v: tt.untangle(v, FACES).vertices, x)
    cotangent = jnp.asarray(WEIGHTS)
    np.testing.assert_allclose(np.asarray(jax.jit(vjp)(cotangent)[0]), np.asarray(vjp(cotangent)[0]), rtol=1e-12)
    _, short = jax.vjp(lambda v: tt.untangle(v, FACES, relax=False).vertices, x)
    with pytest.raises(Exception, match="gradient_fallback='approximate' or 'zero'"):
        jax.block_until_ready(jax.jit(short)(cotangent))


def test_gradient_under_vmap_inside_jit_is_each_meshs():
    batch = jnp.stack([jnp.asarray(VERTICES), jnp.asarray(VERTICES) * 1.05])
    gradients = jax.jit(jax.vmap(jax.grad(_loss())))(batch)
    for k in range(2):
        np.testing.assert_allclose(np.asarray(gradients[k]), np.asarray(jax.grad(_loss())(batch[k])), rtol=1e-9)


def test_forward_mode_is_refused_with_the_supported_transforms_named():
    x = jnp.asarray(VERTICES)
    for transform in (lambda f: jax.jvp(f, (x,), (x,)), lambda f: jax.jacfwd(f)(x)):
        with pytest.raises(TypeError, match="reverse-mode derivatives .*not forward mode"):
            transform(lambda v: tt.untangle(v, FACES).vertices)
    # jax.linearize traces (reverse mode is built on it); its linear map is JAX's forward mode
    _, linear = jax.linearize(lambda v: tt.untangle(v, FACES).vertices, x)
    with pytest.raises(TypeError, match="forward-mode"):
        linear(x)


@pytest.mark.parametrize("where", ["eager", "jit"])
def test_gradient_fallbacks_where_there_is_no_stationary_point(where):
    """``relax=False``: the result is certified but not phase 2's stationary point."""
    wrap = (lambda f: f) if where == "eager" else jax.jit
    x = jnp.asarray(VERTICES)
    with pytest.raises(Exception, match="gradient_fallback='approximate' or 'zero'"):
        np.asarray(wrap(jax.grad(_loss(relax=False)))(x))
    assert not np.any(np.asarray(wrap(jax.grad(_loss(relax=False, gradient_fallback="zero")))(x)))
    approximate = np.asarray(wrap(jax.grad(_loss(relax=False, gradient_fallback="approximate")))(x))
    assert np.all(np.isfinite(approximate)) and np.any(approximate)
    # not certified (one phase-1 step, no restart): no gradient but a zero one
    budget = dict(max_steps=1, restarts=0, fairing_steps=0, global_moves=0)
    with pytest.raises(Exception, match="not certified"):
        np.asarray(wrap(jax.grad(_loss(gradient_fallback="approximate", **budget)))(x))
    assert not np.any(np.asarray(wrap(jax.grad(_loss(gradient_fallback="zero", **budget)))(x)))


def test_an_adjoint_solve_short_of_its_tolerance_is_no_silent_gradient(monkeypatch):
    from tritri_jax import _untangle

    monkeypatch.setattr(_untangle, "_ADJOINT_RESIDUAL", 0.0)  # no residual is small enough
    x = jnp.asarray(VERTICES)
    for wrap in (lambda f: f, jax.jit):
        with pytest.raises(Exception, match="adjoint CG solve of the implicit gradient did not converge"):
            np.asarray(wrap(jax.grad(_loss()))(x))
        last_iterate = np.asarray(wrap(jax.grad(_loss(gradient_fallback="approximate")))(x))
        np.testing.assert_allclose(last_iterate, np.asarray(jax.grad(_loss(gradient_fallback="approximate"))(x)))


@pytest.mark.parametrize("fallback", ["raise", "zero"])
def test_a_lone_triangle_is_the_identity_also_for_its_gradient(fallback):
    triangle, face = np.eye(3), np.array([[0, 1, 2]])
    for wrap in (lambda f: f, jax.jit):
        gradient = wrap(jax.grad(lambda x: jnp.sum(x * tt.untangle(x, face, gradient_fallback=fallback).vertices)))
        np.testing.assert_allclose(np.asarray(gradient(jnp.asarray(triangle))), 2 * triangle)


def test_approximate_fallback_is_the_implicit_gradient_at_a_stationary_point():
    x = jnp.asarray(VERTICES)
    implicit = jax.grad(_loss())(x)
    fallback = jax.jit(jax.grad(_loss(gradient_fallback="approximate")))(x)
    np.testing.assert_allclose(np.asarray(fallback), np.asarray(implicit), rtol=1e-9, atol=1e-12)


def test_float32_inside_jit_is_the_eager_float32_result():
    x32 = VERTICES.astype(np.float32)
    eager = tt.untangle(x32, FACES)
    inside = jax.jit(lambda x: tt.untangle(x, FACES))(x32)
    assert inside.vertices.dtype == np.float32
    _same_result(inside, eager)
    # float32 phase 2 ends where the energy's round-off hides further descent (|g| ~ 5e-4 here), not
    # at a stationary point: its gradient is the adjoint there, within 1e-3 of float64's implicit one
    assert not bool(eager.relax_converged)
    weights = WEIGHTS.astype(np.float32)
    solve = tt.Untangler(FACES, gradient_fallback="approximate")
    gradient = jax.jit(jax.grad(lambda x: jnp.sum(weights * solve(x).vertices)))(x32)
    assert gradient.dtype == np.float32
    implicit = np.asarray(jax.grad(_loss())(jnp.asarray(VERTICES)))
    assert np.linalg.norm(np.asarray(gradient) - implicit) < 1e-3 * np.linalg.norm(implicit)


def test_options_are_checked_before_tracing():
    with pytest.raises(ValueError, match="gradient_fallback must be one of"):
        tt.untangle(VERTICES, FACES, gradient_fallback="ignore")
    with pytest.raises(ValueError, match="faces must be an \\(F, 3\\) integer array"):
        tt.Untangler(np.zeros((4, 2), np.int32))


def test_untangler_keeps_its_sizes_and_compiles_once(eager):
    # an uncrowded process: past 30,000 memory mappings every call releases all compiled code
    # (``_memory.release_if_crowded``), and the suite gets there by this test
    jax.clear_caches()
    solver = tt.Untangler(FACES)
    step = jax.jit(lambda x: solver(x).vertices)
    np.testing.assert_array_equal(np.asarray(step(VERTICES)), np.asarray(eager.vertices))
    assert solver.sizes.phase1 is not None and solver.sizes.relax is not None
    first = solver.sizes.relax
    rng = np.random.default_rng(3)
    with CompileCount("relax") as relax, CompileCount("phase1") as phase1:
        for _ in range(3):  # other vertex arrays of the connectivity: the same executables
            moved = VERTICES + 0.02 * rng.normal(size=VERTICES.shape)
            result = solver(moved)
            assert bool(result.converged)
            np.testing.assert_array_equal(np.asarray(result.vertices), np.asarray(tt.untangle(moved, FACES).vertices))
    assert relax.count == 0 and phase1.count == 0
    assert all(now >= before for now, before in zip(solver.sizes.relax, first, strict=True))
    leaves = jax.tree_util.tree_leaves(solver)
    assert len(leaves) == 1 and leaves[0].shape == FACES.shape  # an equinox module: faces its one array

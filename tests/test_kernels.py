"""Layer 1: per-pair kernels against exact rationals, finite differences and each other."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tritri_jax as tt
from tritri_jax._kernels import classify as classify_kernel
from tritri_jax._pair_hessian import interval_jacobian
from tritri_jax._vec3 import AOS

from . import strategies
from .reference import classify, is_clear, one_side_margin

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

U = np.array([[-1.0, -1, 0], [1, -1, 0], [0, 1, 0]])
V = np.array([[0.1, 0.2, -1], [-0.2, 0.1, 1], [0.3, 2, 0.4]])


def _check_against_reference(compiled, u, v, dtype, relative):
    uu, vv = np.asarray(u, dtype), np.asarray(v, dtype)
    ref = classify(uu, vv)
    if not is_clear(ref, relative):
        return ref, None
    got = bool(compiled.intersects(jnp.asarray(uu), jnp.asarray(vv)))
    assert got == ref.crosses, (ref, uu.tolist(), vv.tolist())
    return ref, got


@SETTINGS
@given(strategies.any_pair)
def test_predicate_matches_exact_reference_float64(compiled, pair):
    u, v = pair
    ref, _ = _check_against_reference(compiled, u, v, np.float64, 1e-9)
    if ref.valid and is_clear(ref, 1e-6):
        iv = compiled.interval(jnp.asarray(u), jnp.asarray(v))
        assert bool(iv.valid)
        tol = 1e-9 * ref.extent
        np.testing.assert_allclose(float(iv.tc0), ref.tc0, rtol=1e-9, atol=tol)
        np.testing.assert_allclose(float(iv.tc1), ref.tc1, rtol=1e-9, atol=tol)
        energy = float(compiled.pair_energy(jnp.asarray(u), jnp.asarray(v)))
        expected = (ref.tc0 * ref.tc1) ** 2 if ref.crosses else 0.0
        np.testing.assert_allclose(energy, expected, rtol=1e-8, atol=1e-30)


@SETTINGS
@given(strategies.any_pair)
def test_predicate_matches_exact_reference_float32(compiled, pair):
    u, v = pair
    _check_against_reference(compiled, u, v, np.float32, 1e-4)


_certainly_apart = jax.jit(tt._kernels.certainly_apart)


@st.composite
def _separated_pair(draw):
    """A random pair moved apart along a random direction by up to twice its size."""
    u, v = draw(strategies.random_pair())
    direction = np.array(draw(st.lists(strategies.unit, min_size=3, max_size=3)))
    return u, v + draw(st.floats(0, 4)) * direction


@SETTINGS
@given(
    st.one_of(strategies.any_pair, _separated_pair(), strategies.transformed(_separated_pair())),
    st.sampled_from([np.float64, np.float32]),
)
# All found by Hypothesis in float32, where the determinant is not representable: a subnormal
# input (the CPU backend flushes it to zero, putting ``u`` on ``v``'s plane), a vertex 1.4e-45 off
# the other's vertex (``==`` on the backend calls them shared; the kernel compares bits), and a
# point 3.1e-37 off a unit triangle's plane (its determinant is below the allowance for underflow).
@example((np.zeros((3, 3)), np.array([[0.0, 0, 1], [0, 7.48e-43, 0], [1, 0, 0]])), np.float32)
@example(
    (np.array([[0.0, 0, 0], [0, 0, 0], [0, 0, 1]]), np.array([[0.0, 0, 1.4e-45], [0, 1, 0], [1, 0, 0]])), np.float32
)
@example(
    (np.array([[0.0, 3.1e-37, 0], [0, 0, 0], [0, 0, 0]]), np.array([[0.0, 0, 0], [0, 0, 0.5], [1, 0, 0]])),
    np.float32,
)
def test_certainly_apart_is_exact_and_not_vacuous(pair, dtype):
    """``True`` only when exact arithmetic agrees that one triangle is on one side of the other's
    plane (the detection pipeline drops such pairs untested), and ``True`` whenever that holds
    with a margin far beyond rounding and determinants far beyond underflow.

    Completeness is claimed for the inputs as the backend sees them (subnormals flushed to zero, as
    XLA's CPU backend does, unless that alone makes two vertices coincide) and only where every
    determinant of the deciding side exceeds 64 times the smallest normal number times its
    weights: below that the kernel's absolute allowance for underflow (8 times, in
    ``_kernels.certainly_apart``) may swallow it, which costs the pipeline an exact test, never a
    wrong answer.
    """
    u, v = (np.asarray(t, dtype) for t in pair)
    got = bool(_certainly_apart(jnp.asarray(u), jnp.asarray(v)))
    assert not got or one_side_margin(u, v) > 0, (u.tolist(), v.tolist())
    tiny = np.finfo(dtype).tiny
    seen = [np.where(np.abs(t) < tiny, 0, t) for t in (u, v)]
    margin = one_side_margin(*seen, underflow=64 * tiny)
    # Sharing is decided on the bits the user passed: a vertex that flushing alone puts on the
    # other's vertex is not shared, and the backend cannot see which side of the plane it is on.
    shared = lambda a, b: {(i, j) for i in range(3) for j in range(3) if (a[i] == b[j]).all()}  # noqa: E731
    flushed_onto = shared(*seen) != shared(u.view(np.uint8).reshape(3, -1), v.view(np.uint8).reshape(3, -1))
    if margin > (1e-12 if dtype == np.float64 else 1e-5) and not flushed_onto:
        assert got, (margin, u.tolist(), v.tolist())


def test_certainly_apart_on_shared_and_degenerate_pairs():
    apart = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    fold_away = np.array([[0.0, 0, 0], [-1, 0, 1], [0, -1, 1]])  # shares vertex 0, rest above the plane
    fold_through = np.array([[0.0, 0, 0], [1, 1, 1], [-1, -1, -1]])  # shares vertex 0, crosses the plane
    hinge = np.array([[1.0, 0, 0], [0, 1, 0], [1, 1, 0.5]])  # shares an edge
    flat_hinge = np.array([[1.0, 0, 0], [0, 1, 0], [1, 1, 0]])  # shares an edge, coplanar
    line = np.array([[5.0, 5, 5], [6, 6, 6], [7, 7, 7]])  # zero area, far away
    check = lambda a, b: bool(_certainly_apart(jnp.asarray(a), jnp.asarray(b)))  # noqa: E731
    assert check(apart, fold_away) and check(apart, hinge) and check(apart, line)
    assert not check(apart, fold_through) and not check(apart, flat_hinge) and not check(apart, apart)
    assert not check(line, line)


@pytest.mark.parametrize("kind", ["coplanar", "grid", "shared"])
def test_adversarial_families_have_no_wrong_answers(compiled, kind):
    """Exhaustive-ish families where clear cases are common: coplanar overlaps, grid points, shared vertices."""
    rng = np.random.default_rng(1)
    wrong = checked = 0
    for _ in range(300):
        if kind == "coplanar":
            u = np.concatenate([rng.integers(-3, 4, (3, 2)), np.zeros((3, 1))], axis=1).astype(float)
            v = np.concatenate([rng.integers(-3, 4, (3, 2)), np.zeros((3, 1))], axis=1).astype(float)
            rotation = np.linalg.qr(rng.normal(size=(3, 3)))[0] if rng.random() < 0.3 else np.eye(3)
            u, v = u @ rotation.T, v @ rotation.T
        elif kind == "grid":
            u, v = rng.integers(-2, 3, (2, 3, 3)).astype(float)
        else:
            u, v = rng.uniform(-1, 1, (2, 3, 3))
            v[rng.integers(3)] = u[rng.integers(3)]
        ref, got = _check_against_reference(compiled, u, v, np.float64, 1e-9)
        if got is not None:
            checked += 1
            wrong += got != ref.crosses
    assert wrong == 0
    assert checked > 50


def test_coplanar_overlap_is_reported_but_has_no_energy(compiled):
    u = jnp.array([[0.0, 0, 0], [2, 0, 0], [0, 2, 0]])
    v = jnp.array([[0.5, 0.5, 0], [3, 0.5, 0], [0.5, 3, 0]])
    assert bool(compiled.intersects(u, v))
    assert float(compiled.pair_energy(u, v)) == 0.0
    assert not bool(compiled.intersects(u, v + jnp.array([5.0, 0, 0])))
    e, g, h = compiled.exact(u, v)
    assert float(e) == 0 and np.all(np.asarray(g) == 0) and np.all(np.isfinite(np.asarray(h)))


def test_shared_vertex_fold_through_crosses_and_fold_away_does_not(compiled):
    u = jnp.array([[0.0, 0, 0], [2, -1, 0], [2, 1, 0]])
    through = jnp.array([[0.0, 0, 0], [1, 0.2, -1], [1, -0.2, 1]])
    away = jnp.array([[0.0, 0, 0], [-1, 0.2, -1], [-1, -0.2, 1]])
    assert bool(compiled.intersects(u, through))
    assert not bool(compiled.intersects(u, away))
    iv = compiled.interval(u, away)
    assert bool(iv.valid) and (float(iv.tc0) == 0.0 or float(iv.tc1) == 0.0)


def test_touching_and_identical_and_degenerate(compiled):
    u = jnp.asarray(U)
    assert bool(compiled.intersects(u, u))  # identical: coplanar overlap
    assert float(compiled.pair_energy(u, u)) == 0
    point = jnp.zeros((3, 3))
    segment = jnp.array([[0.0, 0, -1], [0, 0, 1], [0, 0, 0.5]])
    for degenerate in (point, segment):
        assert not bool(compiled.intersects(u, degenerate))
        e, g, h = compiled.exact(u, degenerate)
        assert np.all(np.isfinite(np.asarray(h))) and float(e) == 0
    # v's vertex exactly on u's interior, the rest above: touching, not crossing
    touch = jnp.array([[0.0, 0, 0], [0, 0, 1], [1, 0, 1]])
    assert not bool(compiled.intersects(u, touch))


def _all_branch_variants(u, v):
    """Cyclic reorderings and orientation flips of both triangles: every lonely-vertex branch."""
    orders = [(0, 1, 2), (1, 2, 0), (2, 0, 1), (0, 2, 1), (2, 1, 0), (1, 0, 2)]
    for a, b in itertools.product(orders, orders):
        yield u[list(a)], v[list(b)]


def test_invariances_swap_reorder_rigid_motion(compiled):
    base = float(compiled.pair_energy(jnp.asarray(U), jnp.asarray(V)))
    assert base > 0
    for u, v in _all_branch_variants(U, V):
        for a, b in ((u, v), (v, u)):
            np.testing.assert_allclose(float(compiled.pair_energy(jnp.asarray(a), jnp.asarray(b))), base, rtol=1e-12)
    rng = np.random.default_rng(0)
    rotation = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    shift = rng.normal(size=3) * 10
    moved = float(compiled.pair_energy(jnp.asarray(U @ rotation.T + shift), jnp.asarray(V @ rotation.T + shift)))
    np.testing.assert_allclose(moved, base, rtol=1e-10)
    np.testing.assert_allclose(float(compiled.pair_energy(jnp.asarray(U * 8), jnp.asarray(V * 8))), base * 8**4)


def _central_difference(f, x, h):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def test_gradients_match_finite_differences_on_every_branch(compiled):
    x0 = np.concatenate([U, V])

    def energy(x):
        return float(compiled.pair_energy(jnp.asarray(x[:3]), jnp.asarray(x[3:])))

    def length(x):
        return float(compiled.crossing_length(jnp.asarray(x[:3]), jnp.asarray(x[3:])))

    for u, v in list(_all_branch_variants(U, V))[::5] + list(_all_branch_variants(-U[:, [1, 0, 2]], V))[::7]:
        x = np.concatenate([u, v])
        _, (gu, gv) = compiled.energy_grad(jnp.asarray(u), jnp.asarray(v))
        fd = _central_difference(energy, x, 1e-6)
        np.testing.assert_allclose(np.concatenate([gu, gv]), fd, rtol=1e-6, atol=1e-6)
        lu, lv = compiled.length_grad(jnp.asarray(u), jnp.asarray(v))
        np.testing.assert_allclose(np.concatenate([lu, lv]), _central_difference(length, x, 1e-6), rtol=1e-6, atol=1e-6)
        factor = compiled.factor(jnp.asarray(u), jnp.asarray(v))
        np.testing.assert_allclose(factor.gradient, np.concatenate([gu, gv]).ravel(), rtol=1e-10, atol=1e-12)
    assert energy(x0) > 0


def test_gradient_on_shared_vertex_branch(compiled):
    """One vertex on the other plane (Appendix A's zero branch): perturb only the non-shared vertices."""
    u = np.array([[0.0, 0, 0], [2, -1, 0.1], [2, 1, -0.1]])
    v = np.array([[0.0, 0, 0], [1, 0.2, -1], [1, -0.3, 1]])
    assert bool(compiled.intersects(jnp.asarray(u), jnp.asarray(v)))
    _, (gu, gv) = compiled.energy_grad(jnp.asarray(u), jnp.asarray(v))

    def energy_free(y):
        uu, vv = u.copy(), v.copy()
        uu[1:], vv[1:] = y[:2], y[2:]
        return float(compiled.pair_energy(jnp.asarray(uu), jnp.asarray(vv)))

    fd = _central_difference(energy_free, np.concatenate([u[1:], v[1:]]), 1e-6)
    np.testing.assert_allclose(np.concatenate([gu[1:], gv[1:]]), fd, rtol=1e-6, atol=1e-7)
    assert np.all(np.isfinite(np.asarray(gu))) and np.all(np.isfinite(np.asarray(gv)))


def _autodiff_interval_jacobian(u, v):
    def ends(x):
        iv = tt.interval(x[:9].reshape(3, 3), x[9:].reshape(3, 3))
        return jnp.stack([iv.tc0, iv.tc1])

    return jax.jacrev(ends)(jnp.concatenate([u.ravel(), v.ravel()]))


_HAND = jax.jit(jax.vmap(interval_jacobian))
_AUTODIFF = jax.jit(jax.vmap(_autodiff_interval_jacobian))
_VALID_AMBIGUOUS = jax.jit(jax.vmap(lambda a, b: (tt.interval(a, b).valid, classify_kernel(a, b, AOS)[1])))


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_hand_jacobian_of_the_interval_equals_autodiff_on_every_branch(dtype):
    """The hand-derived 2 x 18 Jacobian of (tc0, tc1) against jax.jacrev: every
    lonely-vertex and end-point order of a crossing pair, end points on a vertex (shared vertices,
    a vertex on the other plane), and adversarial pairs (near-coplanar, slivers, far from the origin)."""
    shared = (np.array([[0.0, 0, 0], [2, -1, 0.1], [2, 1, -0.1]]), np.array([[0.0, 0, 0], [1, 0.2, -1], [1, -0.3, 1]]))
    on_plane = (U, np.array([[0.1, 0.2, 0.0], [-0.2, 0.1, 1], [0.3, 2, -0.4]]))
    pairs = [p for base in ((U, V), shared, on_plane) for p in _all_branch_variants(*base)]
    pairs += [(b, a) for a, b in pairs]
    u = np.concatenate([np.stack([a for a, _ in pairs]), strategies.adversarial_pairs(4000, seed=3)[:, 0]])
    v = np.concatenate([np.stack([b for _, b in pairs]), strategies.adversarial_pairs(4000, seed=3)[:, 1]])
    u, v = jnp.asarray(u, dtype), jnp.asarray(v, dtype)
    reference = np.asarray(_AUTODIFF(u, v), np.float64)
    # Where rounding could flip the verdict (near-parallel planes, end points almost meeting) the
    # Jacobian is as ill-conditioned as the verdict (|J| ~ 1e13 on near-coplanar pairs): any two
    # evaluation orders differ there. Everywhere else the two must agree to rounding.
    valid, ambiguous = (np.asarray(x) for x in _VALID_AMBIGUOUS(u, v))
    built = np.arange(len(valid)) < len(pairs)  # the crossing pairs above: every one compared
    compare = valid & (~ambiguous | built)
    assert valid[built].all() and compare.sum() > 800
    iv, jacobian = _HAND(u, v)
    jacobian = np.asarray(jacobian, np.float64)
    assert np.isfinite(jacobian).all()
    size = 1 + np.abs(reference).max(axis=(1, 2))
    error = np.where(compare, np.abs(jacobian - reference).max(axis=(1, 2)) / size, 0)
    assert error.max() < (1e-9 if dtype == jnp.float64 else 2e-3), (np.argsort(-error)[:5], np.sort(error)[-5:])
    assert np.abs(jacobian[~np.asarray(iv.valid)]).max(initial=0) == 0


def test_hand_jacobian_of_the_interval_matches_finite_differences():
    """Independent of autodiff: central differences of tc0 and tc1 on every branch of a crossing pair."""
    ends = jax.jit(lambda a, b: jnp.stack(tt.interval(a, b)[:2]))
    for u, v in list(_all_branch_variants(U, V))[::3]:
        x = np.concatenate([u, v])
        _, jacobian = _HAND(jnp.asarray(u)[None], jnp.asarray(v)[None])
        for row in range(2):
            fd = _central_difference(lambda y, r=row: float(ends(jnp.asarray(y[:3]), jnp.asarray(y[3:]))[r]), x, 1e-6)
            np.testing.assert_allclose(np.asarray(jacobian[0, row]), fd.ravel(), rtol=1e-6, atol=1e-7)


_GN_WITH_MARGIN = jax.jit(lambda a, b, m: tt.pair_energy_grad_hessian(a, b, margin=m))


@SETTINGS
@given(strategies.random_pair(), st.floats(0.0, 0.3))
@example(  # nearly coincident vertices: J's rows nearly parallel, one Gram-Schmidt pass lost orthogonality
    pair=(
        np.array([[1.0, -0.5, 0.0], [0.0, 0.0, 1.0], [0.0, 0.5, 0.0]]),
        np.array([[1.0, -0.5, 1e-12], [0.0, 0.0, 1.0], [0.5, -1.0614302613788157e-14, 0.0]]),
    ),
    margin=0.0,
)
def test_gauss_newton_equals_eq4_and_both_hessians_are_psd(compiled, pair, margin):
    u, v = (jnp.asarray(t) for t in pair)
    e, g, h = _GN_WITH_MARGIN(u, v, margin)
    factor = compiled.factor(u, v)
    _, _, h_exact = compiled.exact(u, v)
    iv = compiled.interval(u, v)
    scale = max(1.0, float(np.abs(h).max()), float(np.abs(h_exact).max()))
    assert np.linalg.eigvalsh(np.asarray(h)).min() >= -1e-10 * scale
    assert np.linalg.eigvalsh(np.asarray(h_exact)).min() >= -1e-10 * scale
    if bool(iv.valid) and float(iv.tc0) < 0 < float(iv.tc1):
        j = np.asarray(factor.jacobian)
        t0, t1 = float(iv.tc0), float(iv.tc1)
        naive = (
            2 * t1**2 * np.outer(j[0], j[0])
            + 2 * t0**2 * np.outer(j[1], j[1])
            + 4 * t0 * t1 * (np.outer(j[1], j[0]) + np.outer(j[0], j[1]))
        )
        w, q = np.linalg.eigh(naive)
        projected = (q * np.maximum(w, 0)) @ q.T
        hg = np.asarray(compiled.gauss_newton(u, v)[2])
        np.testing.assert_allclose(hg, projected, atol=1e-9 * max(1.0, np.abs(naive).max()))
        gram = np.asarray(factor.basis @ factor.basis.T)
        np.testing.assert_allclose(gram, np.diag(np.round(np.diag(gram))), atol=1e-9)  # orthonormal rows
    assert np.isfinite(float(e)) and np.all(np.isfinite(np.asarray(g)))


def test_exact_hessian_matches_jax_hessian_of_energy(compiled):
    x = jnp.asarray(np.concatenate([U.ravel(), V.ravel()]))
    naive = jax.hessian(lambda y: tt.pair_energy(y[:9].reshape(3, 3), y[9:].reshape(3, 3)))(x)
    w, q = np.linalg.eigh(0.5 * (naive + naive.T))
    projected = (q * np.maximum(w, 0)) @ q.T
    _, _, h = compiled.exact(jnp.asarray(U), jnp.asarray(V))
    np.testing.assert_allclose(h, projected, atol=1e-9 * np.abs(projected).max())


def test_margin_widens_the_interval():
    u, v = jnp.asarray(U), jnp.asarray(V) + jnp.array([0.0, 3.0, 0])  # apart along the line
    iv = tt.interval(u, v)
    assert bool(iv.valid) and not (float(iv.tc0) < 0 < float(iv.tc1))
    gap = min(abs(float(iv.tc0)), abs(float(iv.tc1)))
    assert float(tt.pair_energy(u, v)) == 0
    assert float(tt.pair_energy(u, v, margin=gap * 1.01)) > 0
    assert float(tt.pair_energy(u, v, margin=gap * 0.99)) == 0


def test_jit_equals_eager_and_vmap_equals_loop(compiled):
    pairs = strategies.adversarial_pairs(48, seed=3)
    u, v = jnp.asarray(pairs[:, 0]), jnp.asarray(pairs[:, 1])
    batched = jax.vmap(tt.pair_energy_grad_hessian)(u, v)
    for i in range(0, 48, 5):
        eager = tt.pair_energy_grad_hessian(u[i], v[i])
        jitted = compiled.gauss_newton(u[i], v[i])
        for a, b, c in zip(eager, jitted, batched, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)
            np.testing.assert_allclose(a, c[i], rtol=1e-12, atol=1e-300)


def test_float32_preserves_dtype(compiled):
    u, v = jnp.asarray(U, jnp.float32), jnp.asarray(V, jnp.float32)
    iv = compiled.interval(u, v)
    assert iv.tc0.dtype == jnp.float32
    e, g, h = compiled.gauss_newton(u, v)
    assert e.dtype == g.dtype == h.dtype == jnp.float32
    np.testing.assert_allclose(float(e), float(compiled.pair_energy(jnp.asarray(U), jnp.asarray(V))), rtol=1e-4)


def test_compiles_once_for_repeated_calls():
    f = jax.jit(tt.pair_energy)
    for s in range(4):
        f(jnp.asarray(U + s), jnp.asarray(V + s))
    assert f._cache_size() == 1


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_no_nan_anywhere_on_100k_adversarial_pairs(dtype):
    pairs = jnp.asarray(strategies.adversarial_pairs(100_000, seed=7), dtype)
    u, v = pairs[:, 0], pairs[:, 1]

    @jax.jit
    def sweep(u, v):
        def one(a, b):
            e, g = jax.value_and_grad(tt.pair_energy, argnums=(0, 1))(a, b)
            lg = jax.grad(tt.crossing_length, argnums=(0, 1))(a, b)
            f = tt.gauss_newton_factor(a, b, margin=0.01)
            iv = tt.interval(a, b)
            leaves = [e, *g, *lg, *f, iv.tc0, iv.tc1]
            return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))

        return jax.vmap(one)(u, v)

    ok = np.asarray(sweep(u, v))
    assert ok.all(), np.flatnonzero(~ok)[:10]

    @jax.jit
    def exact_sweep(u, v):
        _, _, h = jax.vmap(lambda a, b: tt.pair_energy_grad_hessian(a, b, hessian="exact"))(u, v)
        return jnp.all(jnp.isfinite(h), axis=(1, 2))

    ok = np.asarray(exact_sweep(u[::5], v[::5]))  # the 18 x 18 eigh makes this route ~50x slower
    assert ok.all(), np.flatnonzero(~ok)[:10]

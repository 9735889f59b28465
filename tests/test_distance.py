"""Layer 1: primitive distances and the log barrier of phase 2, against independent least squares."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear, nnls

from tritri_jax import _distance as dist
from tritri_jax._mesh_energy import _barrier_block, barrier_energy, barrier_hessian
from tritri_jax._vec3 import AOS, SOA

from .strategies import adversarial_pairs, any_pair, triangle

# ----------------------------------------------------------------------------- references (scipy)


def ref_segment_segment(a0, a1, b0, b1):
    """min |a0 + s ea - b0 - t eb|^2 over [0, 1]^2: bounded linear least squares."""
    matrix = np.stack([a1 - a0, -(b1 - b0)], axis=1)
    if np.allclose(matrix, 0):
        return float(np.sum((a0 - b0) ** 2))
    s, t = lsq_linear(matrix, b0 - a0, bounds=(0, 1), tol=1e-14, method="bvls").x
    return float(np.sum((a0 + s * (a1 - a0) - b0 - t * (b1 - b0)) ** 2))


def ref_simplex_distance(points_a, points_b):
    """min |A w - B z|^2 over barycentric w, z: non-negative least squares with the sums pinned by heavy rows."""
    big = 1e6 * (1 + np.abs(points_a).max() + np.abs(points_b).max())
    ka, kb = len(points_a), len(points_b)
    matrix = np.zeros((5, ka + kb))
    matrix[:3, :ka], matrix[:3, ka:] = points_a.T, -points_b.T
    matrix[3, :ka], matrix[4, ka:] = big, big
    weights, _ = nnls(matrix, np.array([0, 0, 0, big, big]), maxiter=1000)
    w, z = weights[:ka] / weights[:ka].sum(), weights[ka:] / weights[ka:].sum()
    return float(np.sum((w @ points_a - z @ points_b) ** 2))


def ref_pair_distance(u, v, same):
    """Smallest distance over the non-incident primitive pairs (point-triangle, edge-edge)."""
    shared_u, shared_v = same.any(axis=1), same.any(axis=0)
    best = np.inf
    for i in range(3):
        if not shared_v[i]:
            best = min(best, ref_simplex_distance(v[[i]], u))
        if not shared_u[i]:
            best = min(best, ref_simplex_distance(u[[i]], v))
    for i in range(3):
        for k in range(3):
            ends_u, ends_v = [i, (i + 1) % 3], [k, (k + 1) % 3]
            if not same[np.ix_(ends_u, ends_v)].any():
                best = min(best, ref_segment_segment(u[ends_u[0]], u[ends_u[1]], v[ends_v[0]], v[ends_v[1]]))
    return best


# ----------------------------------------------------------------------------- compiled once


_point_triangle = jax.jit(jax.vmap(lambda p, t: dist.point_triangle_distance_sq(AOS, p, *t)))
_segment_segment = jax.jit(jax.vmap(lambda a, b: dist.segment_segment_distance_sq(AOS, a[0], a[1], b[0], b[1])))
_pair_soa = jax.jit(jax.vmap(lambda u, v, s: dist.pair_distance_sq(u, v, s, layout=SOA)))
_pair_aos = jax.jit(jax.vmap(lambda u, v, s: dist.pair_distance_sq(u, v, s, layout=AOS)))
_barrier_value_grad = jax.jit(jax.vmap(jax.value_and_grad(dist.pair_barrier, argnums=(0, 1)), in_axes=(0, 0, 0, None)))
_barrier_hessian = jax.jit(jax.vmap(jax.hessian(dist.pair_barrier, argnums=(0, 1)), in_axes=(0, 0, 0, None)))
_blocks = jax.jit(jax.vmap(_barrier_block, in_axes=(0, 0, 0, None)))

NO_SHARE = np.zeros((3, 3), bool)


def _same(u, v):
    return np.all(u[:, None, :] == v[None, :, :], axis=-1)


# ----------------------------------------------------------------------------- distances


@settings(max_examples=60, deadline=None)
@given(triangle(), st.lists(st.floats(-2, 2), min_size=3, max_size=3).map(np.array))
def test_point_triangle_distance_matches_least_squares(t, p):
    got = float(_point_triangle(p[None], t[None])[0])
    expected = ref_simplex_distance(p[None], t)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-10)


@settings(max_examples=60, deadline=None)
@given(triangle(), triangle())
def test_segment_segment_distance_matches_least_squares(a, b):
    got = float(_segment_segment(a[None, :2], b[None, :2])[0])
    assert got == pytest.approx(ref_segment_segment(a[0], a[1], b[0], b[1]), rel=1e-6, abs=1e-10)


def test_distances_on_degenerate_and_parallel_primitives():
    a0, a1 = np.zeros(3), np.array([1.0, 0, 0])
    cases = [
        (a0, a1, np.array([0.0, 1, 0]), np.array([1.0, 1, 0]), 1.0),  # parallel, overlapping in x
        (a0, a1, np.array([2.0, 1, 0]), np.array([3.0, 1, 0]), 2.0),  # parallel, apart in x
        (a0, a0, np.array([0.0, 2, 0]), np.array([0.0, 2, 0]), 4.0),  # two points
        (a0, a1, np.array([0.5, -1, 1]), np.array([0.5, 1, 1]), 1.0),  # skew, crossing above
        (a0, a1, np.array([0.5, -1, 0]), np.array([0.5, 1, 0]), 0.0),  # crossing
    ]
    got = _segment_segment(jnp.asarray([[c[0], c[1]] for c in cases]), jnp.asarray([[c[2], c[3]] for c in cases]))
    np.testing.assert_allclose(np.asarray(got), [c[4] for c in cases], atol=1e-15)
    flat = np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0]])  # zero-area triangle: distance to its segments
    got = _point_triangle(jnp.asarray([[1.0, 1, 0], [3.0, 0, 0]]), jnp.asarray([flat, flat]))
    np.testing.assert_allclose(np.asarray(got), [1.0, 1.0], atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(any_pair, st.integers(0, 2), st.integers(0, 2), st.booleans())
def test_pair_distance_matches_reference_and_both_layouts_agree(pair, i, j, share):
    u, v = (np.array(t, np.float64) for t in pair)
    if share:
        v[j] = u[i]
    same = _same(u, v)
    expected = ref_pair_distance(u, v, same)
    soa = float(_pair_soa(u[None], v[None], same[None])[0])
    aos = float(_pair_aos(u[None], v[None], same[None])[0])
    scale = max(1.0, np.abs(np.concatenate([u, v])).max()) ** 2
    assert soa == pytest.approx(aos, rel=1e-12, abs=1e-14 * scale)
    if np.isfinite(expected):
        assert soa == pytest.approx(expected, rel=1e-5, abs=1e-9 * scale)
    else:
        assert soa == np.inf


def test_incident_primitives_are_left_out():
    u = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    v = np.array([[0.0, 0, 0], [1, 0, 1], [0, 1, 1]])  # shares vertex 0, rises above u
    same = _same(u, v)
    d = float(_pair_soa(u[None], v[None], same[None])[0])
    assert d > 0.1  # the shared vertex (distance 0) does not count
    assert d == pytest.approx(ref_pair_distance(u, v, same), rel=1e-9)
    w = np.array([[0.0, 0, 0], [1, 0, 0], [0, -1, 0]])  # shares an edge with u
    # shares an edge: what remains is u's far edge against w's vertex on it (0.5), not the shared edge (0)
    assert float(_pair_soa(u[None], w[None], _same(u, w)[None])[0]) == pytest.approx(0.5)
    assert float(_pair_soa(u[None], u[None], _same(u, u)[None])[0]) == np.inf  # the same face: nothing counts


# ----------------------------------------------------------------------------- the barrier


def test_barrier_is_c2_at_the_reach_and_decreasing():
    b = dist.barrier
    d1, d2 = jax.grad(b), jax.grad(jax.grad(b))
    for f in (b, d1, d2):
        assert abs(float(f(1.0 - 1e-7)) - float(f(1.0 + 1e-7))) < 1e-5
    assert float(b(1.0)) == float(d1(1.0)) == float(d2(1.0)) == 0.0
    r = jnp.linspace(1e-6, 1.0, 1000)
    assert np.all(np.diff(np.asarray(jax.vmap(b)(r))) <= 0)
    assert np.all(np.isfinite(np.asarray([b(0.0), d1(0.0), d2(0.0)])))


def test_barrier_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    u = rng.uniform(-1, 1, (3, 3))
    v = u + np.array([0.1, 0.05, 0.2]) + rng.normal(0, 0.02, (3, 3))  # close, not touching
    dhat_sq = 0.5**2
    _, (gu, gv) = _barrier_value_grad(u[None], v[None], NO_SHARE[None], dhat_sq)
    for _ in range(3):
        du, dv = rng.normal(size=(2, 3, 3))
        eps = 1e-6

        def at(s, du=du, dv=dv):
            return float(_barrier_value_grad((u + s * du)[None], (v + s * dv)[None], NO_SHARE[None], dhat_sq)[0][0])

        fd = (at(eps) - at(-eps)) / (2 * eps)
        assert float(np.sum(gu[0] * du) + np.sum(gv[0] * dv)) == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_barrier_derivatives_are_finite_on_awkward_pairs():
    pairs = adversarial_pairs(240, seed=5)
    u, v = jnp.asarray(pairs[:, 0]), jnp.asarray(pairs[:, 1])
    same = jnp.asarray(np.all(pairs[:, 0, :, None] == pairs[:, 1, None, :], axis=-1))
    for dhat_sq in (1e-2, 4.0):
        values, grads = _barrier_value_grad(u, v, same, dhat_sq)
        hessians = _barrier_hessian(u, v, same, dhat_sq)
        blocks = _blocks(u, v, same, dhat_sq)
        for array in (values, *grads, *jax.tree_util.tree_leaves(hessians), blocks):
            assert np.all(np.isfinite(np.asarray(array)))
    eigenvalues = np.linalg.eigvalsh(np.asarray(blocks))
    assert np.all(eigenvalues >= -1e-8 * np.maximum(1, np.abs(eigenvalues).max(axis=1, keepdims=True)))


def test_mesh_barrier_hessian_blocks_assemble_to_the_dense_hessian():
    # a strip of triangles over a parallel one, dhat large enough that every listed pair counts
    rng = np.random.default_rng(4)
    grid = np.array([[i, j, 0.0] for i in range(3) for j in range(2)])
    vertices = jnp.asarray(np.concatenate([grid, grid + [0.1, 0.2, 0.3]]) + 0.02 * rng.normal(size=(12, 3)))
    strip = np.array([[0, 2, 1], [1, 2, 3], [2, 4, 3], [3, 4, 5]])
    faces = jnp.asarray(np.concatenate([strip, strip + 6]), jnp.int32)
    pairs = jnp.asarray([[0, 4], [0, 2], [1, 5], [2, 6], [3, 7], [-1, -1]], jnp.int32)  # [0, 2] share a vertex
    count, dhat = 3, 1.0
    # the energy in chunks of 2 rows: a live chunk, a partly live one, and one past the count, whose
    # (valid) pairs must not count
    dense = jax.jit(jax.hessian(lambda x: barrier_energy(x, faces, pairs, count, dhat, chunk=2)))(vertices)
    dense = np.asarray(dense).reshape(36, 36)
    blocks = barrier_hessian(vertices, faces, pairs, count, dhat)
    rows = (3 * np.asarray(blocks.corners)[:, :, None] + np.arange(3)).reshape(-1, 18)
    assembled = np.zeros((36, 36))
    np.add.at(assembled, (rows[:, :, None], rows[:, None, :]), np.asarray(blocks.blocks))
    assert np.abs(dense).max() > 0 and np.all(np.isfinite(dense))
    np.testing.assert_allclose(assembled, dense, rtol=1e-8, atol=1e-10 * np.abs(dense).max())
    fewer = np.asarray(barrier_hessian(vertices, faces, pairs, 2, dhat).blocks)  # only the live rows are filled
    np.testing.assert_allclose(fewer[:2], np.asarray(blocks.blocks)[:2])
    assert np.all(fewer[2:] == 0)
    assert np.abs(np.asarray(blocks.blocks)[2]).max() > 0  # the third pair is close: the count matters
    assert float(barrier_energy(vertices, faces, jnp.zeros((0, 2), jnp.int32), 0, dhat)) == 0  # no pairs

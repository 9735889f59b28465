"""Layer 1: primitive distances and the log barrier of phase 2, against independent least squares."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear, nnls

from tritri_jax import _distance as dist
from tritri_jax._barrier import (
    _primitive_gauss_newton,
    _primitive_hessian,
    barrier_blocks,
    barrier_energy,
)
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


def _primitive_blocks(block):
    """``block`` of all 15 primitive pairs of each pair, placed in 18 x 18 blocks and summed over the
    counted ones: ``(P, 18, 18)``."""
    kinds = [(False, slice(0, dist.NUM_POINT_TRIANGLE)), (True, slice(dist.NUM_POINT_TRIANGLE, None))]
    dofs = (3 * dist.PRIMITIVE_CORNERS[:, :, None] + np.arange(3)).reshape(15, 12)

    def one(u, v, same, dhat_sq):
        corners = jnp.concatenate([u, v])[dist.PRIMITIVE_CORNERS]
        values = jnp.concatenate([jax.vmap(lambda p, e=e: block(p, dhat_sq, e))(corners[k]) for e, k in kinds])
        _, counted, _ = dist.primitive_distances_sq(u, v, same)
        values = jnp.where(counted[:, None, None], values, 0)
        return jnp.zeros((18, 18), u.dtype).at[dofs[:, :, None], dofs[:, None, :]].add(values)

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None)))


_primitive_hessians = _primitive_blocks(_primitive_hessian)
_blocks = _primitive_blocks(_primitive_gauss_newton)


def pair_gauss_newton_reference(u, v, same, dhat_sq):
    """The barrier's Gauss-Newton block of a pair, from the Jacobian of all 15 distance ratios at once:
    $\\sum_k m_k (b''(r_k) + b'(r_k) / 2 r_k)^+ \\nabla r_k \\nabla r_k^T$ over the counted pairs."""

    def ratios(x):
        d, counted, molli = dist.primitive_distances_sq(x[:9].reshape(3, 3), x[9:].reshape(3, 3), same)
        return d / dhat_sq, (d / dhat_sq, counted, molli)

    jacobian, (r, counted, molli) = jax.jacfwd(ratios, has_aux=True)(jnp.concatenate([u.reshape(-1), v.reshape(-1)]))
    slope = jax.vmap(jax.grad(dist.barrier))(r)
    curvature = jax.vmap(jax.grad(jax.grad(dist.barrier)))(r) + slope / (2 * jnp.where(r > 0, r, 1))
    weight = jnp.where(counted & (r > 0), molli * jnp.maximum(curvature, 0.0), 0.0)
    return jnp.einsum("kn,k,km->nm", jacobian, weight, jacobian)


_gauss_newton_reference = jax.jit(jax.vmap(pair_gauss_newton_reference, in_axes=(0, 0, 0, None)))

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
        by_primitive = _primitive_hessians(u, v, same, dhat_sq)
        blocks = _blocks(u, v, same, dhat_sq)
        for array in (values, *grads, *jax.tree_util.tree_leaves(hessians), by_primitive, blocks):
            assert np.all(np.isfinite(np.asarray(array)))
        # the pair's Hessian is the sum of its primitive pairs' (what barrier_blocks evaluates)
        dense = np.block([[np.asarray(hessians[a][b]).reshape(-1, 9, 9) for b in range(2)] for a in range(2)])
        scale = np.abs(dense).max(axis=(1, 2), keepdims=True)
        assert np.all(np.abs(np.asarray(by_primitive) - dense) <= 1e-9 * np.maximum(scale, 1e-300))
        reference = np.asarray(_gauss_newton_reference(u, v, same, dhat_sq))
        assert np.all(np.abs(np.asarray(blocks) - reference) <= 1e-9 * np.maximum(np.abs(reference).max(), 1e-300))
    eigenvalues = np.linalg.eigvalsh(np.asarray(blocks))
    assert np.all(eigenvalues >= -1e-8 * np.maximum(1, np.abs(eigenvalues).max(axis=1, keepdims=True)))


def _two_strips(seed):
    """A strip of four triangles over a parallel copy, both jittered: 12 vertices, 8 faces."""
    rng = np.random.default_rng(seed)
    grid = np.array([[i, j, 0.0] for i in range(3) for j in range(2)])
    vertices = jnp.asarray(np.concatenate([grid, grid + [0.1, 0.2, 0.3]]) + 0.02 * rng.normal(size=(12, 3)))
    strip = np.array([[0, 2, 1], [1, 2, 3], [2, 4, 3], [3, 4, 5]])
    return vertices, jnp.asarray(np.concatenate([strip, strip + 6]), jnp.int32)


@pytest.mark.parametrize("rows", [6, 64])
def test_mesh_barrier_hessian_blocks_assemble_to_the_dense_hessian(rows):
    # a strip of triangles over a parallel one, dhat large enough that most primitive pairs count;
    # faces 0 and 1 share an edge, as do 4 and 5, so pairs [0, 4] and [1, 5] hold the same edge-edge
    # pair. In a 6-row buffer more primitive pairs are within dhat than rows: each is evaluated in
    # its own face pair; in a 64-row one duplicates are evaluated once
    vertices, faces = _two_strips(seed=4)
    listed = [[0, 4], [0, 2], [1, 5], [2, 6], [3, 7]]  # [0, 2] share a vertex
    pairs = jnp.asarray(listed + [[-1, -1]] * (rows - len(listed)), jnp.int32)
    dhat = 1.0
    u, v = vertices[faces[pairs[:3, 0]]], vertices[faces[pairs[:3, 1]]]
    same = jnp.asarray(np.asarray(faces[pairs[:3, 0]])[:, :, None] == np.asarray(faces[pairs[:3, 1]])[:, None, :])
    distances, counted, _ = jax.vmap(dist.primitive_distances_sq)(u, v, same)
    assert 6 < int(np.sum(np.asarray(counted & (distances < dhat**2))[:, 6:])) <= 64  # edge-edge pairs within dhat
    own = np.asarray(_primitive_hessians(u, v, same, dhat**2))  # each pair's own Hessian
    for count in (2, 3):
        # the energy in chunks of 2 rows: a live chunk, a partly live one, and ones past the count,
        # whose (valid) pairs must not count
        dense = np.asarray(_dense_barrier_hessian(vertices, faces, pairs[:6], count, dhat)).reshape(36, 36)
        assert np.abs(dense).max() > 0 and np.all(np.isfinite(dense))
        gauss_newton = _gauss_newton_reference(u[:count], v[:count], same[:count], dhat**2)
        exact, approximate = _mesh_blocks(vertices, faces, pairs, count, dhat)
        for blocks, expected in ((exact, dense), (approximate, _assemble(faces, pairs[:count], gauss_newton))):
            assembled = _assemble(faces, pairs, blocks.blocks)
            np.testing.assert_allclose(assembled, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max())
            assert np.all(np.asarray(blocks.blocks)[count:] == 0)  # only the live rows are filled
    exact = np.asarray(_mesh_blocks(vertices, faces, pairs, 3, dhat)[0].blocks)[:3]
    if rows == 6:
        np.testing.assert_allclose(exact, own, rtol=1e-12, atol=1e-12 * np.abs(own).max())
    else:  # the shared edge-edge pair sits, twice, in one of its face pairs' blocks
        assert np.abs(exact - own).max() > 1e-3 * np.abs(own).max()
    assert float(barrier_energy(vertices, faces, jnp.zeros((0, 2), jnp.int32), 0, dhat)) == 0  # no pairs


@pytest.mark.parametrize("per_face", [False, True])
def test_mesh_barrier_gradient_equals_plain_autodiff_of_its_live_pairs(per_face):
    # barrier_energy's first derivatives are its own (a custom JVP); against reverse mode through the
    # plain sum of the live pairs' barriers, in the vertices and in dhat (a scalar, or a reach per face
    # whose pairs take the geometric mean). Derivatives through the custom rule are checked by the
    # dense Hessian below and by untangle's implicit gradient
    vertices, faces = _two_strips(seed=6)
    pairs = jnp.asarray([[0, 4], [0, 2], [1, 5], [2, 6], [3, 7], [-1, -1]], jnp.int32)
    count = 3
    dhat = jnp.linspace(0.6, 1.0, len(faces)) if per_face else jnp.asarray(0.8)

    def plain(x, dhat):
        u, v = x[faces[pairs[:count, 0]]], x[faces[pairs[:count, 1]]]
        same = faces[pairs[:count, 0]][:, :, None] == faces[pairs[:count, 1]][:, None, :]
        reach = jnp.sqrt(dhat[pairs[:count, 0]] * dhat[pairs[:count, 1]]) if per_face else jnp.full(count, dhat)
        return jnp.sum(jax.vmap(dist.pair_barrier)(u, v, same, reach**2))

    def ours(x, dhat):
        return barrier_energy(x, faces, pairs, count, dhat, chunk=2)

    expected, got = (jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(vertices, dhat) for f in (plain, ours))
    assert float(expected[0]) > 0
    for want, have in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got), strict=True):
        scale = np.abs(want).max()
        np.testing.assert_allclose(np.asarray(have), np.asarray(want), rtol=1e-10, atol=1e-12 * scale)
    if per_face:  # the Hessian blocks with a reach per face: their sum is the dense Hessian
        dense = np.asarray(_dense_barrier_hessian(vertices, faces, pairs, count, dhat)).reshape(36, 36)
        assert np.abs(dense).max() > 0
        exact = _mesh_blocks(vertices, faces, pairs, count, dhat)[0]
        assembled = _assemble(faces, pairs, exact.blocks)
        np.testing.assert_allclose(assembled, dense, rtol=1e-8, atol=1e-10 * np.abs(dense).max())


# the count is traced: one compile per buffer size (the dense reference always gets 6 rows)
_dense_barrier_hessian = jax.jit(
    jax.hessian(lambda x, faces, pairs, count, dhat: barrier_energy(x, faces, pairs, count, dhat, chunk=2))
)
# (vertices, faces, pairs, count, dhat) -> (the exact blocks, the Gauss-Newton ones)
_mesh_blocks = jax.jit(lambda *args: (barrier_blocks(*args, exact=True), barrier_blocks(*args, exact=False)))


def _assemble(faces, pairs, blocks):
    """Per-pair 18 x 18 blocks summed into the mesh's dense 36 x 36 matrix."""
    rows = (3 * np.asarray(faces)[np.maximum(np.asarray(pairs), 0)].reshape(-1, 6)[:, :, None] + np.arange(3)).reshape(
        -1, 18
    )
    assembled = np.zeros((36, 36))
    np.add.at(assembled, (rows[:, :, None], rows[:, None, :]), np.asarray(blocks))
    return assembled

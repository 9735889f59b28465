"""Layer 4: the elastic energy's operators for phase 2: the assembled block Hessian against the
matrix-free Gauss-Newton operator and against the exact Hessian (a JVP of the gradient)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import tritri_jax as tt
from tritri_jax._elastic import (
    elastic_energy,
    elastic_gauss_newton,
    elastic_hessian,
    elastic_pattern,
    rest_shape,
    stiffness_matrix,
    unique_edges,
)


@pytest.fixture(scope="module")
def deformed():
    """Two spheres, every vertex moved (edges stretched and compressed), one edge collapsed to zero
    length, and a vertex in no face (its rows hold only the pull)."""
    vertices, faces = tt.scenes.two_spheres(6)
    vertices = np.vstack([vertices, [[5.0, 5.0, 5.0]]])
    edges = unique_edges(faces)
    rng = np.random.default_rng(0)
    x = vertices + 0.05 * rng.normal(size=vertices.shape)
    x[edges[0, 0]] = x[edges[0, 1]]
    return vertices, x, edges, rng.normal(size=vertices.shape)


@pytest.mark.parametrize("dtype, rtol", [(jnp.float64, 1e-12), (jnp.float32, 1e-4)])
@pytest.mark.parametrize("bending, pull", [(1.0, 1e-2), (0.3, 0.5)])
def test_assembled_hessian_equals_the_matrix_free_operators(deformed, dtype, rtol, bending, pull):
    vertices, moved, edges, direction = deformed
    theta, x, v = (jnp.asarray(a, dtype) for a in (vertices, moved, direction))
    rest = rest_shape(theta, edges)
    pattern = elastic_pattern(edges, theta.shape[0], dtype)
    assembled = jax.jit(
        lambda x, v, exact: elastic_hessian(x, rest, pattern, bending=bending, pull=pull, exact=exact)(v)
    )
    gauss_newton = elastic_gauss_newton(x, rest, bending=bending, pull=pull)(v)
    exact = jax.jvp(jax.grad(lambda y: elastic_energy(y, rest, bending=bending, pull=pull)), (x,), (v,))[1]
    for got, expected in ((assembled(x, v, False), gauss_newton), (assembled(x, v, True), exact)):
        assert got.dtype == dtype and bool(jnp.all(jnp.isfinite(got)))
        scale = float(jnp.max(jnp.abs(expected)))
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=rtol * scale)
    assert float(jnp.max(jnp.abs(gauss_newton - exact))) > 1e-3 * float(jnp.max(jnp.abs(exact)))  # they differ


def test_wide_patterns_take_the_gathered_product(deformed, monkeypatch):
    """Patterns wider than ``UNROLLED_SLOTS`` (a vertex of high degree) are multiplied by one gather
    instead of slot by slot: the same operator."""
    vertices, moved, edges, direction = deformed
    rest = rest_shape(jnp.asarray(vertices), edges)
    pattern = elastic_pattern(edges, len(vertices))
    x, v = jnp.asarray(moved), jnp.asarray(direction)
    by_slot = elastic_hessian(x, rest, pattern, exact=True)(v)
    monkeypatch.setattr("tritri_jax._elastic.UNROLLED_SLOTS", 0)
    gathered = elastic_hessian(x, rest, pattern, exact=True)(v)
    np.testing.assert_allclose(np.asarray(by_slot), np.asarray(gathered), rtol=1e-12, atol=1e-12)


def entry_rows(pattern):
    num_vertices, width = pattern.cols.shape
    return np.concatenate([np.repeat(np.arange(num_vertices), width), np.asarray(pattern.extra_rows)])


@pytest.mark.parametrize("mesh", ["two_spheres", "sphere_with_poles"])
def test_pattern_rows_hold_the_two_ring(deformed, mesh):
    """Every row holds its two-ring (each vertex once) and its own entry; edges find both of theirs.
    A UV sphere's poles (valence 64) overflow the slots of the other rows."""
    if mesh == "two_spheres":
        vertices, _, edges, _ = deformed
    else:
        vertices, faces = tt.scenes.sphere(32)
        edges = unique_edges(faces)
    pattern = elastic_pattern(edges, len(vertices))
    assert (pattern.extra_rows.shape[0] > 0) == (mesh == "sphere_with_poles")
    cols, rows = np.asarray(pattern.entry_cols()), entry_rows(pattern)
    assert np.all(cols[np.asarray(pattern.diagonal)] == np.arange(len(vertices)))
    assert np.all(rows[np.asarray(pattern.diagonal)] == np.arange(len(vertices)))
    slots = np.asarray(pattern.edge_slots)
    assert np.all((rows[slots[:, 0]] == edges[:, 0]) & (cols[slots[:, 0]] == edges[:, 1]))
    assert np.all((rows[slots[:, 1]] == edges[:, 1]) & (cols[slots[:, 1]] == edges[:, 0]))
    lap = sp.csr_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(len(vertices),) * 2)
    ring = ((lap + lap.T + sp.identity(len(vertices))) @ (lap + lap.T + sp.identity(len(vertices)))).tocoo()
    values = np.asarray(pattern.laplacian_sq)
    live = (values != 0) | (cols != rows)  # padding entries: a row's own column, or row 0 column 0, zero
    live[np.asarray(pattern.diagonal)] = True
    assert sorted(zip(rows[live], cols[live], strict=True)) == sorted(zip(ring.row, ring.col, strict=True))


def test_an_overflowing_pattern_gives_the_same_hessian():
    """The elastic Hessian on a UV sphere's pattern with and without the overflow (all slots)."""
    vertices, faces = tt.scenes.sphere(32)
    edges = unique_edges(faces)
    rng = np.random.default_rng(1)
    theta = jnp.asarray(vertices)
    x, v = jnp.asarray(vertices + 0.03 * rng.normal(size=vertices.shape)), jnp.asarray(rng.normal(size=vertices.shape))
    rest = rest_shape(theta, edges)
    split = elastic_pattern(edges, len(vertices))
    whole = elastic_pattern(edges, len(vertices), width=lambda k: 200)
    assert split.cols.shape[1] < 40 and split.extra_rows.shape[0] > 0 and whole.extra_rows.shape[0] == 0
    for exact in (False, True):
        got = elastic_hessian(x, rest, split, exact=exact)(v)
        expected = elastic_hessian(x, rest, whole, exact=exact)(v)
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-12, atol=1e-9)


def test_pattern_past_int32_keys():
    """Past 46,341 vertices a row-major key ``i * n + j`` leaves int32: a triangle and a fan at the
    end of 60,000 vertices (the rest in no edge) must find their entries, and $L^2$'s with them."""
    n = 60_000
    tip = n - 5
    edges = np.array([[n - 3, n - 2], [n - 2, n - 1], [n - 3, n - 1], [tip, n - 1], [tip, n - 4]], np.int32)
    pattern = elastic_pattern(edges, n)
    cols, rows, values = np.asarray(pattern.entry_cols()), entry_rows(pattern), np.asarray(pattern.laplacian_sq)
    slots = np.asarray(pattern.edge_slots)
    assert np.all((rows[slots[:, 0]] == edges[:, 0]) & (cols[slots[:, 0]] == edges[:, 1]))
    lap = np.zeros((6, 6))  # the Laplacian on the last six vertices, by hand
    for i, j in edges - (n - 6):
        lap[[i, j], [j, i]] -= 1
        lap[[i, j], [i, j]] += 1
    got = np.zeros((6, 6))
    tail = rows >= n - 6
    np.add.at(got, (rows[tail] - (n - 6), cols[tail] - (n - 6)), values[tail])
    np.testing.assert_allclose(got, lap @ lap)
    assert np.all(values[~tail] == 0)


@pytest.mark.parametrize("bending, pull", [(1.0, 1e-2), (0.3, 0.5)])
def test_stiffness_matrix_is_the_rest_hessian_averaged_over_directions(bending, pull):
    """At the rest shape the Gauss-Newton Hessian's 3 x 3 block of each vertex pair, averaged over
    directions (a third of its trace), is the preconditioner's matrix: on a sphere stretched to edge
    lengths spanning a factor of over 20, so a uniform spring weight would not pass."""
    vertices, faces = tt.scenes.two_spheres(6)
    rest = vertices * np.array([1.0, 0.01, 2.5])
    edges = unique_edges(faces)
    lengths = np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1)
    assert lengths.max() > 20 * lengths.min()
    theta = jnp.asarray(rest)
    operator = elastic_gauss_newton(theta, rest_shape(theta, edges), bending=bending, pull=pull)
    n = len(rest)
    dense = jax.vmap(lambda e: operator(e.reshape(n, 3)).reshape(-1))(jnp.eye(3 * n))  # symmetric
    averaged = np.trace(np.asarray(dense).reshape(n, 3, n, 3), axis1=1, axis2=3) / 3
    expected = stiffness_matrix(rest, edges, bending=bending, pull=pull).toarray()
    np.testing.assert_allclose(averaged, expected, atol=1e-10 * np.abs(expected).max())

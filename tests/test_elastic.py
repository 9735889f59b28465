"""Layer 4: the elastic energy's operators for phase 2: the assembled block Hessian against the
matrix-free Gauss-Newton operator and against the exact Hessian (a JVP of the gradient)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tritri_jax as tt
from tritri_jax._elastic import (
    elastic_energy,
    elastic_gauss_newton,
    elastic_hessian,
    elastic_pattern,
    rest_shape,
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


def test_pattern_rows_hold_the_two_ring(deformed):
    vertices, _, edges, _ = deformed
    pattern = elastic_pattern(edges, len(vertices))
    cols = np.asarray(pattern.cols)
    assert np.all(cols[np.arange(len(vertices)), np.asarray(pattern.diagonal)] == np.arange(len(vertices)))
    slots = np.asarray(pattern.edge_slots)
    assert np.all(cols[edges[:, 0], slots[:, 0]] == edges[:, 1])
    assert np.all(cols[edges[:, 1], slots[:, 1]] == edges[:, 0])

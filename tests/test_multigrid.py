"""Layer 4: the multigrid preconditioner of phase 2: sparse products against scipy, symmetry and
positivity of the V-cycle, and what it buys preconditioned CG on the elastic stiffness matrix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import tritri_jax as tt
from tritri_jax._elastic import stiffness_matrix, unique_edges
from tritri_jax._multigrid import UNROLLED_SLOTS, ell, multigrid, v_cycle
from tritri_jax._newton import conjugate_gradient


@pytest.fixture(scope="module")
def stiffness():
    vertices, faces = tt.scenes.crumpled_sheet(16)
    return stiffness_matrix(vertices, unique_edges(faces))


@pytest.mark.parametrize("kind", ["narrow", "wide", "outlier"])
def test_ell_product_equals_scipy(kind):
    """Narrow matrices are multiplied slot by slot, wide ones (past ``UNROLLED_SLOTS``) by one gather;
    a row far fuller than the rest (a UV sphere's pole) keeps its surplus apart (``Ell.extra``)."""
    rng = np.random.default_rng(0)
    matrix = sp.random(50, 40, density=0.1, random_state=rng, format="lil")
    matrix[7] = 0  # an empty row
    if kind == "wide":
        for row in range(10):
            matrix[row] = rng.normal(size=40)
    if kind == "outlier":
        matrix[3] = rng.normal(size=40)
    matrix = matrix.tocsr()
    product = ell(matrix, jnp.float64)
    assert (product.cols.shape[1] > UNROLLED_SLOTS) == (kind == "wide")
    assert bool(product.extra) == (kind == "outlier")
    x = rng.normal(size=(40, 3))
    np.testing.assert_allclose(np.asarray(product(jnp.asarray(x))), matrix @ x, atol=1e-12)
    np.testing.assert_allclose(np.asarray(product(jnp.asarray(x[:, 0]))), matrix @ x[:, 0], atol=1e-12)


def test_a_uv_sphere_hierarchy_keeps_its_rows_narrow():
    """The rows within two rings of a UV sphere's poles (7 % of them here, 2 % at 20k faces) are 4-7x
    wider than the rest: the finest operator keeps the slots of the other rows and overflows theirs
    (with slots for all but 1 % of the rows, a V-cycle at 20k faces cost 30 ms instead of 2.6)."""
    vertices, faces = tt.scenes.sphere(32)
    matrix = stiffness_matrix(vertices, unique_edges(faces))
    finest = multigrid(matrix).operators[0]
    assert finest.cols.shape[1] < 24 and finest.extra, finest.cols.shape
    x = np.random.default_rng(3).normal(size=(matrix.shape[0], 3))
    expected = matrix @ x
    got = np.asarray(finest(jnp.asarray(x)))
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10 * abs(expected).max())


def test_v_cycle_is_symmetric_positive_definite(stiffness):
    hierarchy = multigrid(stiffness)
    assert len(hierarchy.operators) >= 1  # a real hierarchy, not only the coarse solve
    rng = np.random.default_rng(1)
    u, w = (jnp.asarray(rng.normal(size=(stiffness.shape[0], 3))) for _ in range(2))
    apply = jax.jit(lambda r: v_cycle(hierarchy, r))
    assert float(jnp.sum(u * apply(w))) == pytest.approx(float(jnp.sum(w * apply(u))), rel=1e-10)
    assert float(jnp.sum(u * apply(u))) > 0 and float(jnp.sum(w * apply(w))) > 0


def test_preconditioned_cg_on_the_stiffness_matrix(stiffness):
    hierarchy = multigrid(stiffness)
    product = ell(stiffness, jnp.float64)
    b = jnp.asarray(np.random.default_rng(2).normal(size=(stiffness.shape[0], 3)))
    solve = jax.jit(
        lambda b, pc: conjugate_gradient(
            product, b, maxiter=2000, rtol=1e-8, precondition=(lambda r: v_cycle(hierarchy, r)) if pc else None
        ),
        static_argnums=1,
    )
    (x_pc, k_pc), (x_plain, k_plain) = solve(b, True), solve(b, False)
    expected = spla.spsolve(stiffness.tocsc(), np.asarray(b))
    np.testing.assert_allclose(np.asarray(x_pc), expected, rtol=1e-5, atol=1e-7 * np.abs(expected).max())
    np.testing.assert_allclose(np.asarray(x_plain), expected, rtol=1e-5, atol=1e-7 * np.abs(expected).max())
    assert int(k_pc) * 3 < int(k_plain), (int(k_pc), int(k_plain))  # measured 60 against 227


def test_a_soup_of_separate_triangles_gets_a_working_preconditioner():
    """Thousands of one-triangle pieces leave pyamg a coarse level of empty aggregates (a 1 x 1 zero
    matrix here): the coarse solve is a pseudo-inverse and zero rows are left out of the smoothing,
    so the V-cycle stays finite and CG with it still solves the system."""
    vertices, faces = tt.scenes.twisted_torus(22)
    corners = vertices[faces]
    corners = corners + 1e-9 * (corners.mean(1, keepdims=True) - corners)  # no two vertices coincide
    soup = corners.reshape(-1, 3)
    soup = (soup - soup.mean(0)) / np.linalg.norm(soup.max(0) - soup.min(0))
    matrix = sp.csr_matrix(stiffness_matrix(soup, unique_edges(np.arange(len(soup)).reshape(-1, 3))))
    hierarchy = multigrid(matrix)
    b = jnp.asarray(np.random.default_rng(3).normal(size=(matrix.shape[0], 3)))
    x, _ = jax.jit(
        lambda b: conjugate_gradient(
            ell(matrix, jnp.float64), b, maxiter=500, rtol=1e-8, precondition=lambda r: v_cycle(hierarchy, r)
        )
    )(b)
    assert np.all(np.isfinite(np.asarray(x)))
    np.testing.assert_allclose(matrix @ np.asarray(x), np.asarray(b), atol=1e-6 * float(jnp.abs(b).max()))

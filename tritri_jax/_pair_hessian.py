"""Layer 1: derivatives of one pair's energy beyond the gradient: the factored, PSD-projected
Gauss-Newton Hessian of Eq. (4) (``gauss_newton_factor``, what the solvers use) and the dense
18 x 18 routes (``pair_energy_grad_hessian``: Gauss-Newton or the exact Hessian clamped to PSD).
All go through the Jacobian of Möller's interval ends ``(tc0, tc1)`` from ``_kernels.interval``."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._kernels import interval
from ._safe import safe_divide
from ._types import Array, Float, Triangle


class GaussNewtonFactor(NamedTuple):
    """Factored, PSD-projected Gauss-Newton Hessian of one pair (Eq. 4).

    The projected Hessian is ``basis.T @ core @ basis`` (18 x 18, rank <= 2): ``basis`` holds two
    orthonormal rows spanning the rows of ``jacobian`` and ``core`` is the 2 x 2 PSD projection of
    $R^T K R$ where ``jacobian = R @ basis``. Storing ``basis`` and ``core`` takes 39 numbers instead
    of 324, and a Hessian-vector product costs two 18-vector dot products.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> f = tt.gauss_newton_factor(u, v)
    >>> x = jnp.ones(18)  # a direction over (u0, u1, u2, v0, v1, v2)
    >>> hx = f.basis.T @ (f.core @ (f.basis @ x))  # the projected Hessian times x, no 18 x 18 matrix
    >>> f.basis.shape, f.core.shape, bool(jnp.vdot(x, hx) >= 0)
    ((2, 18), (2, 2), True)

    ```
    """

    energy: Float[Array, ""]
    gradient: Float[Array, "18"]
    jacobian: Float[Array, "2 18"]
    basis: Float[Array, "2 18"]
    core: Float[Array, "2 2"]


def _flat_interval(x):
    u, v = x[:9].reshape(3, 3), x[9:].reshape(3, 3)
    iv = interval(u, v)
    tc = jnp.stack([iv.tc0, iv.tc1])
    return tc, (tc, iv.valid)


def _project_2x2(c):
    """Exact projection of a symmetric 2 x 2 matrix onto the PSD cone (closed form, no eigenvectors)."""
    a, b, d = c[0, 0], 0.5 * (c[0, 1] + c[1, 0]), c[1, 1]
    mean = 0.5 * (a + d)
    radius = jnp.sqrt(0.25 * (a - d) ** 2 + b**2)
    high, low = mean + radius, mean - radius
    sym = jnp.array([[a, b], [b, d]])
    # low < 0 < high: keep high * (its eigenprojector) = high * (C - low I) / (high - low).
    split = high * safe_divide(sym - low * jnp.eye(2, dtype=c.dtype), 2 * radius)
    return jnp.where(low >= 0, sym, jnp.where(high <= 0, jnp.zeros_like(sym), split))


def _orthonormal_rows(j):
    """Gram-Schmidt of the two rows of ``j``: ``j = r @ q`` with ``q`` orthonormal (zero rows if rank < 2)."""
    norm0 = jnp.sqrt(jnp.dot(j[0], j[0]))
    q0 = safe_divide(j[0], norm0)
    r10 = jnp.dot(j[1], q0)
    rest = j[1] - r10 * q0
    again = jnp.dot(rest, q0)  # re-orthogonalise ("twice is enough"): nearly parallel rows lose it once
    rest, r10 = rest - again * q0, r10 + again
    norm1 = jnp.sqrt(jnp.dot(rest, rest))
    q1 = safe_divide(rest, norm1)
    r = jnp.array([[norm0, 0], [r10, norm1]], dtype=j.dtype)
    return r, jnp.stack([q0, q1])


def gauss_newton_factor(u: Triangle, v: Triangle, *, margin=0.0) -> GaussNewtonFactor:
    """Energy, gradient (Eq. 3) and the factored PSD-projected Gauss-Newton Hessian (Eq. 4) of one pair.

    $H_{GN} = J^T K J$ with $J = \\partial(t_c^0, t_c^1)/\\partial(u, v)$ (2 x 18) and
    $K = \\begin{pmatrix} 2 t_1^2 & 4 t_0 t_1 \\\\ 4 t_0 t_1 & 2 t_0^2 \\end{pmatrix}$ (the ends
    widened by the margin). $K$ is always indefinite ($\\det K = -12\\,(t_0 t_1)^2$), so the projection
    matters: it is computed exactly from a 2 x 2 eigenproblem after writing $J = R Q$ with orthonormal
    rows $Q$.

    **Returns:** [`GaussNewtonFactor`][tritri_jax.GaussNewtonFactor]; every field is zero where the
    widened pair does not cross. The gradient and basis are ordered ``(u0, u1, u2, v0, v1, v2)``.

    ```python
    >>> import jax, jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> f = tt.gauss_newton_factor(u, v)
    >>> du, dv = jax.grad(tt.pair_energy, argnums=(0, 1))(u, v)
    >>> bool(jnp.allclose(f.gradient, jnp.concatenate([du.ravel(), dv.ravel()])))
    True

    ```
    """
    x = jnp.concatenate([u.reshape(-1), v.reshape(-1)])
    jacobian, (tc, valid) = jax.jacrev(_flat_interval, has_aux=True)(x)
    lo, hi = tc[0] - margin, tc[1] + margin
    active = valid & (lo < 0) & (hi > 0)
    zero = jnp.zeros((), x.dtype)
    lo, hi = jnp.where(active, lo, zero), jnp.where(active, hi, zero)
    energy = (lo * hi) ** 2
    gradient = jacobian.T @ jnp.stack([2 * lo * hi**2, 2 * hi * lo**2])
    k = jnp.array([[2 * hi**2, 4 * lo * hi], [4 * lo * hi, 2 * lo**2]], dtype=x.dtype)
    r, basis = _orthonormal_rows(jacobian)
    core = _project_2x2(r.T @ k @ r)
    jacobian = jnp.where(active, jacobian, 0)
    return GaussNewtonFactor(energy=energy, gradient=gradient, jacobian=jacobian, basis=basis, core=core)


def _project_psd(h):
    h = 0.5 * (h + h.T)
    w, q = jnp.linalg.eigh(h)
    return (q * jnp.maximum(w, 0)) @ q.T


def _exact_hessian(x, margin):
    """Exact Hessian by the chain rule through (tc0, tc1): $J^T K J + \\sum_i \\partial_i T\\, \\nabla^2 t_i$."""

    def tc_of(y):
        return _flat_interval(y)[0]

    tc, valid = _flat_interval(x)[1]
    jacobian = jax.jacrev(tc_of)(x)
    second = jax.jacfwd(jax.jacrev(tc_of))(x)  # (2, 18, 18)
    lo, hi = tc[0] - margin, tc[1] + margin
    active = valid & (lo < 0) & (hi > 0)
    g_tc = jnp.stack([2 * lo * hi**2, 2 * hi * lo**2])
    k = jnp.array([[2 * hi**2, 4 * lo * hi], [4 * lo * hi, 2 * lo**2]], dtype=x.dtype)
    h = jacobian.T @ k @ jacobian + jnp.einsum("i,ijk->jk", g_tc, second)
    return jnp.where(active, h, 0)


def pair_energy_grad_hessian(u: Triangle, v: Triangle, *, hessian: str = "gauss_newton", margin=0.0):
    """Energy, gradient and a PSD Hessian of one pair, dense.

    **Arguments:**

    - ``u``, ``v``: triangles ``(3, 3)``.
    - ``hessian``: ``"gauss_newton"`` (Eq. 4, projected exactly through its 2 x 2 core) or
      ``"exact"`` (the full Hessian, symmetrised, negative eigenvalues clamped to zero).
    - ``margin``: as in [`pair_energy`][tritri_jax.pair_energy].

    **Returns:** ``(energy, grad, hess)`` with shapes ``()``, ``(18,)``, ``(18, 18)``, variables
    ordered ``(u0, u1, u2, v0, v1, v2)``. Prefer [`gauss_newton_factor`][tritri_jax.gauss_newton_factor]
    in solvers: it never forms the 18 x 18 matrix.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> energy, grad, hess = tt.pair_energy_grad_hessian(u, v)
    >>> w = jnp.linalg.eigvalsh(hess)  # PSD up to round-off
    >>> float(energy), grad.shape, hess.shape, bool(w.min() > -1e-5 * w.max())
    (9.0, (18,), (18, 18), True)
    >>> _, _, exact = tt.pair_energy_grad_hessian(u, v, hessian="exact")  # full Hessian, clamped to PSD
    >>> w = jnp.linalg.eigvalsh(exact)
    >>> bool(w.min() > -1e-5 * w.max())
    True

    ```
    """
    factor = gauss_newton_factor(u, v, margin=margin)
    if hessian == "gauss_newton":
        hess = factor.basis.T @ factor.core @ factor.basis
    elif hessian == "exact":
        x = jnp.concatenate([u.reshape(-1), v.reshape(-1)])
        hess = _project_psd(_exact_hessian(x, margin))
    else:
        raise ValueError(f"hessian must be 'gauss_newton' or 'exact', got {hessian!r}")
    return factor.energy, factor.gradient, hess

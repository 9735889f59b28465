"""Layer 1: derivatives of one pair's energy beyond the gradient: the factored, PSD-projected
Gauss-Newton Hessian of Eq. (4) (``gauss_newton_factor``, what the solvers use) and the dense
18 x 18 routes (``pair_energy_grad_hessian``: Gauss-Newton or the exact Hessian clamped to PSD).
The Gauss-Newton routes go through the Jacobian of Möller's interval ends ``(tc0, tc1)``, derived by
hand (``interval_jacobian``); the exact one adds their second derivatives, ``jax.jacfwd`` of it."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._kernels import Interval, _line, _rotated
from ._safe import eps_of, safe_divide
from ._types import Array, Float, Triangle
from ._vec3 import AOS, pick


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


def _unit_normal_pullback(ops, tri, normal, g):
    """A cotangent ``g`` of ``tri``'s unit normal, pulled back to its three vertices."""
    e1, e2 = ops.sub(tri[1], tri[0]), ops.sub(tri[2], tri[0])
    c = ops.cross(e1, e2)
    inverse = lax.rsqrt(jnp.maximum(ops.dot(c, c), jnp.finfo(ops.dot(c, c).dtype).tiny))
    gc = ops.scale(ops.sub(g, ops.scale(normal, ops.dot(g, normal))), inverse)  # d(c / |c|) = (I - n n^T) dc / |c|
    g1, g2 = ops.cross(e2, gc), ops.cross(gc, e1)  # c = e1 x e2
    return [ops.scale(ops.add(g1, g2), -1.0), g1, g2]


def _segment_pullback(ops, tri, dist, lonely, plane_point, normal, g_ends):
    """Cotangents of a segment's two end points (``_kernels._segment``), pulled back to ``tri``'s
    vertices and to the other triangle's plane (its first vertex and unit normal).

    An end point on the edge from the lonely vertex ``a`` to ``b`` is ``a + w (b - a)`` with
    ``w = d_a / (d_a - d_b)``, ``d = (x - plane_point) . normal``; it is ``b`` itself where ``d_b = 0``."""
    rotated, d = _rotated(ops, lonely, tri, dist)
    zero = ops.scale(rotated[0], 0.0)
    g_vertex, g_dist = [zero, zero, zero], [0.0, 0.0, 0.0]
    for i, g in zip((1, 2), g_ends, strict=True):
        on_plane = (d[i] == 0) | (d[0] == d[i])  # (the second only where the pair is not valid)
        denominator = jnp.where(on_plane, 1, d[0] - d[i])
        w = jnp.where(on_plane, 1, d[0] / denominator)
        s = ops.dot(g, ops.sub(rotated[i], rotated[0]))
        g_vertex[0] = ops.add(g_vertex[0], ops.scale(g, 1 - w))
        g_vertex[i] = ops.add(g_vertex[i], ops.scale(g, w))
        g_dist[0] = g_dist[0] + jnp.where(on_plane, 0, -s * d[i] / denominator**2)
        g_dist[i] = g_dist[i] + jnp.where(on_plane, 0, s * d[0] / denominator**2)
    g_point, g_normal = zero, zero
    for i in range(3):
        g_vertex[i] = ops.add(g_vertex[i], ops.scale(normal, g_dist[i]))
        g_point = ops.sub(g_point, ops.scale(normal, g_dist[i]))
        g_normal = ops.add(g_normal, ops.scale(ops.sub(rotated[i], plane_point), g_dist[i]))
    # back from the rotated order (rotated[i] = tri[(lonely + i) % 3]) to tri's
    g_tri = [pick(ops, (m - lonely) % 3, *g_vertex) for m in range(3)]
    return g_tri, g_point, g_normal


def _interval_row(ops, line, c0, c1):
    """``c0 * d tc0 + c1 * d tc1`` with respect to ``(u0, u1, u2, v0, v1, v2)``: one reverse pass."""
    u, v, direction = line.u, line.v, line.direction
    # tc0 = (a_lo - b_hi) . D and tc1 = (a_hi - b_lo) . D, D = (n_u x n_v) / |n_u x n_v|
    pu, pv = line.segment_u, line.segment_v
    a_lo, a_hi = ops.where(line.order_u, pu[0], pu[1]), ops.where(line.order_u, pu[1], pu[0])
    b_lo, b_hi = ops.where(line.order_v, pv[0], pv[1]), ops.where(line.order_v, pv[1], pv[0])
    g_lo, g_hi = ops.scale(direction, c0), ops.scale(direction, c1)
    g_pu = [ops.where(line.order_u, g_lo, g_hi), ops.where(line.order_u, g_hi, g_lo)]
    g_pv = [ops.where(line.order_v, ops.scale(g_hi, -1.0), ops.scale(g_lo, -1.0))]
    g_pv.append(ops.where(line.order_v, ops.scale(g_lo, -1.0), ops.scale(g_hi, -1.0)))
    g_direction = ops.add(ops.scale(ops.sub(a_lo, b_hi), c0), ops.scale(ops.sub(a_hi, b_lo), c1))
    inverse = lax.rsqrt(jnp.maximum(line.sine_sq, jnp.finfo(c0.dtype).tiny))  # 1 / |n_u x n_v|
    g_cross = ops.scale(ops.sub(g_direction, ops.scale(direction, ops.dot(g_direction, direction))), inverse)
    g_normal_u, g_normal_v = ops.cross(line.normal_v, g_cross), ops.cross(g_cross, line.normal_u)
    # u's end points lie on v's plane (through v0, normal n_v), and v's on u's.
    g_u, g_v0, g_nv = _segment_pullback(ops, u, line.dist_u, line.lonely_u, v[0], line.normal_v, g_pu)
    g_v, g_u0, g_nu = _segment_pullback(ops, v, line.dist_v, line.lonely_v, u[0], line.normal_u, g_pv)
    g_u[0], g_v[0] = ops.add(g_u[0], g_u0), ops.add(g_v[0], g_v0)
    for g_tri, tri, normal, g_n in (
        (g_u, u, line.normal_u, ops.add(g_normal_u, g_nu)),
        (g_v, v, line.normal_v, ops.add(g_normal_v, g_nv)),
    ):
        for i, g in enumerate(_unit_normal_pullback(ops, tri, normal, g_n)):
            g_tri[i] = ops.add(g_tri[i], g)
    return [ops.coord(g, c) for g in g_u + g_v for c in range(3)]


def _project_2x2(a, b, d):
    """Exact projection of the symmetric 2 x 2 matrix ``[[a, b], [b, d]]`` onto the PSD cone (closed
    form, no eigenvectors)."""
    mean = 0.5 * (a + d)
    radius = jnp.sqrt(0.25 * (a - d) ** 2 + b**2)
    high, low = mean + radius, mean - radius
    sym = jnp.stack([jnp.stack([a, b]), jnp.stack([b, d])])
    # low < 0 < high: keep high * (its eigenprojector) = high * (C - low I) / (high - low).
    split = high * safe_divide(sym - low * jnp.eye(2, dtype=sym.dtype), 2 * radius)
    return jnp.where(low >= 0, sym, jnp.where(high <= 0, jnp.zeros_like(sym), split))


def _orthonormal_rows(j):
    """Gram-Schmidt of the two rows of ``j``: ``j = r @ q`` with ``q`` orthonormal (zero rows if rank
    < 2) and ``r = [[norm0, 0], [r10, norm1]]``, returned as ``(norm0, r10, norm1), q``.

    Two passes over ``j``, each a pair of dot products that XLA fuses into one loop: ``j0 . j0`` and
    ``j0 . j1`` (so ``r10 = j1 . q0`` without waiting for ``q0``), then those of the remainder. The
    second pass re-orthogonalises ("twice is enough": nearly parallel rows lose orthogonality once)."""
    norm0 = jnp.sqrt(jnp.dot(j[0], j[0]))
    inverse0 = safe_divide(jnp.ones_like(norm0), norm0)
    r10 = jnp.dot(j[0], j[1]) * inverse0
    q0 = j[0] * inverse0
    rest = j[1] - r10 * q0
    # |q0| = 1, so the remainder's norm after the correction is sqrt(|rest|^2 - again^2)
    again, rest_sq = jnp.dot(rest, q0), jnp.dot(rest, rest)
    norm1 = jnp.sqrt(jnp.maximum(rest_sq - again**2, 0))
    q1 = (rest - again * q0) * safe_divide(jnp.ones_like(norm1), norm1)
    return (norm0, r10 + again, norm1), jnp.stack([q0, q1])


def interval_jacobian(u: Triangle, v: Triangle):
    """``(interval, jacobian)``: Möller's interval (as [`interval`][tritri_jax.interval] gives it) and
    the 2 x 18 Jacobian of its ends ``(tc0, tc1)`` with respect to ``(u0, u1, u2, v0, v1, v2)``, derived by hand.

    The ends are homogeneous of degree one, so the Jacobian in ``_kernels``' scaled frame is the
    Jacobian itself. One reverse pass per end through the steps of ``_kernels._line`` (segment end
    points on the other plane, the planes' unit normals, the line's direction), with the branches
    that the interval took. Under ``jax.vmap`` it is faster than ``jax.jacrev`` of
    [`interval`][tritri_jax.interval] (``benchmarks/pair_kernels.py``); it is plain JAX, so it can
    itself be differentiated.
    """
    line = _line(AOS, u, v, eps_of(u))
    one = jnp.ones_like(line.scale)
    rows = [_interval_row(AOS, line, one, 0 * one), _interval_row(AOS, line, 0 * one, one)]
    jacobian = jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)
    jacobian = jnp.where(line.valid[..., None, None], jacobian, 0)
    return Interval(line.ends[0] * line.scale, line.ends[1] * line.scale, line.valid), jacobian


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
    # Materialised once: otherwise XLA fuses the Jacobian's whole computation into each of its
    # consumers below and repeats it there
    iv, jacobian = lax.optimization_barrier(interval_jacobian(u, v))
    lo, hi = iv.tc0 - margin, iv.tc1 + margin
    active = iv.valid & (lo < 0) & (hi > 0)
    zero = jnp.zeros((), lo.dtype)
    lo, hi = jnp.where(active, lo, zero), jnp.where(active, hi, zero)
    energy = (lo * hi) ** 2
    (g0, g1), (k00, k01, k11) = _energy_derivatives(lo, hi)
    gradient = jacobian[0] * g0 + jacobian[1] * g1
    (a, b, c), basis = _orthonormal_rows(jacobian)
    # r^T K r with r = [[a, 0], [b, c]], written out (a batch of 2 x 2 products runs as tiny dots)
    core = _project_2x2(k00 * a**2 + 2 * k01 * a * b + k11 * b**2, c * (k01 * a + k11 * b), k11 * c**2)
    jacobian = jnp.where(active, jacobian, 0)
    return GaussNewtonFactor(energy=energy, gradient=gradient, jacobian=jacobian, basis=basis, core=core)


def _energy_derivatives(lo, hi):
    """The derivatives of $T = (t_{c0} t_{c1})^2$ in the interval ends $(t_{c0}, t_{c1})$ = ``(lo, hi)``:
    the gradient ``(T_0, T_1)`` and the Hessian ``K`` as ``(K_00, K_01, K_11)``."""
    return (2 * lo * hi**2, 2 * hi * lo**2), (2 * hi**2, 4 * lo * hi, 2 * lo**2)


def _project_psd(h):
    h = 0.5 * (h + h.T)
    w, q = jnp.linalg.eigh(h)
    return (q * jnp.maximum(w, 0)) @ q.T


def _exact_hessian(x, margin):
    """Exact Hessian by the chain rule through (tc0, tc1): $J^T K J + \\sum_i \\partial_i T\\, \\nabla^2 t_i$."""

    def jacobian_of(y):
        return interval_jacobian(y[:9].reshape(3, 3), y[9:].reshape(3, 3))

    iv, jacobian = jacobian_of(x)
    second = jax.jacfwd(lambda y: jacobian_of(y)[1])(x)  # (2, 18, 18): forward mode over the hand Jacobian
    lo, hi = iv.tc0 - margin, iv.tc1 + margin
    active = iv.valid & (lo < 0) & (hi > 0)
    (g0, g1), (k00, k01, k11) = _energy_derivatives(lo, hi)
    g_tc = jnp.stack([g0, g1])
    k = jnp.array([[k00, k01], [k01, k11]], dtype=x.dtype)
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
        # basis^T core basis as two outer products (broadcast multiplies: under vmap XLA fuses them,
        # where a batch of 18 x 2 x 18 matrix products runs as many tiny ones), from the factor
        # materialised once (not recomputed inside each of the 324 entries)
        (b0, b1), c = lax.optimization_barrier((factor.basis, factor.core))
        hess = (b0 * c[0, 0] + b1 * c[1, 0])[:, None] * b0 + (b0 * c[0, 1] + b1 * c[1, 1])[:, None] * b1
    elif hessian == "exact":
        x = jnp.concatenate([u.reshape(-1), v.reshape(-1)])
        hess = _project_psd(_exact_hessian(x, margin))
    else:
        raise ValueError(f"hessian must be 'gauss_newton' or 'exact', got {hessian!r}")
    return factor.energy, factor.gradient, hess

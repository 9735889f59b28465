"""Layer 1: per-pair kernels on two triangles ``u, v`` of shape ``(3, 3)``.

Everything here is a pure function of one pair with fixed shapes: no batching (use
``jax.vmap``), no mesh, no options objects, no runtime checks.

Numerical scheme (why it looks the way it does):

* The pair is first centred on its bounding box and divided by a power of two, so every
  quantity below is O(1) whatever the input magnitude (1e-6 or 1e6, near or far from the
  origin) and the scaling itself is exact. Centre and scale are ``stop_gradient``-ed: the
  interval is exactly homogeneous, so this leaves every derivative exact.
* A vertex that coincides bitwise with a vertex of the other triangle lies on the other
  plane; its signed distance is set to exactly zero (this is what makes vertex-sharing
  pairs exact). Distances below ``eps**2`` (in the scaled units) are snapped to zero too,
  which keeps every derivative bounded.
* Branches (which vertex is alone on its side of the plane) are selected with
  ``jnp.where``; unsafe divisions and normalisations use the double-where helpers of
  ``_safe`` with thresholds that keep derivatives of every order finite.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._safe import eps_of, safe_divide, safe_normalize
from ._types import Array, Bool, Float, Scalar, Triangle

_COPLANAR_TOL = 32.0  # in units of eps, in the scaled frame (|coordinates| <= 1)
_SLIVER_TOL = 32.0  # a triangle whose edge angle is below this many eps is degenerate
_AMBIGUOUS_TOL = 256.0  # verdicts closer than this many eps (scaled frame) to flipping are "ambiguous"


class Interval(NamedTuple):
    """The Minkowski-difference interval $I_c = [t_c^0, t_c^1]$ of Eq. (1).

    ``tc0 = ta0 - tb1`` and ``tc1 = ta1 - tb0`` (no halving, unlike the paper's appendix).
    ``valid`` is true when each triangle strictly crosses the other's plane (and neither is
    degenerate nor are they coplanar); where it is false ``tc0 = tc1 = 0``.
    """

    tc0: Float[Array, ""]
    tc1: Float[Array, ""]
    valid: Bool[Array, ""]


class GaussNewtonFactor(NamedTuple):
    """Factored, PSD-projected Gauss-Newton Hessian of one pair (Eq. 4).

    The projected Hessian is ``basis.T @ core @ basis`` (18 x 18, rank <= 2): ``basis`` holds two
    orthonormal rows spanning the rows of ``jacobian`` and ``core`` is the 2 x 2 PSD projection of
    $R^T K R$ where ``jacobian = R @ basis``. Storing ``basis`` and ``core`` takes 39 numbers instead
    of 324, and a Hessian-vector product costs two 18-vector dot products.
    """

    energy: Float[Array, ""]
    gradient: Float[Array, "18"]
    jacobian: Float[Array, "2 18"]
    basis: Float[Array, "2 18"]
    core: Float[Array, "2 2"]


class _Parts(NamedTuple):
    tc0: Array
    tc1: Array
    length_a: Array  # |I_a|
    length_b: Array  # |I_b|
    valid: Array
    coplanar_overlap: Array
    ambiguous: Array  # within rounding distance of changing the crossing verdict


def _frame(u, v):
    """Exact-ish normalisation: centre on the bounding box, divide by a power of two."""
    both = jnp.concatenate([u, v], axis=0)
    lo, hi = both.min(axis=0), both.max(axis=0)
    centre = 0.5 * lo + 0.5 * hi
    extent = jnp.max(jnp.abs(both - centre))
    ok = (extent > 0) & jnp.isfinite(extent)
    scale = jnp.exp2(jnp.ceil(jnp.log2(jnp.where(ok, extent, 1))))
    return lax.stop_gradient(centre), lax.stop_gradient(scale)


def _unit_normal(tri, eps):
    e1, e2 = tri[1] - tri[0], tri[2] - tri[0]
    normal = jnp.cross(e1, e2)
    # Degenerate when the edges' angle is below ~32 eps (relative) or the area is absurdly small
    # in the scaled frame (which would make derivatives overflow).
    min_sq = jnp.maximum((_SLIVER_TOL * eps) ** 2 * jnp.dot(e1, e1) * jnp.dot(e2, e2), eps**4)
    return safe_normalize(normal, min_sq)


def _segment(tri, dist):
    """End points of the segment where ``tri`` crosses a plane, from its vertices' signed distances.

    The "lonely" vertex ``k`` is the first nonzero one whose sign no other vertex shares; the
    end points lie on the edges leaving it (an end point is a vertex itself when that vertex lies
    on the plane, which covers Appendix A's one-vertex-on-the-plane branch).
    """
    sign = jnp.sign(dist)
    crosses = (sign.max() > 0) & (sign.min() < 0)
    lonely = (sign != 0) & (sign * jnp.roll(sign, -1) <= 0) & (sign * jnp.roll(sign, -2) <= 0)
    k = jnp.argmax(lonely)

    def rolled(x):
        return jnp.where(k == 0, x, jnp.where(k == 1, jnp.roll(x, -1, axis=0), jnp.roll(x, -2, axis=0)))

    tri_r = rolled(tri)
    dist_r = rolled(dist)

    def end_point(i):
        denominator = dist_r[0] - dist_r[i]
        weight = safe_divide(dist_r[0], denominator, crosses & (denominator != 0))
        point = tri_r[0] + weight * (tri_r[i] - tri_r[0])
        return jnp.where(dist_r[i] == 0, tri_r[i], point)

    return end_point(1), end_point(2), crosses


def _coplanar_overlap(u, v, normal):
    """Do two coplanar triangles overlap with positive area? (separating axes in the best 2-D chart)."""
    axis = jnp.argmax(jnp.abs(normal))
    first = jnp.where(axis == 0, 1, 0)
    second = jnp.where(axis == 2, 1, 2)

    def chart(tri):
        return jnp.stack([tri[:, first], tri[:, second]], axis=1)

    u2, v2 = chart(u), chart(v)
    edges = jnp.concatenate([jnp.roll(u2, -1, axis=0) - u2, jnp.roll(v2, -1, axis=0) - v2])
    normals = jnp.stack([-edges[:, 1], edges[:, 0]], axis=1)  # (6, 2)
    pu, pv = u2 @ normals.T, v2 @ normals.T  # (3, 6)
    amount = jnp.minimum(pu.max(axis=0) - pv.min(axis=0), pv.max(axis=0) - pu.min(axis=0))
    amount = amount / jnp.maximum(jnp.sqrt(jnp.sum(normals**2, axis=1)), jnp.finfo(u.dtype).tiny)
    # An amount of exactly zero comes from shared coordinates (exact); a tiny nonzero one is rounding.
    near = jnp.any((amount != 0) & (jnp.abs(amount) < _AMBIGUOUS_TOL * jnp.finfo(u.dtype).eps))
    return ~jnp.any(amount <= 0), near


def _scaled_pair(u, v, eps):
    """The pair in the exact frame of ``_frame``, bitwise vertex coincidences, both unit normals."""
    same = jnp.all(u[:, None, :] == v[None, :, :], axis=-1)  # same[i, j]: u_i == v_j bitwise
    centre, scale = _frame(u, v)
    u = (u - centre) / scale
    v = (v - centre) / scale
    return same, u, v, scale, _unit_normal(u, eps), _unit_normal(v, eps)


def _parts(u: Triangle, v: Triangle) -> _Parts:
    eps = eps_of(u)
    same, u, v, scale, (normal_u, ok_u), (normal_v, ok_v) = _scaled_pair(u, v, eps)
    snap = eps**2
    dist_v = (v - u[0]) @ normal_u  # v's vertices against u's plane
    dist_u = (u - v[0]) @ normal_v
    dist_v = jnp.where(same.any(axis=0) | (jnp.abs(dist_v) <= snap), 0, dist_v)
    dist_u = jnp.where(same.any(axis=1) | (jnp.abs(dist_u) <= snap), 0, dist_u)

    tol = _COPLANAR_TOL * eps
    coplanar = ok_u & ok_v & (jnp.max(jnp.abs(dist_u)) <= tol) & (jnp.max(jnp.abs(dist_v)) <= tol)
    overlap_2d, near_2d = _coplanar_overlap(u, v, normal_u)
    coplanar_overlap = coplanar & overlap_2d

    pu0, pu1, crosses_u = _segment(u, dist_u)
    pv0, pv1, crosses_v = _segment(v, dist_v)
    direction, ok_d = safe_normalize(jnp.cross(normal_u, normal_v), eps**2)
    valid = crosses_u & crosses_v & ok_u & ok_v & ok_d & ~coplanar

    points = jnp.stack([pu0, pu1, pv0, pv1])
    t = (points - points.mean(axis=0)) @ direction  # used only to order the end points
    a_lo, a_hi = jnp.where(t[0] <= t[1], pu0, pu1), jnp.where(t[0] <= t[1], pu1, pu0)
    b_lo, b_hi = jnp.where(t[2] <= t[3], pv0, pv1), jnp.where(t[2] <= t[3], pv1, pv0)
    # Differences of points, not of t: end points that are the same vertex give exactly zero
    # however the compiler evaluates the dot products (that is what makes shared vertices exact).
    ends = jnp.stack([a_lo - b_hi, a_hi - b_lo, a_hi - a_lo, b_hi - b_lo]) @ direction
    ends = jnp.where(valid, ends, 0)

    # Rounding distance: a vertex almost on the other plane, interval ends almost meeting (their
    # error grows like 1/sin(angle)), near-parallel planes, near-degenerate faces, close 2-D calls.
    tol = _AMBIGUOUS_TOL * eps
    sine = jnp.sqrt(jnp.sum(jnp.cross(normal_u, normal_v) ** 2))
    dists = jnp.concatenate([dist_u, dist_v])
    near_plane = jnp.any((dists != 0) & (jnp.abs(dists) < tol))
    # An end that is exactly zero because the pair shares a vertex is exact, not rounding.
    structural = same.any() & (ends[:2] == 0)
    near_end = valid & jnp.any(~structural & (jnp.abs(ends[:2]) * sine < tol))
    near_flat = ~coplanar & ok_u & ok_v & (sine < tol) & jnp.any(dists != 0)
    thin = ~(
        _unit_normal(u, _AMBIGUOUS_TOL / _SLIVER_TOL * eps)[1] & _unit_normal(v, _AMBIGUOUS_TOL / _SLIVER_TOL * eps)[1]
    )
    ambiguous = near_plane | near_end | near_flat | (coplanar & near_2d) | (thin & (ok_u | ok_v))
    ends = ends * scale
    return _Parts(
        tc0=ends[0],
        tc1=ends[1],
        length_a=ends[2],
        length_b=ends[3],
        valid=valid,
        coplanar_overlap=coplanar_overlap,
        ambiguous=ambiguous,
    )


def interval(u: Triangle, v: Triangle) -> Interval:
    """Möller's interval $I_c = I_a \\oplus (-I_b) = [t_a^0 - t_b^1,\\ t_a^1 - t_b^0]$ of Eq. (1).

    $I_a$ and $I_b$ are the parameter intervals, along the unit direction
    $D = (n_u \\times n_v)/|n_u \\times n_v|$ of the planes' intersection line, of the segments
    where each triangle crosses the other's plane. The triangles cross iff ``valid`` and
    $0 \\in (t_c^0, t_c^1)$.

    **Arguments:** ``u``, ``v``: triangles of shape ``(3, 3)`` (rows are vertices), same float dtype.

    **Returns:** an [`Interval`][tritri_jax.Interval] ``(tc0, tc1, valid)``; ``tc0 = tc1 = 0`` where
    ``valid`` is false (a triangle does not cross the other's plane, coplanar or degenerate pairs).

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> iv = tt.interval(u, v)
    >>> bool(iv.valid), bool(iv.tc0 < 0 < iv.tc1)
    (True, True)

    ```
    """
    p = _parts(u, v)
    return Interval(tc0=p.tc0, tc1=p.tc1, valid=p.valid)


def intersects(u: Triangle, v: Triangle) -> Bool[Array, ""]:
    """Whether two triangles cross: $0 \\in (t_c^0, t_c^1)$, or coplanar with an overlap of positive area.

    Touching (a shared vertex or edge, a vertex on the other triangle, intervals meeting at an end)
    is not crossing. Zero-area triangles never cross. Exact wherever the pair is not within
    rounding distance of touching.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> bool(tt.intersects(u, u + jnp.array([0., 0, 1])))
    False

    ```
    """
    p = _parts(u, v)
    return (p.valid & (p.tc0 < 0) & (p.tc1 > 0)) | p.coplanar_overlap


def clearly_apart(u: Triangle, v: Triangle) -> Bool[Array, ""]:
    """Cheap early-out: one triangle lies strictly on one side of the other's plane, beyond rounding.

    Vertices coinciding with a vertex of the other triangle are ignored (they are exactly on the
    plane), so vertex-sharing pairs are rejected too when the rest of one lies on one side.
    """
    eps = eps_of(u)
    same, u, v, _, (normal_u, ok_u), (normal_v, ok_v) = _scaled_pair(u, v, eps)
    tol = _AMBIGUOUS_TOL * eps

    def one_side(tri, other, normal, ok, shared):
        dist = (other - tri[0]) @ normal
        positive = jnp.all((dist > tol) | shared)
        negative = jnp.all((dist < -tol) | shared)
        return ok & ~jnp.all(shared) & (positive | negative)

    return one_side(u, v, normal_u, ok_u, same.any(axis=0)) | one_side(v, u, normal_v, ok_v, same.any(axis=1))


def classify(u: Triangle, v: Triangle):
    """``(crossing, ambiguous)``: the float verdict of ``intersects`` and whether rounding could flip it."""
    p = _parts(u, v)
    return (p.valid & (p.tc0 < 0) & (p.tc1 > 0)) | p.coplanar_overlap, p.ambiguous


def _widened(u, v, margin):
    iv = interval(u, v)
    lo, hi = iv.tc0 - margin, iv.tc1 + margin
    active = iv.valid & (lo < 0) & (hi > 0)
    return lo, hi, active


def pair_energy(u: Triangle, v: Triangle, *, margin=0.0) -> Scalar:
    """The paper's triangle-triangle intersection energy, Eq. (2): $T(u, v) = (t_c^0\\, t_c^1)^2$.

    With a margin $\\delta \\ge 0$ the interval is widened to $[t_c^0 - \\delta, t_c^1 + \\delta]$, so
    the energy stays positive until the intervals are $\\delta$ apart. Zero when the pair does not
    cross (or is coplanar or degenerate). This is Eq. (2) of the paper; its appendix code halves
    both ends, which scales $T$ by 1/16.

    ```python
    >>> import jax, jax.numpy as jnp, tritri_jax as tt
    >>> u = jnp.array([[-1., -1, 0], [1, -1, 0], [0, 1, 0]])
    >>> v = jnp.array([[0., 0, -1], [0, 0, 1], [0, 2, 0]])
    >>> float(tt.pair_energy(u, v)) > 0, jax.grad(tt.pair_energy)(u, v).shape
    (True, (3, 3))

    ```
    """
    lo, hi, active = _widened(u, v, margin)
    return jnp.where(active, (lo * hi) ** 2, 0)


def crossing_length(u: Triangle, v: Triangle) -> Scalar:
    """Length of the segment where two triangles cross: $\\ell = \\min(t_c^1, -t_c^0, |I_a|, |I_b|)$.

    This is the overlap of $I_a$ and $I_b$; summed over a mesh's pairs it is the length of the
    intersection curve. It vanishes continuously when a crossing shrinks or a poke retracts, and its
    gradient does not fade as it does, which is why the untangling solver descends on it. 0 when the
    pair does not cross.
    """
    p = _parts(u, v)
    length = jnp.minimum(jnp.minimum(p.tc1, -p.tc0), jnp.minimum(p.length_a, p.length_b))
    return jnp.where(p.valid & (p.tc0 < 0) & (p.tc1 > 0), length, 0)


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

"""Layer 4: elastic energies for the relaxation phase, written as squared residuals.

Every term is a sum of squares of residuals $r(x)$, so its Gauss-Newton operator $J^T J$ is
positive semi-definite and applied matrix-free (one JVP and one VJP of $r$). All terms are
dimensionless: lengths are divided by the rest shape's mean edge length ``h``.

- edge springs: $r_e = (|x_i - x_j| - l_e) / l_e$;
- bending: $\\sqrt{w_b}\\,(L x - L \\bar x)_i / h$ with $L$ the uniform graph Laplacian, i.e. the
  change of each vertex's differential coordinate (a linear stand-in for dihedral bending: it also
  resists rotating a neighbourhood, which keeps the solve convex-ish and cheap);
- pull to a target: $\\sqrt{w_p}\\,(x_i - \\bar x_i) / h$.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from ._safe import safe_norm


class RestShape(NamedTuple):
    """What the elastic energy measures against: edges, rest lengths, rest Laplacian, pull target."""

    edges: jax.Array  # (E, 2) int32
    rest_lengths: jax.Array  # (E,)
    rest_laplacian: jax.Array  # (V, 3)
    target: jax.Array  # (V, 3)
    degree: jax.Array  # (V,)
    h: jax.Array  # mean rest edge length


def unique_edges(faces) -> np.ndarray:
    """The mesh's undirected edges, ``(E, 2)`` int32, each once (host-side, from the connectivity)."""
    faces = np.asarray(faces)
    e = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    return np.unique(np.sort(e, axis=1), axis=0).astype(np.int32).reshape(-1, 2)


def laplacian(x, edges, degree):
    """Uniform graph Laplacian $L x$ (PSD): each vertex's degree times itself minus its neighbours."""
    n = x.shape[0]
    neighbours = jax.ops.segment_sum(x[edges[:, 1]], edges[:, 0], n) + jax.ops.segment_sum(
        x[edges[:, 0]], edges[:, 1], n
    )
    return degree[:, None] * x - neighbours


def rest_shape(rest, edges, target=None) -> RestShape:
    """Measure a rest shape (differentiable in ``rest`` and ``target``)."""
    edges = jnp.asarray(edges)
    degree = jax.ops.segment_sum(jnp.ones(2 * edges.shape[0], rest.dtype), edges.reshape(-1), rest.shape[0])
    lengths = safe_norm(rest[edges[:, 0]] - rest[edges[:, 1]])
    h = jnp.mean(lengths) if edges.shape[0] else jnp.ones((), rest.dtype)
    return RestShape(
        edges=edges,
        rest_lengths=jnp.maximum(lengths, 1e-3 * h),
        rest_laplacian=laplacian(rest, edges, degree),
        target=rest if target is None else target,
        degree=degree,
        h=h,
    )


def elastic_residuals(x, rest: RestShape, *, bending=1.0, pull=1e-2):
    """All elastic residuals of ``x`` as one flat vector; the energy is its squared norm."""
    e = rest.edges
    springs = (safe_norm(x[e[:, 0]] - x[e[:, 1]]) - rest.rest_lengths) / rest.rest_lengths
    bend = jnp.sqrt(bending) * (laplacian(x, e, rest.degree) - rest.rest_laplacian) / rest.h
    anchor = jnp.sqrt(pull) * (x - rest.target) / rest.h
    return jnp.concatenate([springs, bend.reshape(-1), anchor.reshape(-1)])


def elastic_energy(x, rest: RestShape, *, bending=1.0, pull=1e-2):
    """$\\sum r^2$ over [`elastic_residuals`][tritri_jax._elastic.elastic_residuals]."""
    r = elastic_residuals(x, rest, bending=bending, pull=pull)
    return jnp.sum(r * r)


def elastic_gauss_newton(x, rest: RestShape, *, bending=1.0, pull=1e-2):
    """``v -> H v`` at ``x``, PSD: the Gauss-Newton operator ``2 J^T J`` of ``elastic_energy`` plus
    the springs' curvature across stretched edges, $\\frac{2}{l^2} \\frac{|d| - l}{|d|} (I - n n^T)$
    (the part of their exact Hessian that Gauss-Newton drops; across compressed edges it is negative
    and left out). Without it, steps overshot along stretched edges and the line search halved them."""
    residuals = lambda y: elastic_residuals(y, rest, bending=bending, pull=pull)  # noqa: E731
    _, jvp = jax.linearize(residuals, x)
    vjp = jax.linear_transpose(jvp, x)
    e = rest.edges
    d = x[e[:, 0]] - x[e[:, 1]]
    length = safe_norm(d)
    n = d / jnp.where(length > 0, length, 1)[:, None]
    tension = 2 / rest.rest_lengths**2 * jnp.maximum(length - rest.rest_lengths, 0) / jnp.where(length > 0, length, 1)

    def across(v):
        dv = v[e[:, 0]] - v[e[:, 1]]
        f = tension[:, None] * (dv - n * jnp.sum(n * dv, axis=1, keepdims=True))
        num = x.shape[0]
        return jax.ops.segment_sum(f, e[:, 0], num) - jax.ops.segment_sum(f, e[:, 1], num)

    return lambda v: 2 * vjp(jvp(v))[0] + across(v)


def stiffness_matrix(edges, num_vertices: int, h: float, *, bending=1.0, pull=1e-2):
    """The constant part of the elastic Gauss-Newton operator, per coordinate, as a scipy sparse
    ``(V, V)`` matrix (host side; phase 2 preconditions its CG solves with a multigrid of it):

    $$ \\frac{2}{h^2} \\left( w_b L^T L + \\tfrac13 L + w_p I \\right) $$

    The bending and pull terms are exact; the springs' $2 n n^T / l^2$ per edge, which turn with the
    edges, are replaced by their average over directions, $\\tfrac13 \\cdot 2 / h^2$ per edge."""
    edges = np.asarray(edges).reshape(-1, 2)
    ones = np.ones(len(edges))
    adjacency = sp.coo_matrix((ones, (edges[:, 0], edges[:, 1])), shape=(num_vertices, num_vertices))
    adjacency = (adjacency + adjacency.T).tocsr()
    lap = sp.diags(np.asarray(adjacency.sum(axis=1)).ravel()) - adjacency
    return (2 / h**2) * (bending * (lap.T @ lap) + lap / 3 + pull * sp.identity(num_vertices))

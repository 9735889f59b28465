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

from ._multigrid import UNROLLED_SLOTS, ell_layout
from ._safe import safe_norm


class RestShape(NamedTuple):
    """What the elastic energy measures against: edges, rest lengths, rest Laplacian, pull target."""

    edges: jax.Array  # (E, 2) int32
    rest_lengths: jax.Array  # (E,)
    rest_laplacian: jax.Array  # (V, 3)
    target: jax.Array  # (V, 3)
    degree: jax.Array  # (V,)
    h: jax.Array  # mean rest edge length
    live: jax.Array | None = None  # (E,) bool: the edges past ``num_edges`` are shape padding


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


def rest_shape(rest, edges, target=None, num_edges=None) -> RestShape:
    """Measure a rest shape (differentiable in ``rest`` and ``target``).

    ``num_edges`` (may be traced): only the first ``num_edges`` rows of ``edges`` are edges; the rest
    is shape padding (``_sizes``), self-loops ``(p, p)`` at vertices no face uses: they add nothing
    to the Laplacian (a loop counts twice in the degree and twice among the neighbours) and are left
    out of ``h`` and of the springs."""
    edges = jnp.asarray(edges)
    degree = jax.ops.segment_sum(jnp.ones(2 * edges.shape[0], rest.dtype), edges.reshape(-1), rest.shape[0])
    lengths = safe_norm(rest[edges[:, 0]] - rest[edges[:, 1]])
    live = None
    if num_edges is None:
        h = jnp.mean(lengths) if edges.shape[0] else jnp.ones((), rest.dtype)
    else:
        live = jnp.arange(edges.shape[0]) < num_edges
        total = jnp.sum(jnp.where(live, lengths, 0))
        h = jnp.where(num_edges > 0, total / jnp.maximum(num_edges, 1), 1).astype(rest.dtype)
    return RestShape(
        edges=edges,
        rest_lengths=jnp.maximum(lengths, 1e-3 * h),
        rest_laplacian=laplacian(rest, edges, degree),
        target=rest if target is None else target,
        degree=degree,
        h=h,
        live=live,
    )


def elastic_residuals(x, rest: RestShape, *, bending=1.0, pull=1e-2):
    """All elastic residuals of ``x`` as one flat vector; the energy is its squared norm."""
    e = rest.edges
    springs = (safe_norm(x[e[:, 0]] - x[e[:, 1]]) - rest.rest_lengths) / rest.rest_lengths
    if rest.live is not None:
        springs = jnp.where(rest.live, springs, 0)
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


def laplacian_matrix(edges, num_vertices: int, weights=None):
    """The graph Laplacian of [`laplacian`][tritri_jax._elastic.laplacian] as a scipy sparse
    ``(V, V)`` matrix (host side): uniform, or with one weight per edge."""
    edges = np.asarray(edges).reshape(-1, 2)
    weights = np.ones(len(edges)) if weights is None else np.asarray(weights, np.float64)
    adjacency = sp.coo_matrix((weights, (edges[:, 0], edges[:, 1])), shape=(num_vertices, num_vertices))
    adjacency = (adjacency + adjacency.T).tocsr()
    return sp.diags(np.asarray(adjacency.sum(axis=1)).ravel()) - adjacency


def stiffness_matrix(rest, edges, *, bending=1.0, pull=1e-2):
    """The constant part of the elastic Gauss-Newton operator at the rest shape ``rest`` (``(V, 3)``),
    per coordinate, as a scipy sparse ``(V, V)`` matrix (host side; phase 2 preconditions its CG
    solves with a multigrid of it):

    $$ \\frac{2}{h^2} \\left( w_b L^T L + w_p I \\right) + \\sum_e \\frac{2}{3 l_e^2} L_e $$

    ``L`` the uniform Laplacian, ``L_e`` edge ``e``'s share of it, ``l_e`` its rest length (floored
    at ``1e-3 h``, as ``rest_shape`` does) and ``h`` their mean. The bending and pull terms are
    exact; the springs' $2 n n^T / l_e^2$ per edge, which turn with the edges, are replaced by their
    average over directions. Per edge, not $2 / (3 h^2)$ for all: on the figure-of-eight knot, whose
    rest lengths span 0.012-1.86 h, the uniform weight left the Gauss-Newton Hessian at the end of
    relax up to 800 times stiffer than this matrix in some directions, and CG preconditioned by the
    multigrid took 158 iterations to a relative residual of 1e-2 where the per-edge weights take 58
    (docs/untangling.md)."""
    rest, edges = np.asarray(rest, np.float64), np.asarray(edges).reshape(-1, 2)
    num_vertices = rest.shape[0]
    lengths = np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1)
    h = float(lengths.mean()) if len(edges) else 1.0
    lengths = np.maximum(lengths, 1e-3 * h)
    lap = laplacian_matrix(edges, num_vertices)
    springs = laplacian_matrix(edges, num_vertices, 2 / (3 * lengths**2))
    return (2 / h**2) * (bending * (lap.T @ lap) + pull * sp.identity(num_vertices)) + springs


class ElasticPattern(NamedTuple):
    """Where the elastic Hessian's 3 x 3 blocks sit (host-built once per mesh): row ``i`` holds the
    blocks of the vertices within two edges of ``i`` (the pattern of $L^2$). Each block is an
    *entry*: entry ``i * w + k`` is slot ``k`` of row ``i`` (column ``cols[i, k]``; padding slots
    point at ``i`` itself, with zero blocks), and entries from ``V * w`` on are the overflow of rows
    fuller than ``w`` (``extra_rows``, ``extra_cols``; padding at row 0, column 0, zero blocks).
    ``laplacian_sq`` holds $L^2$'s entries, ``diagonal`` each row's own entry, ``edge_slots[e]`` the
    entry of ``j`` in row ``i`` and of ``i`` in row ``j`` for edge ``e = (i, j)``."""

    cols: jax.Array  # (V, w) int32
    extra_rows: jax.Array  # (M,) int32
    extra_cols: jax.Array  # (M,) int32
    laplacian_sq: jax.Array  # (V * w + M,)
    diagonal: jax.Array  # (V,) int32
    edge_slots: jax.Array  # (E, 2) int32

    def entry_cols(self):
        """The column of every entry, ``(V * w + M,)``."""
        return jnp.concatenate([self.cols.reshape(-1), self.extra_cols])


def elastic_pattern(edges, num_vertices: int, dtype=jnp.float64, width=None) -> ElasticPattern:
    """The [`ElasticPattern`][tritri_jax._elastic.ElasticPattern] of a mesh's (unique) ``edges``;
    ``width``: a function of the slot count giving the one to use (a bucket); the overflow is laid
    out as in the multigrid's matrices (``_multigrid.ell_layout``).

    The slots cover 90 % of the rows when the fullest holds more than 1.5x that (``_multigrid.ell_width``):
    the two-ring of a UV sphere's pole and of its neighbours spans ~2 sqrt(F) vertices, and on a
    20k-face sphere every row had 201 slots for a median row of 19 (phase 2's CG products ran over
    ten times the entries they needed)."""
    edges = np.asarray(edges, np.int64).reshape(-1, 2)
    n = num_vertices
    lap = laplacian_matrix(edges, n)
    structure = (abs(lap) @ abs(lap) + sp.identity(n)).tocsr()  # every row has its diagonal
    structure.sort_indices()
    width, rows, slot, inside, size = ell_layout(structure.indptr, width)
    overflow = int((~inside).sum())
    entry = np.empty(structure.nnz, np.int64)  # entries in structure order
    entry[inside] = rows[inside] * width + slot[inside]
    entry[~inside] = n * width + np.arange(overflow)
    keys = rows * n + structure.indices  # ascending: rows in order, sorted columns within each

    def entry_of(i, j):  # in int64: past 46,341 vertices, i * n leaves int32 (SciPy's indices are int32)
        i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
        return entry[np.searchsorted(keys, i * n + j)].astype(np.int32)

    cols = np.tile(np.arange(n)[:, None], (1, width))
    cols[rows[inside], slot[inside]] = structure.indices[inside]
    pad = np.zeros(size - overflow, np.int64)
    values = np.zeros(n * width + size)
    lap_sq = (lap @ lap).tocoo()
    values[entry_of(lap_sq.row, lap_sq.col)] = lap_sq.data
    return ElasticPattern(
        cols=jnp.asarray(cols, jnp.int32),
        extra_rows=jnp.asarray(np.concatenate([rows[~inside], pad]), jnp.int32),
        extra_cols=jnp.asarray(np.concatenate([structure.indices[~inside], pad]), jnp.int32),
        laplacian_sq=jnp.asarray(values, dtype),
        diagonal=jnp.asarray(entry_of(np.arange(n), np.arange(n)), jnp.int32),
        edge_slots=jnp.asarray(np.stack([entry_of(edges[:, 0], edges[:, 1]), entry_of(edges[:, 1], edges[:, 0])], 1)),
    )


def elastic_hessian(x, rest: RestShape, pattern: ElasticPattern, *, bending=1.0, pull=1e-2, exact=False):
    """``v -> H v`` for the elastic energy at ``x``, assembled into 3 x 3 blocks once (a product is
    then gathers and multiply-adds, no scatter: 0.32 ms against 0.65 ms for the JVP-VJP operator on
    the trefoil knot, plus 2 ms to assemble; since done slot by slot, 0.18-0.29 ms on the pretzel).

    ``exact=False``: the operator of [`elastic_gauss_newton`][tritri_jax._elastic.elastic_gauss_newton]
    (PSD); ``exact=True`` (a bool or a traced flag): the exact Hessian, in which a compressed edge's
    curvature across its direction is negative. Per edge $e = (i, j)$, $d = x_i - x_j$,
    $r = (|d| - l) / l$:
    $\\frac{2}{l^2} n n^T + \\frac{2 r}{l |d|} (I - n n^T)$ ($r$ clamped at 0 for Gauss-Newton) on
    the $(i, i)$ and $(j, j)$ blocks, minus it on $(i, j)$ and $(j, i)$; the bending and pull add
    $\\frac{2}{h^2}(w_b L^2 + w_p I)$ per coordinate."""
    e = rest.edges
    d = x[e[:, 0]] - x[e[:, 1]]
    length = safe_norm(d)
    positive = length > 0
    n = d / jnp.where(positive, length, 1)[:, None]
    rest_length = rest.rest_lengths
    strain = (length - rest_length) / rest_length
    strain = jnp.where(exact, strain, jnp.maximum(strain, 0))
    across = jnp.where(positive, 2 * strain / (rest_length * jnp.where(positive, length, 1)), 0)
    outer = n[:, :, None] * n[:, None, :]
    eye = jnp.eye(3, dtype=x.dtype)
    spring = (2 / rest_length**2)[:, None, None] * outer + across[:, None, None] * (eye - outer)
    if rest.live is not None:
        spring = jnp.where(rest.live[:, None, None], spring, 0)
    spring = jnp.moveaxis(spring, 0, -1)  # (3, 3, E)
    scalar = (2 / rest.h**2) * (bending * pattern.laplacian_sq)
    scalar = scalar.at[pattern.diagonal].add(2 * pull / rest.h**2)
    # (3, 3, entries): coordinate-major, so a product is nine long multiply-adds per slot (as an
    # einsum over (V, w, 3, 3) blocks it took 1.1 ms on the trefoil knot, this way 0.32-0.37 ms)
    blocks = eye[:, :, None] * scalar
    i, j = e[:, 0], e[:, 1]
    blocks = blocks.at[:, :, pattern.diagonal[i]].add(spring).at[:, :, pattern.diagonal[j]].add(spring)
    blocks = blocks.at[:, :, pattern.edge_slots[:, 0]].add(-spring).at[:, :, pattern.edge_slots[:, 1]].add(-spring)
    num_vertices, width = pattern.cols.shape
    inner = blocks[:, :, : num_vertices * width].reshape(3, 3, num_vertices, width)
    outer = blocks[:, :, num_vertices * width :]

    def product(v):
        if width > UNROLLED_SLOTS:
            gathered = v.T[:, pattern.cols]  # (3, V, w)
            rows = [sum(inner[a, b] * gathered[b] for b in range(3)) for a in range(3)]
            out = jnp.stack([jnp.sum(row, axis=1) for row in rows], axis=1)
        else:
            out = 0  # slot by slot (0.18-0.29 ms on the pretzel, against 0.40-0.52 ms the other way)
            for slot in range(width):
                g = v[pattern.cols[:, slot]]
                out = out + jnp.stack([sum(inner[a, b, :, slot] * g[:, b] for b in range(3)) for a in range(3)], axis=1)
        if outer.shape[-1]:
            g = v[pattern.extra_cols]
            terms = jnp.stack([sum(outer[a, b] * g[:, b] for b in range(3)) for a in range(3)], axis=1)
            out = out + jax.ops.segment_sum(terms, pattern.extra_rows, num_segments=num_vertices)
        return out

    return product

"""Layer 4: an algebraic multigrid V-cycle, used as the preconditioner of phase 2's CG solves.

Phase 2's Hessian is dominated by a constant part: the bending term $w_b L^T L / h^2$ (stiff, local)
against the pull $w_p / h^2$ (weak, global), a condition number of ~$10^4$; unpreconditioned CG
ran into its cap of 100 iterations on every Newton step. The hierarchy is built once, on the host,
by smoothed aggregation (``pyamg``) from the scalar matrix that acts on each coordinate alike; the
V-cycle then runs inside ``jit`` (damped Jacobi smoothing, an exact solve on the coarsest level), so
it is symmetric positive definite and can precondition CG.

Sparse matrices are stored in ELLPACK form (every row padded to the longest one), so a product is
gathers and a row sum (``Ell``): no scatter, which is slow on CPUs under XLA.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse as sp

from ._sizes import bucket, shape_bucket, slot_bucket
from ._types import Array


class Ell(eqx.Module):
    """A sparse matrix in ELLPACK form: row ``i`` of the product is ``sum_k data[i, k] * x[cols[i, k]]``,
    plus ``extra``: the entries of rows far fuller than the rest (a UV sphere's poles), as
    ``(rows, cols, data)`` summed by a scatter, so that a few such rows do not widen every row."""

    cols: Array  # (n, k) int32; padding entries point at row i itself with data 0
    data: Array  # (n, k)
    extra: tuple = ()  # (rows, cols, data), each (m,); padding entries have data 0

    def __call__(self, x):
        width = self.cols.shape[1]
        if width > UNROLLED_SLOTS:
            y = jnp.einsum("nk,nk...->n...", self.data, x[self.cols])
        else:
            data = self.data.reshape(self.data.shape + (1,) * (x.ndim - 1))
            y = sum(data[:, k] * x[self.cols[:, k]] for k in range(width))
        if self.extra:
            rows, cols, values = self.extra
            values = values.reshape(values.shape + (1,) * (x.ndim - 1))
            y = y + jax.ops.segment_sum(values * x[cols], rows, num_segments=self.cols.shape[0])
        return y


# Up to this width a product is a sum over the slots of gathered rows, one gather per slot (also the
# elastic Hessian's, ``_elastic.elastic_hessian``): on the pretzel's fine level (2,304 x 25, three
# columns) 0.05-0.11 ms, against 0.21-0.32 ms as one (n, k, 3) gather and an einsum. Wider ones (the
# restriction to the coarse level: 96 slots for 95 rows) take the einsum: unrolled they added a
# second of compiling to save 0.03 ms.
UNROLLED_SLOTS = 32


def ell_width(counts: np.ndarray, share: float = 0.9, spread: float = 1.5, method: str = "higher") -> int:
    """Slots per row of an ELLPACK layout with an overflow (``counts``: entries per row): the fullest
    row's count, unless it holds more than ``spread`` times the count that a ``share`` of the rows
    hold at most (NumPy's quantile ``method``), then that count; the fuller rows' other entries
    overflow. By default 1.5x and 90 %.

    A UV sphere's poles have ~sqrt(F) neighbours and the rows within two rings of them are that wide
    too, 1-2 % of the rows: with the slots for 99 % of the rows, the multigrid's finest operator (the
    stiffness, a two-ring pattern) of a 20k-face UV sphere had 256 slots a row for a median of 19,
    and a V-cycle cost 30 ms (the elastic Hessian's product, with 24 slots, 1.8 ms)."""
    most = max(int(counts.max(initial=0)), 1)
    typical = max(int(np.quantile(counts, share, method=method)) if len(counts) else 1, 1)
    return typical if most > spread * typical else most


def ell_layout(indptr: np.ndarray, width=None, rule: tuple = ()):
    """Where the entries of a CSR row structure (its ``indptr``) go in an ELLPACK layout with an
    overflow: ``(width, rows, slots, inside, size)``, the slots per row (``ell_width`` with ``rule``
    its arguments after the counts, then ``width`` of that, a bucket, if given), each entry's row
    and slot, whether it has a slot, and the overflow's length: the entries without a slot, rounded
    up by ``_sizes.bucket`` (0 without any).

    The overflow's length takes powers of two, not the mesh-shape ladder: cutting 2.5 % of the faces
    off a 4.8k-face pair of UV spheres took its stiffness's overflow from 7,108 to 6,000 entries,
    7,168 and 6,144 on that ladder, and phase 2 compiled again for a mesh of the same bucket."""
    counts = np.diff(indptr)
    slots_per_row = (width or (lambda k: k))(ell_width(counts, *rule))
    rows = np.repeat(np.arange(len(counts)), counts)
    slots = np.arange(indptr[-1]) - np.repeat(indptr[:-1], counts)
    inside = slots < slots_per_row
    overflow = int((~inside).sum())
    return slots_per_row, rows, slots, inside, bucket(overflow) if overflow else 0


def ell(matrix, dtype, width=None, rows=None, rule: tuple = ()) -> Ell:
    """``matrix`` (any scipy sparse matrix) in ELLPACK form, as many slots per row as its fullest row
    has; ``width``: a function of that count giving the slot count to use instead (a bucket);
    ``rows``: the row count to pad to (shape padding: rows of zeros).

    Where the fullest rows are far fuller than most (``ell_width``, with ``rule`` its arguments
    after the counts: vertices of very high valence), the rest of their entries go to ``Ell.extra``
    (``ell_layout``): on a 31k-face UV sphere, whose poles have 124 neighbours, the Laplacian's
    slots fell from 128 to 8."""
    csr = sp.csr_matrix(matrix)
    if rows is not None and rows > csr.shape[0]:
        csr = sp.vstack([csr, sp.csr_matrix((rows - csr.shape[0], csr.shape[1]))]).tocsr()
    width, rows, slot, inside, size = ell_layout(csr.indptr, width, rule)
    cols = np.tile(np.arange(csr.shape[0])[:, None], (1, width))
    data = np.zeros((csr.shape[0], width))
    cols[rows[inside], slot[inside]], data[rows[inside], slot[inside]] = csr.indices[inside], csr.data[inside]
    extra = ()
    if size:
        pad = size - int((~inside).sum())
        extra = (
            jnp.asarray(np.concatenate([rows[~inside], np.zeros(pad, int)]), jnp.int32),
            jnp.asarray(np.concatenate([csr.indices[~inside], np.zeros(pad, int)]), jnp.int32),
            jnp.asarray(np.concatenate([csr.data[~inside], np.zeros(pad)]), dtype),
        )
    return Ell(jnp.asarray(cols, jnp.int32), jnp.asarray(data, dtype), extra)


class Multigrid(eqx.Module):
    """A smoothed-aggregation hierarchy: per level (finest first, coarsest excluded) the operator,
    the prolongation to it, the restriction from it and the Jacobi weights; then the coarsest
    level's inverse."""

    operators: tuple
    prolongations: tuple
    restrictions: tuple
    jacobi: tuple  # omega / diagonal, per level
    coarse_inverse: Array
    sweeps: int = eqx.field(static=True)


def multigrid(
    matrix, *, dtype=jnp.float64, max_coarse: int = 200, sweeps: int = 1, padded_rows: int | None = None
) -> Multigrid:
    """Build the hierarchy of the sparse symmetric positive definite ``matrix`` (host side, once).

    ``max_coarse``: the largest coarsest level, solved exactly (a dense pseudo-inverse); ``sweeps``: Jacobi
    sweeps before and after each coarse correction. ``padded_rows``: the finest level's row count
    with shape padding (``_sizes``); the coarser levels are then padded to ``shape_bucket`` rows and
    every matrix's slots to ``slot_bucket``, all with zeros, so that the hierarchies of meshes of
    nearby sizes have one shape. The V-cycle returns zeros on the padding rows."""
    import pyamg  # here, not at the top: it adds ~0.13 s to every start of the CLI, which ``check`` never uses

    matrix = sp.csr_matrix(matrix, dtype=np.float64)
    # pyamg estimates spectral radii from numpy's global generator: seeded so that the hierarchy, and
    # the solver's path, are reproducible (runs differed, one stalled), and the caller's state restored
    state = np.random.get_state()
    try:
        np.random.seed(0)
        levels = pyamg.smoothed_aggregation_solver(matrix, max_coarse=max_coarse).levels
        jacobi = []
        for level in levels[:-1]:
            # A coarse level of a mesh in many small pieces (a soup of separate triangles) can hold
            # empty aggregates: rows of zeros, left out of the smoothing (weight 0).
            diagonal = level.A.diagonal()
            inverse = np.divide(1.0, diagonal, out=np.zeros_like(diagonal), where=diagonal > 0)
            radius = pyamg.util.linalg.approximate_spectral_radius(sp.diags(inverse) @ level.A)
            radius = radius if np.isfinite(radius) and radius > 0 else 1.0
            jacobi.append(jnp.asarray((4 / 3) * inverse / radius, dtype))  # damped Jacobi, omega = 4 / (3 rho)
    finally:
        np.random.set_state(state)
    # The pseudo-inverse: the coarsest level is singular where its aggregates are (see above).
    coarse_inverse = scipy.linalg.pinvh(levels[-1].A.toarray())
    if padded_rows is None:
        sizes, width = [level.A.shape[0] for level in levels], None
    else:
        sizes, width = [padded_rows] + [shape_bucket(level.A.shape[0]) for level in levels[1:]], slot_bucket

    def padded(matrix, cols):  # more columns of zeros (the rows are ``ell``'s)
        matrix = sp.csr_matrix(matrix)
        return sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=(matrix.shape[0], cols))

    coarse = np.zeros((sizes[-1], sizes[-1]))
    coarse[: len(coarse_inverse), : len(coarse_inverse)] = coarse_inverse
    fine, coarser = sizes[:-1], sizes[1:]
    # The transfers keep slots for 99 % of their rows (an overflow for 2x that): their rows are
    # aggregates, whose sizes vary, and at 90 % / 1.5x meshes of one bucket got an overflow or not
    # (a different structure, a second compile of phase 2); the operators' poles need the 90 %.
    transfer = (0.99, 2.0, "lower")
    return Multigrid(
        operators=tuple(ell(padded(level.A, n), dtype, width, n) for level, n in zip(levels, fine, strict=False)),
        prolongations=tuple(
            ell(padded(level.P, m), dtype, width, n, transfer)
            for level, n, m in zip(levels, fine, coarser, strict=False)
        ),
        restrictions=tuple(
            ell(padded(level.P.T, n), dtype, width, m, transfer)
            for level, n, m in zip(levels, fine, coarser, strict=False)
        ),
        jacobi=tuple(jnp.pad(w, (0, n - w.shape[0])) for w, n in zip(jacobi, fine, strict=False)),
        coarse_inverse=jnp.asarray(coarse, dtype),
        sweeps=sweeps,
    )


def v_cycle(hierarchy: Multigrid, b):
    """One symmetric V-cycle from zero: an approximation of ``A^{-1} b`` (``b`` is ``(n,)`` or ``(n, c)``)."""

    def solve(level, b):
        if level == len(hierarchy.operators):
            return jnp.tensordot(hierarchy.coarse_inverse, b, axes=1)
        a, weight = hierarchy.operators[level], hierarchy.jacobi[level]
        weight = weight.reshape(weight.shape + (1,) * (b.ndim - 1))
        x = weight * b
        for _ in range(hierarchy.sweeps - 1):
            x = x + weight * (b - a(x))
        coarse = solve(level + 1, hierarchy.restrictions[level](b - a(x)))
        x = x + hierarchy.prolongations[level](coarse)
        for _ in range(hierarchy.sweeps):
            x = x + weight * (b - a(x))
        return x

    return solve(0, b)

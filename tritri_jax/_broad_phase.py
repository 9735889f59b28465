"""Layer 2: a uniform spatial hash grid (Pabst et al. 2010) that returns candidate face pairs.

Built with sorts and segment operations inside ``jit``, fixed shapes throughout:

1. Each face's AABB is mapped to integer cells of size ``cell_size``. A face no larger than a
   cell covers at most 2 x 2 x 2 cells, so it gets 8 entry slots (unused ones masked). The rare
   faces that span more than two cells along some axis ("big" faces) are not inserted at all;
   they are tested against every face's AABB instead, so a huge triangle costs ``O(F)`` slots
   rather than a number of cells that grows with its area.
2. Entries are sorted by a hash of their cell; equal hashes form runs. Every pair of entries in a
   run is a *raw* pair. A raw pair is kept only if both entries really are the same cell (hash
   collisions), that cell is the one holding the lower corner of the two AABBs' overlap (so each
   overlapping pair is emitted exactly once, without a global dedup sort), the AABBs overlap, and
   the faces do not share an edge (or, in the paper's mode, any vertex).
3. Raw pairs are enumerated in fixed-size chunks by a ``lax.while_loop`` (``stream_compact``) and compacted into the
   ``capacity`` output slots. ``count`` is the true number of candidates even past ``capacity``,
   so the eager caller can retry with exactly enough room.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._types import Array, Bool, Faces, Int, Vertices

_CHUNK = 1 << 16
_MAX_BIG_FACES = 16
_EMPTY = jnp.iinfo(jnp.int32).max


class CandidatePairs(NamedTuple):
    """Candidate face pairs from the broad phase.

    - ``pairs``: ``(capacity, 2)`` int32, rows ``(i, j)`` with ``i < j``; rows past ``count`` are ``-1``.
    - ``count``: number of candidates found (may exceed ``capacity``).
    - ``overflowed``: ``count > capacity``: some candidates were not stored; retry with more room.
    """

    pairs: Int[Array, "capacity 2"]
    count: Int[Array, ""]
    overflowed: Bool[Array, ""]


def face_bounds(vertices: Vertices, faces: Faces):
    """Axis-aligned bounding boxes ``(lo, hi)`` of every face, each ``(F, 3)``."""
    tri = vertices[faces]
    return tri.min(axis=1), tri.max(axis=1)


def default_cell_size(lo, hi):
    """Cell size used when none is given.

    The larger of twice the median face extent and the 17th-largest face extent (extent: the
    largest side of a face's AABB). So at most 16 faces are "big" (tested against every face), and
    a mesh of similar-sized faces gets cells about twice the size of a face. Meshes that mix a
    large share of big and small faces are better served by an explicit ``cell_size``.
    """
    extent = jnp.max(hi - lo, axis=1)
    n = extent.shape[0]
    ordered = jnp.sort(extent)
    median = ordered[n // 2]
    kth = ordered[max(n - 1 - _MAX_BIG_FACES, 0)]
    size = jnp.maximum(2 * median, kth)
    # Never below a 2^-20 fraction of the mesh, so cell coordinates stay small integers.
    span = jnp.max(hi.max(axis=0) - lo.min(axis=0))
    return jnp.maximum(size, jnp.maximum(span, jnp.finfo(lo.dtype).tiny) * 2.0**-20)


def _share_count(fa, fb):
    return jnp.sum(fa[..., :, None] == fb[..., None, :], axis=(-1, -2))


def _hash(cell):
    c = cell.astype(jnp.uint32)
    h = c[..., 0] * jnp.uint32(73856093) ^ c[..., 1] * jnp.uint32(19349663) ^ c[..., 2] * jnp.uint32(83492791)
    return (h >> 1).astype(jnp.int32)  # non-negative, below the _EMPTY sentinel


def candidate_pairs(
    vertices: Vertices,
    faces: Faces,
    *,
    capacity: int,
    cell_size=None,
    skip_vertex_adjacent: bool = False,
    include_shared_edges: bool = False,
) -> CandidatePairs:
    """Face pairs whose AABBs overlap and which share no edge: a superset of the crossing pairs.

    Jittable with ``capacity`` static. Nothing is dropped silently: if more than ``capacity``
    candidates exist, ``overflowed`` is set and ``count`` says how many there are.

    **Arguments:**

    - ``vertices``: ``(V, 3)`` float; ``faces``: ``(F, 3)`` int.
    - ``capacity``: number of output slots (static).
    - ``cell_size``: grid cell size; default [`default_cell_size`][tritri_jax._broad_phase.default_cell_size].
    - ``skip_vertex_adjacent``: also skip pairs sharing a single vertex (the paper's behaviour).
    - ``include_shared_edges``: keep pairs sharing an edge (they can only intersect by being folded
      flat onto each other, which the coplanar test detects).

    **Returns:** [`CandidatePairs`][tritri_jax.CandidatePairs].

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> vertices = jnp.array([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, -1], [0.3, 0.2, 1], [0.2, 0.3, 1]])
    >>> faces = jnp.array([[0, 1, 2], [3, 4, 5]])
    >>> result = tt.candidate_pairs(vertices, faces, capacity=4)
    >>> int(result.count), result.pairs[0].tolist()
    (1, [0, 1])

    ```
    """
    faces = faces.astype(jnp.int32)
    num_faces = faces.shape[0]
    empty = CandidatePairs(jnp.full((capacity, 2), -1, jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), bool))
    if num_faces < 2:
        return empty
    lo, hi = face_bounds(vertices, faces)
    if cell_size is None:
        cell_size = default_cell_size(lo, hi)
    origin = lo.min(axis=0)
    limit = jnp.iinfo(jnp.int32).max // 4
    cell_lo = jnp.clip(jnp.floor((lo - origin) / cell_size), 0, limit).astype(jnp.int32)
    cell_hi = jnp.clip(jnp.floor((hi - origin) / cell_size), 0, limit).astype(jnp.int32)
    big = jnp.any(cell_hi - cell_lo > 1, axis=1)

    # 1. Entries: 8 per face, masked.
    offsets = jnp.array([[(i >> 0) & 1, (i >> 1) & 1, (i >> 2) & 1] for i in range(8)], jnp.int32)
    cells = cell_lo[:, None, :] + offsets[None]  # (F, 8, 3)
    used = jnp.all(cells <= cell_hi[:, None, :], axis=-1) & ~big[:, None]
    keys = jnp.where(used, _hash(cells), _EMPTY).reshape(-1)
    entry_face = jnp.repeat(jnp.arange(num_faces, dtype=jnp.int32), 8)
    order = jnp.argsort(keys)
    keys = keys[order]
    entry_face = entry_face[order]
    entry_cell = cells.reshape(-1, 3)[order]

    # 2. Runs of equal keys; entry p pairs with the entries before it in its run.
    position = jnp.arange(keys.shape[0], dtype=jnp.int32)
    is_start = jnp.concatenate([jnp.ones(1, bool), keys[1:] != keys[:-1]])
    run_start = lax.cummax(jnp.where(is_start, position, 0))
    per_entry = jnp.where(keys != _EMPTY, position - run_start, 0)
    grid_ends = jnp.cumsum(per_entry)
    grid_total = grid_ends[-1]
    grid_starts = grid_ends - per_entry

    big_faces = jnp.nonzero(big, size=num_faces, fill_value=0)[0].astype(jnp.int32)
    num_big = jnp.sum(big).astype(jnp.int32)
    total = grid_total + num_big * num_faces

    def keep(fi, fj, dedup_ok):
        overlap = jnp.all((lo[fi] <= hi[fj]) & (lo[fj] <= hi[fi]), axis=-1)
        shared = _share_count(faces[fi], faces[fj])
        most = 1 if skip_vertex_adjacent else (3 if include_shared_edges else 2)
        return dedup_ok & overlap & (shared < most) & (fi != fj)

    def decode(slot):
        in_grid = slot < grid_total
        p = jnp.clip(jnp.searchsorted(grid_ends, slot, side="right"), 0, keys.shape[0] - 1)
        q = run_start[p] + (slot - grid_starts[p])
        q = jnp.clip(q, 0, keys.shape[0] - 1)
        fa, fb = entry_face[q], entry_face[p]
        home = jnp.maximum(cell_lo[fa], cell_lo[fb])
        grid_ok = jnp.all(entry_cell[q] == entry_cell[p], axis=-1) & jnp.all(entry_cell[p] == home, axis=-1)
        # big-face slots: big face b against every face o (big-big pairs once: o not big, or o > b)
        rest = jnp.maximum(slot - grid_total, 0)
        b = big_faces[jnp.clip(rest // num_faces, 0, num_faces - 1)]
        o = (rest % num_faces).astype(jnp.int32)
        big_ok = ~big[o] | (o > b)
        fi = jnp.where(in_grid, fa, b)
        fj = jnp.where(in_grid, fb, o)
        ok = (slot < total) & keep(fi, fj, jnp.where(in_grid, grid_ok, big_ok))
        return jnp.minimum(fi, fj), jnp.maximum(fi, fj), ok

    def emit(slot):
        first, second, ok = decode(slot)
        return ok, jnp.stack([first, second], axis=1)

    chunk = min(_CHUNK, max(1024, 8 * num_faces))
    pairs, count = stream_compact(emit, total, chunk, empty.pairs)
    return CandidatePairs(pairs=pairs, count=count, overflowed=count > capacity)


def stream_compact(emit, total, chunk: int, out):
    """Run ``emit`` over slots ``0 .. total-1`` in chunks (a ``lax.while_loop``), appending the rows it
    keeps to the buffers ``out`` (a PyTree of arrays with a common leading size, the capacity).

    ``emit(slots)`` returns ``(keep, rows)`` for an ``(chunk,)`` array of slot indices (slots at or
    past ``total`` must come back with ``keep`` false). Returns ``(out, count)``: ``count`` is the
    number of rows kept, which may exceed the capacity; rows past it are dropped, never overwritten.
    """
    capacity = jax.tree_util.tree_leaves(out)[0].shape[0]

    def body(state):
        start, out, count = state
        keep, rows = emit(start + jnp.arange(chunk, dtype=jnp.int32))
        where = count + jnp.cumsum(keep) - 1
        where = jnp.where(keep & (where < capacity), where, capacity)  # capacity: dropped by mode="drop"
        out = jax.tree_util.tree_map(lambda buffer, row: buffer.at[where].set(row, mode="drop"), out, rows)
        return start + chunk, out, count + jnp.sum(keep, dtype=jnp.int32)

    start = (jnp.zeros((), jnp.int32), out, jnp.zeros((), jnp.int32))
    _, out, count = lax.while_loop(lambda s: s[0] < total, body, start)
    return out, count


def brute_force_candidates(vertices, faces, *, skip_vertex_adjacent=False, include_shared_edges=False):
    """All AABB-overlapping, non-adjacent pairs by an ``O(F^2)`` scan (for tests and tiny meshes)."""
    lo, hi = face_bounds(vertices, faces)
    overlap = jnp.all((lo[:, None] <= hi[None]) & (lo[None] <= hi[:, None]), axis=-1)
    shared = _share_count(faces[:, None, :], faces[None, :, :])
    most = 1 if skip_vertex_adjacent else (3 if include_shared_edges else 2)
    ok = overlap & (shared < most) & jnp.triu(jnp.ones_like(overlap), 1)
    return jnp.argwhere(ok)

"""Layer 2: a uniform spatial hash grid (Pabst et al. 2010) in two axes, swept along the third.

Built with sorts and segment operations inside ``jit``, fixed shapes throughout:

1. The sweep axis is the mesh's longest one; the other two ("across") carry a grid of cells of
   size ``cell_size``, i.e. columns along the sweep axis. A face no larger than a cell across
   covers at most 2 x 2 columns, so it gets 4 entry slots (unused ones masked). The rare faces
   that span more than two cells across ("big" faces) are not inserted at all; they are tested
   against every face's AABB instead, so a huge triangle costs ``O(F)`` slots rather than a
   number of cells that grows with its area. Along the sweep axis faces may be any length.
2. Faces are ranked by where their box starts along the sweep axis, and entries are numbered
   ``4 * rank + slot``. Entries are sorted by a hash of their column (packed with the entry
   number into one int64 when 64-bit integers are on: XLA's CPU sort is about five times faster
   on one integer array than on key/index pairs), so each column's entries stay in sweep order.
3. Each entry pairs with the later entries of its column that start before its box ends along the
   sweep axis (a bisection per entry finds the last one): a sweep-and-prune inside every column.
   Such a *raw* pair is kept only if both entries really are the same column (hash collisions),
   that column holds the lower corner of the two boxes' overlap (so each overlapping pair is
   emitted exactly once, without a global dedup sort), the boxes overlap, and the faces do not
   share an edge (or, in the paper's mode, any vertex).
4. Raw pairs are enumerated in fixed-size chunks by a ``lax.while_loop`` (``stream_expand``): each
   slot finds its entry by a scatter and a running maximum, not a binary search, and the kept pairs
   are compacted into the ``capacity`` output slots. ``count`` is the true number of candidates
   even past ``capacity``, so the eager caller can retry with exactly enough room.

Measured on a crumpled sheet of 200k faces (2 cores): 5.4M raw pairs for 1.8M candidates,
0.45-0.55 s in all. A 3-D grid of 2 x 2 x 2 slots per face, every pair of a cell a raw pair, gave
12.3M raw pairs and took 1.15 s; the sweep removes the pairs that share a cell but not an extent
along the sweep axis.
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

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> vertices = jnp.array([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, -1], [0.3, 0.2, 1], [0.2, 0.3, 1]])
    >>> faces = jnp.array([[0, 1, 2], [3, 4, 5]])
    >>> found = tt.candidate_pairs(vertices, faces, capacity=4)
    >>> found.pairs[: int(found.count)].tolist(), bool(found.overflowed)
    ([[0, 1]], False)

    ```
    """

    pairs: Int[Array, "capacity 2"]
    count: Int[Array, ""]
    overflowed: Bool[Array, ""]


def face_bounds(vertices: Vertices, faces: Faces):
    """Axis-aligned bounding boxes ``(lo, hi)`` of every face, each ``(F, 3)``."""
    tri = vertices[faces]
    return tri.min(axis=1), tri.max(axis=1)


def default_cell_size(lo, hi, num_faces=None):
    """Cell size used when none is given.

    The larger of twice the median face extent and the 17th-largest face extent (extent: the
    largest side of a face's AABB). So at most 16 faces are "big" (tested against every face), and
    a mesh of similar-sized faces gets cells about twice the size of a face. Meshes that mix a
    large share of big and small faces are better served by an explicit ``cell_size``.
    ``num_faces`` (may be traced): only the first that many rows are faces, the rest padding.
    """
    extent = jnp.abs(jnp.max(hi - lo, axis=1))
    n = extent.shape[0]
    if num_faces is not None:  # padding sorts last and is never indexed
        extent = jnp.where(jnp.arange(n) < num_faces, extent, jnp.finfo(extent.dtype).max)
        n = jnp.asarray(num_faces, jnp.int32)
    # Non-negative floats order as their bit patterns, and XLA's CPU sort is several times faster
    # on integers than on floats.
    as_int = jnp.int64 if extent.dtype == jnp.float64 else jnp.int32
    ordered = lax.bitcast_convert_type(jnp.sort(lax.bitcast_convert_type(extent, as_int)), extent.dtype)
    median = ordered[n // 2]
    kth = ordered[jnp.maximum(n - 1 - _MAX_BIG_FACES, 0)]
    size = jnp.maximum(2 * median, kth)
    # Never below a 2^-20 fraction of the mesh, so cell coordinates stay small integers.
    span = jnp.max(hi.max(axis=0) - lo.min(axis=0))
    return jnp.maximum(size, jnp.maximum(span, jnp.finfo(lo.dtype).tiny) * 2.0**-20)


def _share_count(fa, fb):
    return jnp.sum(fa[..., :, None] == fb[..., None, :], axis=(-1, -2))


def _hash(cell):
    c = cell.astype(jnp.uint32)
    h = c[..., 0] * jnp.uint32(73856093) ^ c[..., 1] * jnp.uint32(19349663)
    return (h >> 1).astype(jnp.int32)  # non-negative, below the _EMPTY sentinel


def candidate_pairs(
    vertices: Vertices,
    faces: Faces,
    *,
    capacity: int,
    cell_size=None,
    skip_vertex_adjacent: bool = False,
    include_shared_edges: bool = False,
    padding=0.0,
    num_faces=None,
    part=None,
) -> CandidatePairs:
    """Face pairs whose AABBs overlap and which share no edge: a superset of the crossing pairs.

    Jittable with ``capacity`` static. Nothing is dropped silently: if more than ``capacity``
    candidates exist, ``overflowed`` is set and ``count`` says how many there are.

    **Arguments:**

    - ``vertices``: ``(V, 3)`` float; ``faces``: ``(F, 3)`` int.
    - ``capacity``: number of output slots (static).
    - ``cell_size``: grid cell size (the grid spans the two axes across the mesh's longest one,
      along which the boxes are swept); by default the larger of twice the median face extent (the
      largest side of a face's box) and the 17th-largest extent, so at most 16 faces are "big"
      (tested against every face) and similar-sized faces get cells about twice their size.
    - ``skip_vertex_adjacent``: also skip pairs sharing a single vertex (the paper's behaviour).
    - ``include_shared_edges``: keep pairs sharing an edge (they can only intersect by being folded
      flat onto each other, which the coplanar test detects).
    - ``padding``: grow every box by this length on each side first, so that the pairs closer than
      ``2 * padding`` are candidates too (a neighbour list for distance-based energies).
    - ``num_faces`` (may be traced): only the first ``num_faces`` rows of ``faces`` are faces; the
      rest is shape padding that no pair involves and that changes nothing else (default: all).
    - ``part``: ``(index, count)`` (``index`` may be traced): enumerate only the ``index``-th of
      ``count`` equal shares of the grid's raw pairs, so that ``count`` devices each find a disjoint
      part of the candidates (``count`` and ``capacity`` are then this part's). Default: all.

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
    rows = faces.shape[0]
    empty = CandidatePairs(jnp.full((capacity, 2), -1, jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), bool))
    if rows < 2:
        return empty
    real = jnp.ones(rows, bool) if num_faces is None else jnp.arange(rows) < num_faces
    lo, hi = face_bounds(vertices, faces)
    # Padding rows take face 0's box: they move no bound, axis or scale, and are never inserted.
    lo, hi = (jnp.where(real[:, None], x, x[:1]) for x in (lo - padding, hi + padding))
    if cell_size is None:
        cell_size = default_cell_size(lo, hi, num_faces)
    origin = lo.min(axis=0)
    # Sweep along the mesh's longest axis; the grid is on the other two ("across").
    axes = (jnp.argmax(hi.max(axis=0) - origin) + jnp.arange(3)) % 3
    lo_t, hi_t, faces_t = lo[:, axes].T, hi[:, axes].T, faces.T
    limit = jnp.iinfo(jnp.int32).max // 4
    cell_lo = jnp.clip(jnp.floor((lo[:, axes[1:]] - origin[axes[1:]]) / cell_size), 0, limit).astype(jnp.int32)
    cell_hi = jnp.clip(jnp.floor((hi[:, axes[1:]] - origin[axes[1:]]) / cell_size), 0, limit).astype(jnp.int32)
    big = jnp.any(cell_hi - cell_lo > 1, axis=1) & real

    # 1. Faces in sweep order; reach[f]: how many faces start (along the sweep axis) before f ends.
    # Positions are quantised to 2^30 steps (integer sorts are several times faster than float
    # ones); quantising is monotone, so the order and reach are a superset of the exact ones, and
    # the exact test along the sweep axis is made per pair.
    scale = 2.0**30 / jnp.maximum(hi_t[0].max() - origin[axes[0]], jnp.finfo(lo.dtype).tiny)
    start_key, end_key = (
        jnp.clip(jnp.floor((x - origin[axes[0]]) * scale), 0, 2**30).astype(jnp.int32) for x in (lo_t[0], hi_t[0])
    )
    sorted_start, by_start = _sort_keys(start_key)
    reach = jnp.searchsorted(sorted_start, end_key, side="right").astype(jnp.int32)

    # 2. Entries: 4 per face in sweep order (entry id = 4 * rank + slot), sorted by column hash, so
    # each column's entries stay in sweep order.
    offsets = jnp.array([[0, 0], [1, 0], [0, 1], [1, 1]], jnp.int32)
    cells = cell_lo[by_start][:, None, :] + offsets[None]  # (F, 4, 2)
    used = jnp.all(cells <= cell_hi[by_start][:, None, :], axis=-1) & (real & ~big)[by_start][:, None]
    keys, entry = _sort_keys(jnp.where(used, _hash(cells), _EMPTY).reshape(-1))
    entry_face = by_start[entry // 4]
    entry_slot = entry % 4
    entry_cell = tuple(c[entry] for c in cells.reshape(-1, 2).T)

    # 3. Each entry pairs with the later entries of its column that start before it ends.
    num_entries = keys.shape[0]
    position = jnp.arange(num_entries, dtype=jnp.int32)
    is_end = jnp.concatenate([keys[1:] != keys[:-1], jnp.ones(1, bool)])
    run_end = lax.cummin(jnp.where(is_end, position + 1, num_entries), reverse=True)
    live = keys != _EMPTY
    stop = _first_at_least(entry, position + 1, jnp.where(live, run_end, position + 1), 4 * reach[entry_face])
    per_entry = stop - position - 1
    most = 1 if skip_vertex_adjacent else (3 if include_shared_edges else 2)

    def topology_ok(fi, fj):
        corners_i = [faces_t[c][fi] for c in range(3)]
        corners_j = [faces_t[c][fj] for c in range(3)]
        return sum((ci == cj).astype(jnp.int32) for ci in corners_i for cj in corners_j) < most

    def boxes_meet(fi, fj, axes):
        ok = jnp.ones(fi.shape, bool)
        for c in axes:
            ok &= (lo_t[c][fi] <= hi_t[c][fj]) & (lo_t[c][fj] <= hi_t[c][fi])
        return ok

    def emit_grid(p, k):
        q = jnp.minimum(p + 1 + k, num_entries - 1)
        fi, fj = entry_face[p], entry_face[q]
        # Same cell (not just the same hash), and that cell holds the lower corner of the boxes'
        # overlap: entry cell = home cell + slot offset, so this is "no axis where both are offset".
        ok = (entry_cell[0][p] == entry_cell[0][q]) & (entry_cell[1][p] == entry_cell[1][q])
        ok &= (entry_slot[p] & entry_slot[q]) == 0
        ok &= boxes_meet(fi, fj, (0, 1, 2)) & topology_ok(fi, fj)
        return ok, jnp.stack([jnp.minimum(fi, fj), jnp.maximum(fi, fj)], axis=1)

    def emit_big(b, k):
        # A big face against every face; two big faces meet once (from the lower index).
        ok = real[k] & (~big[k] | (k > b)) & (b != k) & boxes_meet(b, k, (0, 1, 2)) & topology_ok(b, k)
        return ok, jnp.stack([jnp.minimum(b, k), jnp.maximum(b, k)], axis=1)

    chunk = min(_CHUNK, max(1024, 8 * rows))
    pairs, count = stream_expand(emit_grid, per_entry, chunk, empty.pairs, part=part)
    big_rows = jnp.where(big, rows, 0).astype(jnp.int32)
    pairs, count = stream_expand(emit_big, big_rows, chunk, pairs, count, part=part)
    return CandidatePairs(pairs=pairs, count=count, overflowed=count > capacity)


def _first_at_least(values, start, stop, target):
    """Per element, the first index ``i`` in ``[start, stop)`` with ``values[i] >= target``, or
    ``stop`` (``values`` increasing on each range): one bisection run on all elements at once, for
    as many halvings as the longest range needs."""
    last = values.shape[0] - 1

    def halve(bounds):
        low, high = bounds
        middle = (low + high) // 2
        below = values[jnp.clip(middle, 0, last)] < target
        return jnp.where(below & (low < high), middle + 1, low), jnp.where(below | (low >= high), high, middle)

    return lax.while_loop(lambda bounds: jnp.any(bounds[0] < bounds[1]), halve, (start, stop))[0]


def _sort_keys(keys, pack=None):
    """``(sorted keys, permutation)`` of non-negative int32 keys.

    With 64-bit integers enabled, key and index are packed into one int64 and sorted as plain
    integers: XLA's CPU sort is several times faster on one integer array than on (key, index)
    pairs, which go through a generic comparator (1.6M entries: 0.13 s against 0.6-0.75 s).
    ``pack`` forces one path (default: packing whenever int64 is available).
    """
    n = keys.shape[0]
    bits = max(1, (n - 1).bit_length())
    index = jnp.arange(n, dtype=jnp.int32)
    if pack is None:
        pack = jax.dtypes.canonicalize_dtype(jnp.int64) == jnp.int64 and 31 + bits <= 63
    if pack:
        packed = jnp.sort((keys.astype(jnp.int64) << bits) | index.astype(jnp.int64))
        return (packed >> bits).astype(jnp.int32), (packed & ((1 << bits) - 1)).astype(jnp.int32)
    return lax.sort((keys, index), num_keys=2)


def stream_expand(emit, counts, chunk: int, out, count=0, part=None):
    """Enumerate the items of segments in chunks and append the rows ``emit`` keeps to ``out``.

    Segment ``s`` holds ``counts[s]`` items ``k = 0 .. counts[s] - 1``; ``emit(segments, ks)`` gets
    ``(chunk,)`` arrays of both and returns ``(keep, rows)`` as for ``stream_compact``. With ``part``
    ``(index, parts)`` only the ``index``-th of ``parts`` equal shares of all items is enumerated.
    Each slot's segment is found without a binary search: the non-empty segments' start slots are
    scattered into the chunk and carried forward with a running maximum.
    """
    num_segments = counts.shape[0]
    nonempty = counts > 0
    live = jnp.nonzero(nonempty, size=num_segments, fill_value=num_segments - 1)[0].astype(jnp.int32)
    num_live = jnp.sum(nonempty, dtype=jnp.int32)
    sizes = jnp.where(jnp.arange(num_segments) < num_live, counts[live], 0)
    ends = jnp.cumsum(sizes)
    starts = ends - sizes
    lanes = jnp.arange(chunk, dtype=jnp.int32)

    def emit_slots(slot):
        first = jnp.searchsorted(ends, slot[0], side="right").astype(jnp.int32)  # the segment holding slot[0]
        window = first + lanes
        offset = starts[jnp.minimum(window, num_segments - 1)] - slot[0]
        inside = (window < num_live) & (offset < chunk)
        owner = jnp.full((chunk,), first, jnp.int32).at[jnp.where(inside, offset, chunk)].max(window, mode="drop")
        owner = jnp.minimum(lax.cummax(owner), num_segments - 1)
        keep, rows = emit(live[owner], slot - starts[owner])
        return keep & (slot < stop), rows

    begin, stop = share(ends[-1], part)
    return stream_compact(emit_slots, stop, chunk, out, count, begin=begin)


def share(total, part):
    """The slots ``[begin, stop)`` of the ``index``-th of ``parts`` near-equal shares of ``total``
    (``part = (index, parts)``; ``None``: all of them)."""
    if part is None:
        return jnp.zeros((), jnp.int32), total
    index, parts = part
    size, extra = total // parts, total % parts
    begin = index * size + jnp.minimum(index, extra)
    return begin.astype(jnp.int32), (begin + size + (index < extra)).astype(jnp.int32)


def stream_compact(emit, total, chunk: int, out, count=0, begin=0):
    """Run ``emit`` over slots ``begin .. total-1`` in chunks (a ``lax.while_loop``), appending the rows
    it keeps to the buffers ``out`` (a PyTree of arrays with a common leading size, the capacity).

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

    start = (jnp.asarray(begin, jnp.int32), out, jnp.asarray(count, jnp.int32))
    _, out, count = lax.while_loop(lambda s: s[0] < total, body, start)
    return out, count


def brute_force_candidates(vertices, faces, *, skip_vertex_adjacent=False, include_shared_edges=False, padding=0.0):
    """All AABB-overlapping, non-adjacent pairs by an ``O(F^2)`` scan (for tests and tiny meshes)."""
    lo, hi = face_bounds(vertices, faces)
    lo, hi = lo - padding, hi + padding
    overlap = jnp.all((lo[:, None] <= hi[None]) & (lo[None] <= hi[:, None]), axis=-1)
    shared = _share_count(faces[:, None, :], faces[None, :, :])
    most = 1 if skip_vertex_adjacent else (3 if include_shared_edges else 2)
    ok = overlap & (shared < most) & jnp.triu(jnp.ones_like(overlap), 1)
    return jnp.argwhere(ok)

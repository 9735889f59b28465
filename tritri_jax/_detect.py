"""Layer 3: the detection pipeline: broad phase, plane-side early-out and float kernel inside ``jit``
(each stage streamed over the previous one's survivors), then exact settling of the few pairs within
rounding distance of flipping, on the host (``_exact``)."""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _exact
from ._broad_phase import candidate_pairs, stream_compact
from ._devices import on_each_device, sharded_axis, share_of, to_host
from ._kernels import certainly_apart, classify
from ._memory import releasable_jit, release_if_crowded
from ._mesh_energy import check_mesh, pair_triangles, pairs_energy
from ._sizes import bucket, default_capacity, pad_mesh
from ._topology import index_contacts, welded_faces
from ._types import Array, Faces, Int, Vertices

candidates_jit = releasable_jit(
    candidate_pairs, static_argnames=("capacity", "skip_vertex_adjacent", "include_shared_edges")
)


class Detection(NamedTuple):
    """What the device part of detection found (fixed shapes; for the solver and ``detect``).

    ``pairs`` ``(flagged_capacity, 2)``: the candidate pairs that the float kernel calls crossing or
    ambiguous (within rounding distance of flipping), with both verdicts in ``crossing`` and
    ``ambiguous``; rows past ``num_flagged`` are padding. The three counts are true counts even past
    their buffers, so a caller can tell which buffer to grow.
    """

    pairs: Int[Array, "K 2"]
    crossing: Array
    ambiguous: Array
    num_flagged: Int[Array, ""]
    num_candidates: Int[Array, ""]
    num_survivors: Int[Array, ""]

    def mask(self):
        """Which rows of ``pairs`` hold a pair (per device, for ``detect_on_devices``' fields)."""
        rows = self.pairs.shape[-2]
        return jnp.arange(rows) < jnp.minimum(self.num_flagged, rows)[..., None]

    def overflowed(self, capacity, survivor_capacity):
        """Whether a buffer filled up (per device, for ``detect_on_devices``' fields)."""
        return (
            (self.num_candidates > capacity)
            | (self.num_survivors > survivor_capacity)
            | (self.num_flagged > self.pairs.shape[-2])
        )


def detect_on_device(
    vertices,
    faces,
    *,
    capacity: int,
    survivor_capacity: int,
    flagged_capacity: int,
    cell_size=None,
    skip_vertex_adjacent: bool = False,
    include_shared_edges: bool = True,
    num_faces=None,
    part=None,
) -> Detection:
    """Broad phase, plane-side early-out and float kernel, all inside ``jit``, each stage streamed over
    the previous stage's actual count (not its capacity), so that the kernels run on the few pairs
    that need them. ``num_faces`` and ``part``: as in ``candidate_pairs`` (the rows past
    ``num_faces`` are shape padding; ``part`` makes this one device's share)."""
    candidates = candidate_pairs(
        vertices,
        faces,
        capacity=capacity,
        cell_size=cell_size,
        skip_vertex_adjacent=skip_vertex_adjacent,
        include_shared_edges=include_shared_edges,
        num_faces=num_faces,
        part=part,
    )
    return judge_pairs(
        vertices,
        faces,
        candidates.pairs,
        candidates.count,
        survivor_capacity=survivor_capacity,
        flagged_capacity=flagged_capacity,
    )


def judge_pairs(
    vertices, faces, pairs, count, *, survivor_capacity: int, flagged_capacity: int, keep_ambiguous: bool = True
) -> Detection:
    """The early-out and float kernel of ``detect_on_device`` on a given pair list (its first ``count``
    rows). With ``keep_ambiguous=False`` only crossing pairs are kept, so ``num_flagged`` counts them."""
    capacity = pairs.shape[0]
    num_candidates = jnp.minimum(count, capacity)
    chunk = min(1 << 15, bucket(faces.shape[0]), bucket(capacity))

    corners = vertices[faces]  # (F, 3, 3), gathered once: per pair, two row reads instead of six

    def survive(slot):
        rows = pairs[jnp.minimum(slot, capacity - 1)]
        u, v = corners[jnp.maximum(rows[:, 0], 0)], corners[jnp.maximum(rows[:, 1], 0)]
        return (slot < num_candidates) & ~jax.vmap(certainly_apart)(u, v), rows

    empty = jnp.full((survivor_capacity, 2), -1, jnp.int32)
    survivors, num_survivors = stream_compact(survive, num_candidates, chunk, empty)
    stored = jnp.minimum(num_survivors, survivor_capacity)

    def judge(slot):
        rows = survivors[jnp.minimum(slot, survivor_capacity - 1)]
        u, v = pair_triangles(vertices, faces, rows)
        crossing, ambiguous = jax.vmap(classify)(u, v)
        keep = (crossing | ambiguous) if keep_ambiguous else crossing
        return (slot < stored) & keep, (rows, crossing, ambiguous)

    flagged = (
        jnp.full((flagged_capacity, 2), -1, jnp.int32),
        jnp.zeros(flagged_capacity, bool),
        jnp.zeros(flagged_capacity, bool),
    )
    (rows, crossing, ambiguous), num_flagged = stream_compact(judge, stored, chunk, flagged)
    return Detection(rows, crossing, ambiguous, num_flagged, count, num_survivors)


def detect_on_devices(vertices, faces, *, device_mesh, cell_size=None, num_faces=None, **options) -> Detection:
    """``detect_on_device`` over a one-axis device mesh: every device builds the grid, enumerates its
    share of the raw pairs and judges the candidates among them; the fields get a leading device
    axis (buffers and counts per device, sharded over the mesh)."""

    def local(part, vertices, faces, cell_size, num_faces):
        found = detect_on_device(vertices, faces, cell_size=cell_size, num_faces=num_faces, part=part, **options)
        return jax.tree.map(lambda x: x[None], found)

    return on_each_device(local, device_mesh, (vertices, faces, cell_size, num_faces), "sharded")


_CAPACITIES = ("capacity", "survivor_capacity", "flagged_capacity", "skip_vertex_adjacent", "include_shared_edges")
_detect_on_device_jit = releasable_jit(detect_on_device, static_argnames=_CAPACITIES)
_detect_on_devices_jit = releasable_jit(detect_on_devices, static_argnames=(*_CAPACITIES, "device_mesh"))


def detect(
    vertices, faces, *, capacity=None, cell_size=None, skip_vertex_adjacent=False, num_faces=None, device_mesh=None
):
    """Eager detection: the device pipeline of ``detect_on_device`` with capacities grown on overflow,
    then exact settling of the ambiguous pairs on the host. With ``num_faces`` the rows of ``faces``
    past it are shape padding (``_sizes.pad_mesh``), and the capacities follow the padded shape so
    that every mesh of one bucket shares them. With ``device_mesh`` the candidates are split over
    its devices (``detect_on_devices``); the capacities are then per device.

    Returns ``(pairs, capacity used)`` with ``pairs`` a numpy ``(K, 2)`` array (unsorted).
    """
    rows = faces.shape[0]
    num_faces = rows if num_faces is None else num_faces
    share = share_of(rows, device_mesh)
    capacity = capacity or default_capacity(share)
    # A buffer that fills up means a second compile, so they start with room: the stress families
    # have up to ~2.4 survivors per face, and more than 2 flagged (small crumpled sheets); the
    # flagged pairs are a subset of the survivors, so their buffer is as large.
    survivor_capacity = flagged_capacity = bucket(4 * share)
    if device_mesh is None:
        run = _detect_on_device_jit
    else:
        run = functools.partial(_detect_on_devices_jit, device_mesh=device_mesh)
    while True:
        found = run(
            vertices,
            faces,
            capacity=capacity,
            survivor_capacity=survivor_capacity,
            flagged_capacity=flagged_capacity,
            cell_size=cell_size,
            skip_vertex_adjacent=skip_vertex_adjacent,
            num_faces=np.int32(num_faces),
        )
        found = Detection(*(to_host(x) for x in found))
        if device_mesh is None:  # as one device of several: every field (devices, ...)
            found = Detection(*(x[None] for x in found))
        # Every full buffer grows at once (one recompile, not one per stage); a stage behind a full
        # one saw only part of its input, so its count is scaled up by the share it missed.
        counts = tuple(int(np.max(c)) for c in (found.num_candidates, found.num_survivors, found.num_flagged))
        sizes = [capacity, survivor_capacity, flagged_capacity]
        if all(c <= s for c, s in zip(counts, sizes, strict=True)):
            break
        missed = 1.0
        for k, count in enumerate(counts):
            estimate = math.ceil(count * missed)
            missed *= max(1.0, count / sizes[k])
            if estimate > sizes[k]:
                sizes[k] = bucket(estimate)
        capacity, survivor_capacity, flagged_capacity = sizes
    # Each device's first num_flagged rows, sliced on the host (a device slice would compile once per
    # capacity).
    kept = [
        (found.pairs[d][:n], found.crossing[d][:n], found.ambiguous[d][:n]) for d, n in enumerate(found.num_flagged)
    ]
    pairs, crossing, ambiguous = (np.concatenate(x) for x in zip(*kept, strict=True))
    if ambiguous.any():
        v, f = np.asarray(vertices, np.float64), np.asarray(faces)
        for k in np.flatnonzero(ambiguous):
            i, j = pairs[k]
            crossing[k] = _exact.decide(v[f[i]], v[f[j]], f[i], f[j])
    return pairs[crossing].astype(np.int64), capacity


def find_intersections(
    vertices: Vertices,
    faces: Faces,
    *,
    skip_vertex_adjacent: bool = False,
    cell_size=None,
    weld: bool = True,
    device_mesh=None,
):
    """All crossing face pairs of a mesh, as a sorted ``(K, 2)`` numpy array of ``(i, j)``, ``i < j``.

    The float kernels decide every candidate pair inside ``jit`` and flag those within rounding
    distance of touching; those few are settled on the host in exact rational arithmetic, so the
    answer is exact for the input's binary values and agrees with libigl's
    ``predicates::find_self_intersections``:

    - pairs sharing no vertex are reported when the closed triangles meet (touching counts: a mesh
      whose faces only touch is not intersection-free);
    - pairs sharing one vertex are reported when one folds through the other (that vertex lies
      exactly on both planes; meeting only at it is not an intersection); coplanar ones when they
      overlap with positive area (around a vertex of a flat mesh, faces touch along lines);
    - pairs sharing an edge are reported only when folded flat onto each other (coplanar overlap);
    - zero-area faces (faces that repeat a vertex among them) never intersect anything, nor do two
      faces with the same three vertices (nothing could move them apart).

    Vertices at identical coordinates are one vertex (``weld=True``): a triangle soup, every face
    with three vertices of its own, has the pairs of the welded mesh, not every touching
    neighbour. With ``weld=False`` vertices are one only when they share an index, as in libigl,
    which then also reports faces that meet at a duplicated vertex.

    The broad-phase capacity is chosen and grown automatically. The mesh is padded to a ladder of
    shapes (``2^k x 1, 1.25, 1.5, 1.75``) with inert rows, so meshes of nearby sizes share one
    compiled executable.

    **Arguments:**

    - ``vertices`` ``(V, 3)`` float, ``faces`` ``(F, 3)`` int (numpy or JAX arrays).
    - ``skip_vertex_adjacent``: skip every pair that shares a vertex, as the paper does.
    - ``cell_size``: broad-phase grid cell size (default: derived from the faces' extents).
    - ``weld``: vertices at identical coordinates are one vertex (the default), or only by index.
    - ``device_mesh``: a one-axis ``jax.sharding.Mesh`` to split the work over (every device builds
      the grid and judges its share of the candidate pairs; the same pairs as on one device), or
      ``None``: one device. A mesh spanning several processes (``jax.distributed``) works too: every
      process passes the same mesh and gets all the pairs.

    ```python
    >>> import numpy as np, tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(8)
    >>> pairs = tt.find_intersections(vertices, faces)
    >>> pairs.shape[1], bool((pairs[:, 0] < pairs[:, 1]).all())
    (2, True)
    >>> soup = vertices[faces].reshape(-1, 3), np.arange(3 * len(faces)).reshape(-1, 3)
    >>> len(tt.find_intersections(*soup)) == len(pairs)  # a soup: the welded mesh's pairs
    True
    >>> len(tt.find_intersections(*soup, weld=False)) > 10 * len(pairs)  # by index: every touching neighbour
    True

    ```
    """
    vertices, faces = check_mesh(vertices, faces)
    if device_mesh is not None:
        sharded_axis(device_mesh)
    if faces.shape[0] < 2:
        return np.zeros((0, 2), np.int64)
    num_faces = faces.shape[0]
    v_np, f_np = np.asarray(vertices), np.asarray(faces)
    welded = welded_faces(v_np, f_np)
    padded = pad_mesh(v_np, welded)
    shapes = (padded[0].shape, padded[1].shape, str(padded[0].dtype))
    release_if_crowded(("find_intersections", *shapes, cell_size is None, skip_vertex_adjacent, device_mesh))
    pairs, _ = detect(
        *padded,
        cell_size=cell_size,
        skip_vertex_adjacent=skip_vertex_adjacent,
        num_faces=num_faces,
        device_mesh=device_mesh,
    )
    if not weld and welded is not f_np:
        extra = index_contacts(v_np, f_np, skip_vertex_adjacent=skip_vertex_adjacent)
        pairs = np.unique(np.concatenate([np.sort(pairs, axis=1), extra]), axis=0)
    pairs = np.sort(pairs, axis=1)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def _both_measures(vertices, faces, pairs, mask):
    return tuple(pairs_energy(vertices, faces, pairs, mask, measure=m) for m in ("energy", "length"))


_measures = releasable_jit(_both_measures)


def crossing_measures(vertices, faces, pairs):
    """``(energy, length)`` summed over the given crossing pairs (``find_intersections``' answer),
    as floats: the mesh's intersection energy (Eq. 2) and intersection-curve length without a
    second broad phase. Mesh and pair list are padded to their buckets, so this compiles once per
    bucket like detection does."""
    vertices, faces = pad_mesh(vertices, faces)
    pairs = np.asarray(pairs, np.int32).reshape(-1, 2)
    padded = np.zeros((bucket(len(pairs)), 2), np.int32)
    padded[: len(pairs)] = pairs
    energy, length = _measures(vertices, faces, padded, np.arange(len(padded)) < len(pairs))
    return float(energy), float(length)

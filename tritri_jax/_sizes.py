"""Buffer and shape sizes: the ladder every compiled stage rounds its sizes up to, so that meshes and
pair lists of nearby sizes share one compiled executable."""

import math

import numpy as np


def bucket(n: int) -> int:
    """``n`` rounded up to a power of two, at least 1024: repeated calls reuse a few compiled shapes."""
    return max(1024, 1 << math.ceil(math.log2(max(n, 1))))


def default_capacity(num_faces: int) -> int:
    """Broad-phase slots for a mesh of ``num_faces`` faces: ``16 F``, bucketed."""
    return bucket(16 * num_faces)


def _ladder(n: int, least: int, steps) -> int:
    """``n`` (at least ``least``) rounded up to ``2^j * s / steps[0]`` for ``s`` in ``steps``: the
    rungs ``2^j * (1, 1.25, 1.5, 1.75)`` for ``steps = (4, 5, 6, 7)``."""
    n = max(int(n), least)
    top = 1 << (n.bit_length() - 1)
    return next(top * s // steps[0] for s in (*steps, 2 * steps[0]) if top * s // steps[0] >= n)


def shape_bucket(n: int) -> int:
    """``n`` rounded up to the mesh-shape ladder ``2^k * (1, 1.25, 1.5, 1.75)``, at least 64.

    Vertex and face counts are padded to it, so meshes of nearby sizes share one compiled
    executable (and one persistent-cache entry) at a cost of at most 25 % more rows.
    """
    return _ladder(n, 64, (4, 5, 6, 7))


def slot_bucket(k: int) -> int:
    """A sparse row width ``k`` rounded up to ``8, 12, 16, 24, 32, 48, ...`` (``2^j * (1, 1.5)``): the
    fullest row of a mesh's Laplacian (its highest valence + 1) varies from mesh to mesh."""
    return _ladder(k, 8, (2, 3))


def pad_mesh(vertices, faces):
    """``(vertices, faces)`` padded to ``shape_bucket`` rows with copies of vertex 0 and face 0.

    The padding faces are inert only where the callee is told the real face count (the broad
    phase's ``num_faces``): then no pair involves them. Needs at least one face.
    """
    vertices, faces = np.asarray(vertices), np.asarray(faces, np.int32)
    num_v, num_f = shape_bucket(len(vertices)), shape_bucket(len(faces))
    vertices = np.concatenate([vertices, np.repeat(vertices[:1], num_v - len(vertices), axis=0)])
    faces = np.concatenate([faces, np.repeat(faces[:1], num_f - len(faces), axis=0)])
    return vertices, faces


def relax_sizes(num_vertices: int, num_faces: int, num_edges: int, num_adjacent: int):
    """Phase 2's padded ``(vertices, faces, edges, adjacent face pairs)`` counts, each with room for
    at least one padding row. The faces take the ladder; the others are tied to the faces' rung
    where the mesh is typical (a closed mesh has ``F / 2 + 2`` vertices and ``1.5 F`` edges, and a
    face shares a vertex with ~12 others), so that two meshes in one face bucket also share the
    others: ``F / 2 + 3`` vertices, ``2 F`` edges and ``8 F`` (or ``12, 16, 24, ...`` x ``F``)
    adjacent pairs at least."""
    faces = shape_bucket(num_faces + 1)
    vertices = max(shape_bucket(num_vertices + 1), shape_bucket(faces // 2 + 3))
    edges = max(shape_bucket(num_edges), 2 * faces)
    adjacent = faces * slot_bucket(-(-num_adjacent // faces))
    return vertices, faces, edges, adjacent


def pad_relax(vertices, faces, edges, adjacent):
    """Phase 2's arrays padded to ``relax_sizes``, so that the meshes of one bucket share its
    compiled code: ``(vertices, faces, edges, adjacent)``.

    Padding vertices are copies of vertex 0 (the first, ``p``, at index ``len(vertices)``); padding
    faces ``(p, p, p)`` (inert where the callee is told the real face count); padding edges the
    loops ``(p, p)``, padding face pairs a padding face with itself (no non-incident primitives)."""
    vertices, faces = np.asarray(vertices), np.asarray(faces, np.int32)
    edges, adjacent = np.asarray(edges, np.int32).reshape(-1, 2), np.asarray(adjacent, np.int32).reshape(-1, 2)
    p, q = len(vertices), len(faces)
    num_v, num_f, num_e, num_a = relax_sizes(p, q, len(edges), len(adjacent))
    vertices = np.concatenate([vertices, np.repeat(vertices[:1], num_v - p, axis=0)])
    faces = np.concatenate([faces, np.full((num_f - q, 3), p, np.int32)])
    edges = np.concatenate([edges, np.full((num_e - len(edges), 2), p, np.int32)])
    adjacent = np.concatenate([adjacent, np.full((num_a - len(adjacent), 2), q, np.int32)])
    return vertices, faces, edges, adjacent

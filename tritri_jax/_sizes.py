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


def shape_bucket(n: int) -> int:
    """``n`` rounded up to the mesh-shape ladder ``2^k * (1, 1.25, 1.5, 1.75)``, at least 64.

    Vertex and face counts are padded to it, so meshes of nearby sizes share one compiled
    executable (and one persistent-cache entry) at a cost of at most 25 % more rows.
    """
    n = max(int(n), 64)
    top = 1 << (n.bit_length() - 1)
    return next(top * k // 4 for k in (4, 5, 6, 7, 8) if top * k // 4 >= n)


def slot_bucket(k: int) -> int:
    """A sparse row width ``k`` rounded up to ``8, 12, 16, 24, 32, 48, ...`` (``2^j * (1, 1.5)``): the
    fullest row of a mesh's Laplacian (its highest valence + 1) varies from mesh to mesh."""
    k = max(int(k), 8)
    top = 1 << (k.bit_length() - 1)
    return top if top >= k else (3 * top // 2 if 3 * top // 2 >= k else 2 * top)


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

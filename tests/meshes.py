"""Mesh loading for tests (the benchmark meshes are read in place, never copied)."""

import numpy as np


def load_obj_triangulated(path):
    """The library's reader (meshio; quads (a, b, c, d) become (a, b, c) and (a, c, d))."""
    from tritri_jax.io import read_mesh

    return read_mesh(path)


def libigl_pairs(vertices, faces):
    import igl.predicates

    _, pairs, _ = igl.predicates.find_self_intersections(
        np.ascontiguousarray(vertices, np.float64), np.ascontiguousarray(faces, np.int64)
    )
    pairs = np.sort(pairs, axis=1)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]

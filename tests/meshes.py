"""Mesh loading for tests (the benchmark meshes are read in place, never copied)."""

import numpy as np


def load_obj_triangulated(path):
    """Read an OBJ with meshio; quads (a, b, c, d) become (a, b, c) and (a, c, d)."""
    import meshio

    mesh = meshio.read(path)
    faces = []
    for block in mesh.cells:
        data = np.asarray(block.data)
        if data.shape[1] == 3:
            faces.append(data)
        elif data.shape[1] == 4:
            faces += [data[:, [0, 1, 2]], data[:, [0, 2, 3]]]
        else:
            raise ValueError(f"{path}: unsupported cell block {block.type}")
    return np.asarray(mesh.points, np.float64), np.concatenate(faces).astype(np.int64)


def libigl_pairs(vertices, faces):
    import igl.predicates

    _, pairs, _ = igl.predicates.find_self_intersections(
        np.ascontiguousarray(vertices, np.float64), np.ascontiguousarray(faces, np.int64)
    )
    pairs = np.sort(pairs, axis=1)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]

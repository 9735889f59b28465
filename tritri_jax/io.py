"""Mesh files, through meshio (OBJ, PLY, OFF, STL and the rest of meshio's formats).

meshio was chosen over trimesh because it reads and writes the formats without altering the
data (no implicit merging, reordering or repair), which a tool that certifies intersections needs.
"""

import os

import numpy as np


def read_mesh(path, *, weld: bool = False):
    """Read a triangle mesh; quads and polygons are fan-triangulated.

    **Arguments:** ``path``; ``weld``: merge vertices with identical coordinates.

    **Returns:** ``(vertices (V, 3) float64, faces (F, 3) int64)`` as numpy arrays.

    Raises ``ValueError`` naming the file and the problem when it is missing, unreadable, or holds
    no faces.

    ```python
    >>> import os, tempfile, tritri_jax as tt
    >>> from tritri_jax.io import read_mesh, write_mesh
    >>> path = os.path.join(tempfile.mkdtemp(), "spheres.obj")
    >>> write_mesh(path, *tt.scenes.two_spheres(6))
    >>> vertices, faces = read_mesh(path)
    >>> vertices.shape, faces.shape, faces.dtype.name
    ((124, 3), (240, 3), 'int64')

    ```
    """
    import meshio

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        mesh = meshio.read(path)
    except Exception as error:  # meshio raises many kinds for bad files
        raise ValueError(f"{path}: cannot read mesh ({type(error).__name__}: {error})") from error
    faces = []
    for block in mesh.cells:
        data = np.asarray(block.data)
        if data.ndim == 2 and data.shape[1] >= 3 and block.type in ("triangle", "quad", "polygon"):
            faces += [data[:, [0, k, k + 1]] for k in range(1, data.shape[1] - 1)]
    if not faces:
        raise ValueError(f"{path}: holds no triangle, quad or polygon faces")
    vertices = np.asarray(mesh.points, np.float64)
    if vertices.ndim != 2 or vertices.shape[1] < 3:
        raise ValueError(f"{path}: vertices are not 3-D")
    vertices = vertices[:, :3]
    faces = np.concatenate(faces).astype(np.int64)
    if weld:
        vertices, inverse = np.unique(vertices, axis=0, return_inverse=True)
        faces = inverse.reshape(-1)[faces]
    return vertices, faces


def write_mesh(path, vertices, faces, *, overwrite: bool = False):
    """Write a triangle mesh (format from the extension). Refuses to replace a file unless ``overwrite``.

    ```python
    >>> import os, tempfile, tritri_jax as tt
    >>> from tritri_jax.io import write_mesh
    >>> path = os.path.join(tempfile.mkdtemp(), "sphere.ply")
    >>> vertices, faces = tt.scenes.sphere(6)
    >>> write_mesh(path, vertices, faces)
    >>> write_mesh(path, vertices, faces)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: ...sphere.ply: exists; pass overwrite=True (or --overwrite) to replace it
    >>> write_mesh(path, vertices, faces, overwrite=True)

    ```
    """
    import meshio

    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"{path}: exists; pass overwrite=True (or --overwrite) to replace it")
    meshio.write(path, meshio.Mesh(np.asarray(vertices, np.float64), [("triangle", np.asarray(faces, np.int64))]))

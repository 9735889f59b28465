"""Mesh files, through meshio (OBJ, PLY, OFF, STL and the rest of meshio's formats).

meshio was chosen over trimesh because it reads and writes the formats without altering the
data (no implicit merging, reordering or repair), which a tool that certifies intersections needs.
"""

import os

import numpy as np


def _truncated_header(path):
    """Why meshio would not get through this file's header, or ``None``. Its OFF and PLY readers loop
    on ``readline`` until a line they need, which never comes at the end of a truncated file."""
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".ply" and head.startswith(b"ply") and b"end_header" not in head:
        return "the PLY header has no end_header line (a truncated file?)"
    if suffix == ".off" and head.lstrip().startswith(b"OFF"):
        lines = head.splitlines()[1:]
        if not any(line.strip() and not line.strip().startswith(b"#") for line in lines):
            return "the OFF file ends after its first line (no counts)"
    return None


def read_mesh(path, *, weld: bool = False):
    """Read a triangle mesh; quads and polygons are fan-triangulated.

    **Arguments:** ``path``; ``weld``: merge vertices with identical coordinates (the library's
    functions take them as one vertex anyway; this also renumbers them).

    **Returns:** ``(vertices (V, 3) float64, faces (F, 3) int64)`` as numpy arrays.

    Raises ``ValueError`` naming the file and the problem when it is missing, unreadable, truncated
    where the format can tell, holds no faces, non-finite coordinates or indices out of range.

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
    import contextlib
    import io
    import warnings

    import meshio

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    problem = _truncated_header(path)
    if problem:
        raise ValueError(f"{path}: cannot read mesh ({problem})")
    said = io.StringIO()
    try:
        # meshio prints what went wrong and calls sys.exit on a file it cannot read
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's overflow warnings on a garbage header
            mesh = meshio.read(path)
    except (Exception, SystemExit) as error:
        reason = f"{type(error).__name__}: {error}" if not isinstance(error, SystemExit) else ""
        reason = reason or " ".join(said.getvalue().split()) or "not a mesh meshio can read"
        raise ValueError(f"{path}: cannot read mesh ({reason})") from None
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
    if not np.all(np.isfinite(vertices)):
        row = int(np.flatnonzero(~np.all(np.isfinite(vertices), axis=1))[0])
        raise ValueError(f"{path}: vertex {row} has a NaN or infinite coordinate")
    if faces.min() < 0 or faces.max() >= len(vertices):
        row = int(np.flatnonzero(np.any((faces < 0) | (faces >= len(vertices)), axis=1))[0])
        raise ValueError(f"{path}: face {row} refers to a vertex that is not in the file ({len(vertices)} vertices)")
    if weld:
        vertices, inverse = np.unique(vertices, axis=0, return_inverse=True)
        faces = inverse.reshape(-1)[faces]
    return vertices, faces


def _drop_timestamp(path):
    """Blank out the time meshio writes into OBJ and PLY headers ("Created by meshio v5.3.5,
    2026-...") so that the same mesh gives the same bytes, run after run; the same length, in place."""
    import re

    with open(path, "r+b") as f:
        head = f.read(4096)
        found = re.search(rb"Created by meshio v[^,\n]*(, [0-9T:.\-]+)", head)
        if found:
            f.seek(found.start(1))
            f.write(b" " * (found.end(1) - found.start(1)))


def write_mesh(path, vertices, faces, *, overwrite: bool = False):
    """Write a triangle mesh (format from the extension). Refuses to replace a file unless ``overwrite``.

    The mesh goes to a temporary file beside ``path`` that is then renamed to it, so an interrupted
    write (Ctrl-C, a crash, a full disk) leaves either the old file or the whole new one. The same
    mesh gives the same bytes on every run (the time meshio stamps in OBJ and PLY headers is blanked).

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
    import tempfile

    import meshio

    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"{path}: exists; pass overwrite=True (or --overwrite) to replace it")
    faces = np.asarray(faces, np.int64)
    if faces.size and faces.max() < 2**31:
        faces = faces.astype(np.int32)  # PLY has no 64-bit integers
    mesh = meshio.Mesh(np.asarray(vertices, np.float64), [("triangle", faces)])
    folder, name = os.path.split(os.path.abspath(path))
    root, suffix = os.path.splitext(name)
    # Written beside the target and renamed over it: an interrupted write never leaves a partial mesh
    handle, temporary = tempfile.mkstemp(prefix=f".{root}.", suffix=suffix, dir=folder)
    os.close(handle)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)  # the permissions a plain write would give
        meshio.write(temporary, mesh)  # the format from the suffix, which the temporary name keeps
        _drop_timestamp(temporary)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise

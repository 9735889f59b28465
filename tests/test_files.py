"""Mesh files as they come: malformed files of every supported format give a ``ValueError`` naming
the file, never a crash, an exit, a hang or a mesh with bad values; writes are all or nothing."""

import os
import threading

import meshio
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tritri_jax as tt
from tritri_jax.io import read_mesh, write_mesh

FORMATS = {  # name: (suffix, meshio write options)
    "obj": (".obj", {}),
    "off": (".off", {}),
    "ply-binary": (".ply", {}),
    "ply-ascii": (".ply", {"binary": False}),
    "stl-binary": (".stl", {"binary": True}),
    "stl-ascii": (".stl", {"binary": False}),
}


def _good_bytes(kind, folder):
    suffix, options = FORMATS[kind]
    path = os.path.join(folder, f"good-{kind}{suffix}")
    vertices, faces = tt.scenes.sphere(4)
    meshio.write(path, meshio.Mesh(vertices, [("triangle", faces.astype(np.int32))]), **options)
    with open(path, "rb") as f:
        return f.read()


def _read_within(path, seconds=20.0):
    """``read_mesh(path)``, or the exception it raised; fails the test if it has not returned in time."""
    outcome = {}

    def run():
        try:
            outcome["mesh"] = read_mesh(path)
        except BaseException as error:  # noqa: BLE001 - what it raised is the result
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"read_mesh hangs on {path}"
    return outcome


def _assert_clean_outcome(path, outcome):
    """Either a valid mesh (finite, indices in range) or a ValueError that names the file."""
    if "error" in outcome:
        error = outcome["error"]
        assert isinstance(error, ValueError), f"{type(error).__name__}: {error}"
        assert str(path) in str(error)
    else:
        vertices, faces = outcome["mesh"]
        assert np.all(np.isfinite(vertices)) and len(faces) > 0
        assert faces.min() >= 0 and faces.max() < len(vertices)


MALFORMED = {
    "empty.obj": b"",
    "empty.ply": b"",
    "empty.off": b"",
    "empty.stl": b"",
    "header-only.off": b"OFF\n# nothing after this\n",
    "short-header.ply": b"ply\nformat ascii 1.0\nelement vertex 3\n",
    "no-faces.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\n",
    "nan.obj": b"v 0 0 nan\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
    "inf.obj": b"v 0 0 inf\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
    "index-out-of-range.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n",
    "negative-index.obj": b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf -9 2 3\n",
    "index-out-of-range.off": b"OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n",
    "too-few-vertices.off": b"OFF\n3 1 0\n0 0 0\n1 0 0\n",
    "huge-counts.off": b"OFF\n999999999999 999999999999 0\n0 0 0\n",
    "huge-count.ply": b"ply\nformat binary_little_endian 1.0\nelement vertex 999999999999\n"
    b"property float x\nproperty float y\nproperty float z\nend_header\n" + b"\0" * 24,
    "truncated-solid.stl": b"solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\n",
    "garbage.obj": bytes(range(256)) * 8,
    "garbage.ply": b"ply\n" + bytes(range(256)) * 8,
    "garbage.stl": b"\x07" * 80 + b"\xff\xff\xff\x7f" + bytes(range(256)),
    "text.off": "OFF\n3 1 0\nπ 0 0\n".encode(),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_files_raise_a_clear_error(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(MALFORMED[name])
    outcome = _read_within(path)
    assert "error" in outcome, f"{name} read as a mesh"
    _assert_clean_outcome(path, outcome)


@settings(max_examples=int(os.environ.get("TRITRI_FUZZ_EXAMPLES", 300)), deadline=None)
@given(
    kind=st.sampled_from(sorted(FORMATS)),
    cut=st.floats(0.0, 1.0),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 255)), max_size=12),
)
def test_damaged_files_read_or_fail_cleanly(tmp_path_factory, kind, cut, flips):
    """Valid files truncated anywhere and with random bytes overwritten."""
    folder = tmp_path_factory.mktemp("damaged")
    data = bytearray(_good_bytes(kind, folder))
    for where, value in flips:
        data[min(int(where * len(data)), len(data) - 1)] = value
    data = bytes(data[: max(1, int(cut * len(data)))])
    path = folder / f"damaged{FORMATS[kind][0]}"
    path.write_bytes(data)
    _assert_clean_outcome(path, _read_within(path))


def test_a_write_is_all_or_nothing(tmp_path, monkeypatch):
    """The mesh goes to a temporary file renamed over the target: a write that fails half-way leaves
    the old file as it was and no temporary behind; the permissions are a plain write's."""
    path = tmp_path / "mesh.obj"
    vertices, faces = tt.scenes.sphere(4)
    write_mesh(path, vertices, faces)
    before = path.read_bytes()
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask

    def broken(filename, mesh, **_):
        with open(filename, "w") as f:
            f.write("v 0 0 0\n")  # a partial file, then the failure
        raise KeyboardInterrupt

    monkeypatch.setattr(meshio, "write", broken)
    with pytest.raises(KeyboardInterrupt):
        write_mesh(path, vertices * 2, faces, overwrite=True)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["mesh.obj"]
    with pytest.raises(ValueError, match="exists"):
        write_mesh(path, vertices, faces)


def test_huge_counts_in_a_header_do_not_allocate(tmp_path):
    """Headers that promise 10^12 vertices or faces: a clear error from a process limited to 4 GiB of
    address space (nothing is allocated from the promised count)."""
    import subprocess
    import sys

    paths = []
    for name in ("huge-counts.off", "huge-count.ply"):
        paths.append(tmp_path / name)
        paths[-1].write_bytes(MALFORMED[name])
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "from tritri_jax.io import read_mesh\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        read_mesh(path)\n"
        "    except ValueError as error:\n"
        "        print('refused', path)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("refused") == len(paths)

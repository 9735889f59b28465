"""The real console script, in a subprocess, on files in a temporary folder."""

import shutil
import subprocess
import sys

import numpy as np

import tritri_jax as tt
from tritri_jax.io import read_mesh, write_mesh


def _cli(*args, cwd=None):
    command = [shutil.which("tritri-jax") or sys.executable, *args]
    if command[0] == sys.executable:
        command.insert(1, "-m")
        command.insert(2, "tritri_jax.cli")
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)


def test_help_on_every_command():
    for args in (["--help"], ["check", "--help"], ["untangle", "--help"], ["demo", "--help"]):
        result = _cli(*args)
        assert result.returncode == 0 and "usage" in result.stdout


def test_check_clean_and_intersecting(tmp_path, benchmark_dir):
    clean = tmp_path / "sphere.off"
    write_mesh(clean, *tt.scenes.sphere(6))
    result = _cli("check", str(clean))
    assert result.returncode == 0 and "crossing pairs:       0" in result.stdout
    result = _cli("check", "--list", str(benchmark_dir / "mobius_strip.obj"))
    assert result.returncode == 1 and "crossing pairs:       116" in result.stdout
    assert len([line for line in result.stdout.splitlines() if line.count(" ") == 1]) == 116
    result = _cli("check", "--verbose", str(clean))
    assert "compiling, per function" in result.stdout and "detect_on_device" in result.stdout


def test_untangle_an_isir_mesh_and_read_it_back(tmp_path, benchmark_dir):
    out = tmp_path / "mobius_free.ply"
    picture = tmp_path / "mobius.png"
    result = _cli(
        "untangle",
        str(benchmark_dir / "mobius_strip.obj"),
        "-o",
        str(out),
        "--no-relax",
        "--picture",
        str(picture),
        "--progress",
        "on",
    )
    assert result.returncode == 0, result.stderr
    assert "phase 1 (untangle)" in result.stderr and "crossing_pairs=0" in result.stderr  # the tqdm bar
    assert "s compiling)" in result.stdout  # compile time reported apart from solve time
    for png in (picture, tmp_path / "mobius_convergence.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "converged:            True" in result.stdout
    vertices, faces = read_mesh(out)
    assert len(faces) == 2880 and len(tt.find_intersections(vertices, faces)) == 0
    again = _cli("untangle", str(benchmark_dir / "mobius_strip.obj"), "-o", str(out), "--no-relax")
    assert again.returncode == 2 and "exists" in again.stderr  # never overwrites unless asked


def test_bad_files_exit_2_and_name_the_file(tmp_path):
    (tmp_path / "bad.obj").write_text("this is not a mesh\n")
    (tmp_path / "points.xyz").write_text("0 0 0\n")
    for bad in (tmp_path / "missing.obj", tmp_path / "bad.obj", tmp_path / "points.xyz"):
        for command in (["check", str(bad)], ["untangle", str(bad), "-o", str(tmp_path / "out.obj")]):
            result = _cli(*command)
            assert result.returncode == 2 and str(bad) in result.stderr, (command, result.stderr)


def test_read_triangulates_quads_and_welds(tmp_path):
    path = tmp_path / "quad.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nv 0 0 0\nf 1 2 3 4\nf 5 2 3\n")
    vertices, faces = read_mesh(path)
    assert faces.shape == (3, 3) and len(vertices) == 5
    welded, faces = read_mesh(path, weld=True)
    assert len(welded) == 4 and faces.max() == 3
    np.testing.assert_array_equal(faces[2], faces[0])  # "f 5 2 3" is the first fan triangle once welded


def test_untangle_a_folder_into_a_folder(tmp_path):
    """Several inputs (a folder) go to a folder of outputs with the same names; a bad file is
    reported by name and the others still done (exit 2); a file where a folder is needed is refused."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_mesh(inputs / "a.obj", *tt.scenes.two_spheres(6))
    write_mesh(inputs / "b.off", *tt.scenes.two_spheres(6, overlap=0.3))  # same shapes: compiled once
    (inputs / "c.obj").write_text("v 0 0 0\nf 1 2 3\n")
    result = _cli("untangle", str(inputs), "-o", str(tmp_path / "out"), "--progress", "off")
    assert result.returncode == 2 and "c.obj" in result.stderr, result.stderr
    assert "3 meshes: 2 untangled, 0 not, 1 unreadable" in result.stdout
    for name in ("a.obj", "b.off"):
        vertices, faces = read_mesh(tmp_path / "out" / name)
        assert len(tt.find_intersections(vertices, faces)) == 0
    result = _cli("untangle", str(inputs / "a.obj"), str(inputs / "b.off"), "-o", str(tmp_path / "out" / "a.obj"))
    assert result.returncode == 2 and "names a folder" in result.stderr
    result = _cli("untangle", str(inputs), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "exists; pass --overwrite" in result.stderr


def test_a_soup_is_described_checked_and_untangled_as_a_soup_same_bits_every_run(tmp_path):
    """A triangle soup (every face with three vertices of its own, as an OBJ keeps it): ``check``
    says so and counts the welded mesh's pairs; ``untangle`` writes a soup of the input's shape whose
    copies of a vertex stay together, and the same bits on a second run."""
    vertices, faces = tt.scenes.two_spheres(6)
    soup = tmp_path / "soup.obj"
    write_mesh(soup, vertices[faces].reshape(-1, 3), np.arange(3 * len(faces)).reshape(-1, 3))
    result = _cli("check", str(soup))
    assert result.returncode == 1, result.stderr
    assert f"{3 * len(faces) - len(vertices)} duplicate vertices" in result.stdout
    assert f"crossing pairs:       {len(tt.find_intersections(vertices, faces))}" in result.stdout
    outputs = [tmp_path / "first.obj", tmp_path / "second.obj"]
    for out in outputs:
        result = _cli("untangle", str(soup), "-o", str(out), "--progress", "off")
        assert result.returncode == 0 and "duplicate vertices" in result.stdout, result.stderr
    assert outputs[0].read_bytes() == outputs[1].read_bytes()
    out_vertices, out_faces = read_mesh(outputs[0])
    assert out_vertices.shape == (3 * len(faces), 3) and len(out_faces) == len(faces)
    welded = tt.mesh_report(out_vertices, out_faces)
    assert welded.duplicate_vertices == 3 * len(faces) - len(vertices)  # no copy torn from the others
    assert len(tt.find_intersections(out_vertices, out_faces)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.obj", "second.obj", "soup.obj"]  # no temporaries


def test_check_goes_on_past_bad_files_and_names_each(tmp_path):
    folder = tmp_path / "meshes"
    folder.mkdir()
    write_mesh(folder / "a.obj", *tt.scenes.sphere(4))
    (folder / "b.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 3\n")  # truncated header
    (folder / "c.off").write_bytes(b"OFF\n")
    (folder / "d.obj").write_bytes(b"v 0 0 nan\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    (folder / "e.stl").write_bytes(bytes(range(256)) * 4)
    result = _cli("check", str(folder))
    assert result.returncode == 2, result.stderr
    assert "5 meshes: 1 clean, 0 intersecting, 4 unreadable" in result.stdout
    for name in ("b.ply", "c.off", "d.obj", "e.stl"):
        assert str(folder / name) in result.stderr
    result = _cli("check", str(folder), "--part", "1/2")  # every second file from the second: b, d
    assert result.returncode == 2 and str(folder / "d.obj") in result.stderr, result.stderr
    assert "2 meshes (part 1/2 of 5): 0 clean, 0 intersecting, 2 unreadable" in result.stdout
    assert str(folder / "c.off") not in result.stderr
    result = _cli("check", str(folder), "--part", "2/2")
    assert result.returncode == 2 and "0 <= I < N" in result.stderr
    assert "Traceback" not in result.stderr

"""Big mesh files: write, read, describe and check meshes of 1M to 5M triangles, with memory per triangle.

Run: python benchmarks/big_files.py [--sizes 1000000 5000000] [--markdown docs/benchmarks.md]

Each size runs in fresh processes, so that peak memory (the resident set's high-water mark) belongs to
that size alone: one process reads the binary PLY file, describes it (``mesh_report``) and checks it
(``find_intersections``; compile time reported apart), another gives libigl's exact
``find_self_intersections`` on the same file, the baseline of the time and memory ratios. The mesh:
spheres scattered so that they overlap (``scenes.scatter_copies``).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

COPIES = 8


def _peak_bytes():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _ours(path):
    import jax

    jax.config.update("jax_enable_x64", True)
    import tritri_jax as tt
    from tritri_jax.cli import _CompileClock
    from tritri_jax.io import read_mesh

    base = _peak_bytes()
    start = time.perf_counter()
    vertices, faces = read_mesh(path)
    read = time.perf_counter() - start
    start = time.perf_counter()
    report = tt.mesh_report(vertices, faces)
    describe = time.perf_counter() - start
    clock = _CompileClock()
    start = time.perf_counter()
    pairs = tt.find_intersections(vertices, faces)
    check = time.perf_counter() - start
    clock.stop()
    return {
        "faces": len(faces),
        "read": read,
        "describe": describe,
        "check": check - clock.seconds,
        "compile": clock.seconds,
        "pairs": len(pairs),
        "components": report.components,
        "peak": _peak_bytes(),
        "base": base,
    }


def _libigl(path):
    import igl.predicates
    import numpy as np

    from tritri_jax.io import read_mesh

    vertices, faces = read_mesh(path)
    base = _peak_bytes()
    start = time.perf_counter()
    found = igl.predicates.find_self_intersections(vertices, faces.astype(np.int64))
    return {"check": time.perf_counter() - start, "pairs": len(found[1]), "peak": _peak_bytes(), "base": base}


def _in_subprocess(role, path):
    result = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--role", role, "--file", path],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000_000, 5_000_000])
    parser.add_argument("--markdown", help="write the table into this page (section big-files)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps((_ours if args.role == "ours" else _libigl)(args.file)))
        return
    import numpy as np
    from _report import Output

    from tritri_jax import scenes
    from tritri_jax.io import write_mesh

    out = Output()
    out(
        "| triangles | PLY file | write | read | describe | check | compile | libigl check | check / libigl "
        "| peak memory | per triangle | libigl per triangle | crossing pairs (libigl) |"
    )
    out("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            n = max(4, int(round(np.sqrt(size / COPIES / 4))))
            vertices, faces = scenes.scatter_copies(*scenes.sphere(n), count=COPIES, spread=1.0, seed=0)
            path = os.path.join(folder, f"mesh-{size}.ply")
            start = time.perf_counter()
            write_mesh(path, vertices, faces)
            write = time.perf_counter() - start
            del vertices, faces
            ours, igl = _in_subprocess("ours", path), _in_subprocess("libigl", path)
            assert ours["pairs"] == igl["pairs"], (ours["pairs"], igl["pairs"])
            f = ours["faces"]
            out(
                f"| {f:,} | {os.path.getsize(path) / 2**20:.0f} MiB | {write:.1f} s | {ours['read']:.1f} s "
                f"| {ours['describe']:.1f} s | {ours['check']:.1f} s | {ours['compile']:.1f} s | {igl['check']:.1f} s "
                f"| {ours['check'] / igl['check']:.2f} | {ours['peak'] / 2**30:.1f} GiB "
                f"| {ours['peak'] / f:.0f} B | {igl['peak'] / f:.0f} B | {ours['pairs']:,} ({igl['pairs']:,}) |"
            )
            os.remove(path)
    out()
    out(
        "Peak memory: the process's resident high-water mark (Python, JAX and the mesh included); per "
        "triangle: that peak over the triangle count, for this library's process (read, describe, check) "
        "and for libigl's (read, check)."
    )
    out.write(args.markdown, "big-files")


if __name__ == "__main__":
    main()

"""Compile cost: what a user pays before the first answer, cold and with a warm cache, per command.

Each measurement is a new process running the CLI on a mesh file, as a user would run it:

- ``cold``: an empty persistent cache (``$TRITRI_JAX_CACHE`` in a fresh folder);
- ``warm``: the cache the cold run filled, on *another* mesh (another seed of the ``overlap``
  family: other shapes, another overlap) whose size the process has never seen but which falls in
  the same shape bucket (``tritri_jax._sizes.shape_bucket``; phase 2 also buckets the sparse row
  widths, which follow the mesh's largest valence: a mesh of another valence range can need
  another phase-2 compile);
- ``cut``: the same cache, on the cold mesh with 2.5 % of its faces cut away (another size of the
  same tessellation);

``wall`` is the whole process (JAX's import included); ``compiling`` is JAX's own account (tracing,
lowering and XLA compiling, from ``jax.monitoring``). The baseline of the same run is libigl's exact
``find_self_intersections`` in a new process on the same file (import included): ``ratio`` is the
``check`` wall time over it. Then, in one process: ten meshes of distinct sizes in one bucket (how
many compiles of the detection pipeline), many meshes of many sizes (memory mappings after), and
``untangle`` on ten meshes of one bucket (the first mesh with up to 4.5 % of its faces cut away: how
many compiles of phase 1 and phase 2).

    python benchmarks/compile.py --sizes 1000 5000 10000 --markdown docs/benchmarks.md
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import write_section  # noqa: E402

from tritri_jax import scenes  # noqa: E402
from tritri_jax._sizes import shape_bucket  # noqa: E402
from tritri_jax.io import write_mesh  # noqa: E402

FAMILY = "overlap"


def same_bucket_meshes(size, count=2, seed=0):
    """``count`` stress meshes of the ``overlap`` family (other seeds: other shapes and overlaps),
    about ``size`` faces, of distinct face counts in one shape bucket (the first one's)."""
    meshes = [scenes.stress_case(FAMILY, size, seed)]
    key = (shape_bucket(len(meshes[0][0])), shape_bucket(len(meshes[0][1])))
    for other in range(seed + 1, seed + 60):
        for scale in np.linspace(0.8, 1.2, 9):
            mesh = scenes.stress_case(FAMILY, int(size * scale), other)
            same = (shape_bucket(len(mesh[0])), shape_bucket(len(mesh[1]))) == key
            if same and len(mesh[1]) not in {len(m[1]) for m in meshes}:
                meshes.append(mesh)
                if len(meshes) == count:
                    return meshes
    raise RuntimeError(f"fewer than {count} meshes in the bucket of {size} faces")


def run(args, cache, timeout=900):
    """Wall seconds and stdout of one CLI process with the persistent cache in ``cache``."""
    env = dict(os.environ, TRITRI_JAX_CACHE=cache, JAX_PLATFORMS="cpu")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tritri_jax.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{args}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return wall, done.stdout


def compiling(stdout):
    return float(re.findall(r"\(\+ ([0-9.]+) s compiling\)", stdout)[-1])


def libigl_wall(path):
    code = (
        "import sys, numpy as np, igl, igl.predicates; v, f = igl.read_triangle_mesh(sys.argv[1]);"
        "igl.predicates.find_self_intersections(v.astype(np.float64), f.astype(np.int64))"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, path], check=True, capture_output=True)
    return time.perf_counter() - start


def process_rows(sizes, commands, folder):
    rows = []
    for size in sizes:
        meshes = same_bucket_meshes(size)
        vertices, faces = meshes[0]
        meshes.append((vertices, faces[: len(faces) - len(faces) // 40]))  # the cold mesh, 2.5 % of its faces cut
        paths = []
        for k, (vertices, faces) in enumerate(meshes):
            paths.append(os.path.join(folder, f"mesh_{size}_{k}.obj"))
            write_mesh(paths[-1], vertices, faces, overwrite=True)
        for command in commands:
            cache = tempfile.mkdtemp(dir=folder, prefix="cache_")
            row = {"command": command, "faces": [len(m[1]) for m in meshes], "bucket": shape_bucket(len(meshes[0][1]))}
            for label, path in zip(("cold", "warm", "cut"), paths, strict=True):
                extra = ["-o", os.path.join(folder, "out.obj"), "--overwrite", "--progress", "off"]
                wall, stdout = run([command, path, *(extra if command == "untangle" else [])], cache)
                row[label] = (wall, compiling(stdout))
            row["libigl"] = libigl_wall(paths[1])
            rows.append(row)
            print(row, flush=True)
    return rows


def one_process(sizes_in_bucket, many):
    """Compiles of ``detect_on_device`` over meshes of one bucket, then mappings after ``many`` sizes;
    then ``untangle`` on ``sizes_in_bucket`` meshes of one bucket: compiles of phase 1 and phase 2."""
    import jax

    import tritri_jax as tt
    from tritri_jax._memory import memory_mappings

    jax.config.update("jax_enable_x64", True)
    compiles, stages = [], {"_phase1": 0, "relax": 0}

    def listen(event, duration, fun_name="", **_):  # lowerings: one per compile, from the persistent cache or not
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            name = str(fun_name).removeprefix("jit(").removesuffix(")")
            if "detect_on_device" in name:
                compiles.append(duration)
            if name in stages:
                stages[name] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    vertices, faces = scenes.stress_case(FAMILY, 5000, 0)
    top = len(faces)
    counts = [top - k * max(1, top // 200) for k in range(sizes_in_bucket)]  # all inside the bucket
    counts = [c for c in counts if shape_bucket(c) == shape_bucket(top)]
    for count in counts:
        tt.find_intersections(vertices, faces[:count])
    in_bucket = (len(counts), len(compiles))
    rng = np.random.default_rng(0)
    for target in rng.integers(100, 12000, many):
        v, f = scenes.stress_case(FAMILY, int(target), int(target))
        tt.find_intersections(v, f)
    maps = memory_mappings()
    jax.clear_caches()
    meshes = [(vertices, faces[:count]) for count in counts]  # the first mesh, with holes cut
    converged = sum(bool(tt.untangle(v, f).converged) for v, f in meshes)
    return in_bucket, (many, len(compiles), maps[0] if maps else None), (len(meshes), converged, stages)


def markdown(rows, in_bucket, many, untangled):
    lines = [
        "| command | faces (cold, warm, cut) | bucket | cold wall s | cold compiling s | warm wall s "
        "| warm compiling s | cut wall s | cut compiling s | libigl wall s | ratio (warm wall / libigl) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        times = " | ".join(f"{wall:.1f} | {seconds:.1f}" for wall, seconds in (row["cold"], row["warm"], row["cut"]))
        ratio = f"{row['warm'][0] / row['libigl']:.1f}" if row["command"] == "check" else ""
        faces = ", ".join(str(count) for count in row["faces"])
        lines.append(f"| {row['command']} | {faces} | {row['bucket']} | {times} | {row['libigl']:.2f} | {ratio} |")
    lines.append("")
    lines.append(
        f"One process, detection: {in_bucket[0]} meshes of distinct sizes in one bucket compiled the pipeline "
        f"{in_bucket[1]} time(s); {many[0]} meshes of sizes 100-12,000 faces then compiled it {many[1]} times "
        f"in all and left {many[2]} memory mappings. `untangle` on {untangled[0]} meshes of distinct sizes in one "
        f"bucket ({untangled[1]} converged) compiled phase 1 {untangled[2]['_phase1']} time(s) and phase 2 "
        f"{untangled[2]['relax']} time(s)."
    )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--commands", nargs="+", default=["check", "untangle"], choices=["check", "untangle"])
    parser.add_argument("--many", type=int, default=200, help="meshes of random sizes in one process")
    parser.add_argument("--markdown", help="write the table into this page (section compile)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = process_rows(args.sizes, args.commands, folder)
    text = markdown(rows, *one_process(10, args.many))
    print(text)
    if args.markdown:
        write_section(args.markdown, "compile", text)


if __name__ == "__main__":
    main()

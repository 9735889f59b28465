"""Whole self-intersection detection: tritri_jax.find_intersections against libigl, Open3D and ipctk.

Run: python benchmarks/detect.py [--sizes 10000 50000 200000 1000000] [--skip-isir]
Compile time is measured separately (first call); the table reports the best of the next calls.
libigl (exact predicates) is the baseline: every row gives tritri_jax's time as a ratio to it.
Peers that are not installed are reported as such.
"""

import argparse
import glob
import os
import sys
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402
from tritri_jax._detect import candidates_jit  # noqa: E402
from tritri_jax._sizes import default_capacity  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Output  # noqa: E402

from tests.meshes import load_obj_triangulated  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 50_000, 200_000, 1_000_000])
parser.add_argument("--skip-isir", action="store_true")
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--markdown", help="write the table into this page (section detect)")
args = parser.parse_args()
out = Output()


def best(f, repeats=args.repeats):
    times = []
    out = None
    for _ in range(repeats):
        start = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - start)
    return min(times), out


def peers():
    found = {}
    try:
        import igl.predicates

        found["libigl"] = lambda v, f: len(igl.predicates.find_self_intersections(v, f.astype(np.int64))[1])
    except ImportError:
        pass
    try:
        import open3d as o3d

        def o3d_count(v, f):
            mesh = o3d.geometry.TriangleMesh(
                o3d.utility.Vector3dVector(v), o3d.utility.Vector3iVector(f.astype(np.int32))
            )
            return len(mesh.get_self_intersecting_triangles())

        found["Open3D"] = o3d_count
    except ImportError:
        pass
    try:
        import ipctk

        def ipc_has(v, f):
            edges = ipctk.edges(f.astype(np.int32))
            return int(ipctk.has_intersections(ipctk.CollisionMesh(v, edges, f.astype(np.int32)), v))

        found["ipctk (has_intersections)"] = ipc_has
    except ImportError:
        pass
    return found


meshes = []
if not args.skip_isir:
    root = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks", "isir-misc")
    for path in sorted(glob.glob(os.path.join(root, "*.obj"))):
        meshes.append((os.path.basename(path)[:-4], *load_obj_triangulated(path)))
for size in args.sizes:
    n = int(round(np.sqrt(size / 2))) + 1
    meshes.append((f"crumpled_sheet {2 * (n - 1) ** 2}", *tt.scenes.crumpled_sheet(n)))

available = peers()
names = list(available)
out(f"Float64; times in seconds (best of {args.repeats}).\n")
header = "| mesh | triangles | pairs | compile | tritri_jax | broad phase | candidates | " + " | ".join(names)
out(header + " | ratio to libigl |")
out("|" + "---|" * (len(names) + 8))
for name, vertices, faces in meshes:
    start = time.perf_counter()
    pairs = tt.find_intersections(vertices, faces)
    first = time.perf_counter() - start
    ours, pairs = best(lambda vertices=vertices, faces=faces: tt.find_intersections(vertices, faces))
    capacity = default_capacity(len(faces))
    v, f = jax.numpy.asarray(vertices), jax.numpy.asarray(faces)

    def broad(v=v, f=f, capacity=capacity):
        return jax.block_until_ready(candidates_jit(v, f, capacity=capacity, include_shared_edges=True))

    broad()
    broad_s, candidates = best(broad)
    row = [
        name,
        f"{len(faces):,}",
        f"{len(pairs):,}",
        f"{max(first - ours, 0):.2f}",
        f"{ours:.3f}",
        f"{broad_s:.3f}",
        f"{int(candidates.count):,}",
    ]
    peer_times = {}
    for peer in names:
        if peer == "Open3D" and len(faces) > 60_000:  # its test is all-pairs: quadratic
            row.append("skipped (O(F^2))")
            continue
        peer_times[peer], count = best(
            lambda peer=peer, vertices=vertices, faces=faces: available[peer](vertices, faces),
            repeats=1 if len(faces) > 300_000 else 2,
        )
        row.append(f"{peer_times[peer]:.3f} ({count:,})")
    ratio = f"{ours / peer_times['libigl']:.2f}x" if "libigl" in peer_times else "–"
    out("| " + " | ".join(row) + f" | {ratio} |", flush=True)
out(
    "\nratio = tritri_jax time / libigl time (below 1: tritri_jax is faster). Open3D counts triangles pairs "
    "it reports; ipctk reports only whether any intersection exists (1/0)."
)
out.write(args.markdown, "detect")

"""untangle on the ISIR meshes and the built-in scenes, with the paper's route and a plain first-order
baseline in the same run.

Run: python benchmarks/untangle.py [--baseline-steps 150] [--only NAME ...] [--no-paper]
Baselines: optax Adam on the same crossing measure (summed crossing-segment length), no smoothing, no
step cap, crossings re-detected every step; and ``method="paper"`` (Newton on elastic + kappa * sum T,
kappa continuation, no relax). Final pairs are counted by the same exact detection.
Wall time excludes compilation (each mesh is solved twice; the second run is reported).
"""

import argparse
import functools
import glob
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402
from tritri_jax._phase1 import Capacities, crossing_pairs, length_gradient  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Output  # noqa: E402

from tests.meshes import load_obj_triangulated  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--baseline-steps", type=int, default=150)
parser.add_argument("--only", nargs="*", help="mesh names to run (default: all)")
parser.add_argument("--no-paper", action="store_true", help="skip the paper's route")
parser.add_argument("--markdown", help="write the table into this page (section untangle)")
args = parser.parse_args()
out = Output()


def adam_baseline(vertices, faces, steps):
    lo, hi = vertices.min(0), vertices.max(0)
    diagonal = float(np.linalg.norm(hi - lo))
    x = jnp.asarray((vertices - 0.5 * (lo + hi)) / diagonal)
    f = jnp.asarray(faces, jnp.int32)
    optimizer = optax.adam(1e-3)

    @functools.partial(jax.jit, static_argnames="capacities")
    def step(x, opt_state, capacities):
        pairs, crossing, overflowed = crossing_pairs(x, f, capacities)
        _, g = length_gradient(x, f, pairs, crossing)
        updates, opt_state = optimizer.update(g, opt_state)
        return optax.apply_updates(x, updates), opt_state, jnp.where(overflowed, -1, jnp.sum(crossing))

    capacities = Capacities.for_faces(len(faces))
    opt_state = optimizer.init(x)
    best = (None, np.inf)
    k = 0
    while k < steps:
        x_new, opt_state_new, count = step(x, opt_state, capacities)
        if int(count) < 0:  # a buffer overflowed: grow it and redo the step
            capacities = capacities.doubled()
            continue
        k += 1
        if int(count) < best[1]:
            best = (x, int(count))
        if int(count) == 0:
            break
        x, opt_state = x_new, opt_state_new
    out = np.asarray(best[0]) * diagonal + 0.5 * (lo + hi)
    return len(tt.find_intersections(out, faces)), k


meshes = []
root = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks", "isir-misc")
for path in sorted(glob.glob(os.path.join(root, "*.obj"))):
    meshes.append((os.path.basename(path)[:-4], *load_obj_triangulated(path)))
for name, scene in tt.scenes.SCENES.items():
    for n in (10, 16):
        meshes.append((f"{name}({n})", *scene(n)))
if args.only:
    meshes = [m for m in meshes if m[0] in args.only]

out("Float64; time after compile (the second of two runs).\n")
out(
    "| mesh | triangles | pairs before | phase-1 steps | relax Newton (CG) | time (s) | compile (s) | pairs after | "
    "max move / diag | mean move / diag | worst edge ratio | paper route: pairs after (time s) | "
    "Adam baseline: pairs after (steps) |"
)
out("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, vertices, faces in meshes:
    before = len(tt.find_intersections(vertices, faces))
    first = tt.untangle(vertices, faces)
    result = tt.untangle(vertices, faces)
    if args.no_paper:
        paper = "–"
    else:
        tt.untangle(vertices, faces, method="paper", relax=False)
        p = tt.untangle(vertices, faces, method="paper", relax=False)
        paper = f"{int(p.num_intersections)} ({p.seconds:.1f})"
    adam_pairs, adam_steps = adam_baseline(vertices, faces, args.baseline_steps)
    gradient = float(result.relax_gradient_norm)
    stationary = "" if bool(result.relax_converged) else f", not stationary: |g| {gradient:.1e}"
    out(
        f"| {name} | {len(faces):,} | {before} | {int(result.iterations)} | "
        f"{int(result.relax_iterations)} ({int(result.relax_cg_iterations)}){stationary} | {result.seconds:.2f} | "
        f"{max(first.seconds - result.seconds, 0):.1f} | {int(result.num_intersections)} | "
        f"{float(result.max_displacement):.3f} | {float(result.mean_displacement):.4f} | "
        f"{float(result.worst_edge_ratio):.2f} | {paper} | {adam_pairs} ({adam_steps}) |",
        flush=True,
    )
out.write(args.markdown, "untangle")

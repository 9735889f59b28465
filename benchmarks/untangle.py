"""untangle on the ISIR meshes and the built-in scenes, with a plain first-order baseline in the same run.

Run: python benchmarks/untangle.py [--baseline-steps 200]
Baseline: optax Adam on the same crossing measure (summed crossing-segment length), no smoothing, no
step cap, crossings re-detected every step; its final pairs are counted by the same exact detection.
Wall time excludes compilation (each mesh is solved twice; the second run is reported).
"""

import argparse
import glob
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402
from tritri_jax._untangle import _crossings, _length_gradient  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tests.meshes import load_obj_triangulated  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--baseline-steps", type=int, default=200)
args = parser.parse_args()


def adam_baseline(vertices, faces, steps):
    lo, hi = vertices.min(0), vertices.max(0)
    diagonal = float(np.linalg.norm(hi - lo))
    x = jnp.asarray((vertices - 0.5 * (lo + hi)) / diagonal)
    f = jnp.asarray(faces, jnp.int32)
    capacity = 1 << int(np.ceil(np.log2(16 * len(faces))))
    optimizer = optax.adam(1e-3)

    @jax.jit
    def step(x, opt_state):
        candidates, u, v, crossing = _crossings(x, f, capacity)
        g = _length_gradient(x, f, candidates, u, v, crossing)
        updates, opt_state = optimizer.update(g, opt_state)
        return optax.apply_updates(x, updates), opt_state, jnp.sum(crossing)

    opt_state = optimizer.init(x)
    best = (None, np.inf)
    for k in range(steps):
        x_new, opt_state, count = step(x, opt_state)
        if int(count) < best[1]:
            best = (x, int(count))
        if int(count) == 0:
            break
        x = x_new
    out = np.asarray(best[0]) * diagonal + 0.5 * (lo + hi)
    return len(tt.find_intersections(out, faces)), k + 1


meshes = []
root = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks", "isir-misc")
for path in sorted(glob.glob(os.path.join(root, "*.obj"))):
    meshes.append((os.path.basename(path)[:-4], *load_obj_triangulated(path)))
for name, scene in tt.scenes.SCENES.items():
    for n in (10, 16):
        meshes.append((f"{name}({n})", *scene(n)))

print(f"# {os.cpu_count()} CPU cores, jax {jax.__version__}, float64")
print(
    "| mesh | triangles | pairs before | steps | time (s) | compile (s) | pairs after | max move / diag | "
    "mean move / diag | worst edge ratio | Adam baseline: pairs after (steps) |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, vertices, faces in meshes:
    before = len(tt.find_intersections(vertices, faces))
    first = tt.untangle(vertices, faces)
    result = tt.untangle(vertices, faces)
    out = np.asarray(result.vertices)
    e = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    ratio = np.linalg.norm(out[e[:, 0]] - out[e[:, 1]], axis=1) / np.linalg.norm(
        vertices[e[:, 0]] - vertices[e[:, 1]], axis=1
    )
    worst = min(ratio.min(), 1 / ratio.max())
    adam_pairs, adam_steps = adam_baseline(vertices, faces, args.baseline_steps)
    print(
        f"| {name} | {len(faces):,} | {before} | {int(result.iterations)} | {result.seconds:.2f} | "
        f"{max(first.seconds - result.seconds, 0):.1f} | {int(result.num_intersections)} | "
        f"{float(result.max_displacement):.3f} | {float(result.mean_displacement):.4f} | {worst:.2f} | "
        f"{adam_pairs} ({adam_steps}) |",
        flush=True,
    )

"""untangle as a JAX operator: what calling it inside ``jax.jit`` costs over the eager call, on the
ISIR meshes, for the solve and for its gradient (a VJP of a weighted sum of the vertices).

Run: python benchmarks/operator.py [--repeats 5] [--markdown docs/benchmarks.md]
Baseline: the eager ``untangle`` (and eager ``jax.grad``) on the same mesh in the same process.
Every time is the median of ``--repeats`` warm calls (compiles excluded: each is called once before),
the eager and the jitted call alternated. Inside ``jit`` the solver runs through ``jax.pure_callback``
and its VJP finds the forward pass's phase-2 set-up among the last few solves.
"""

import argparse
import glob
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Output  # noqa: E402

from tests.meshes import load_obj_triangulated  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--only", nargs="*", help="mesh names to run (default: all)")
parser.add_argument("--markdown", help="write the table into this page (section operator)")
args = parser.parse_args()
out = Output()
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "benchmarks", "isir-misc")


def paired_seconds(baseline, other, *arguments):
    """Median wall times of ``baseline(*arguments)`` and ``other(*arguments)`` over ``--repeats``
    calls each, alternated (so that a slow spell of the machine hits both), after a first call each."""
    times = ([], [])
    for function in (baseline, other):
        jax.block_until_ready(function(*arguments))
    for _ in range(args.repeats):
        for function, kept in zip((baseline, other), times, strict=True):
            start = time.perf_counter()
            jax.block_until_ready(function(*arguments))
            kept.append(time.perf_counter() - start)
    return float(np.median(times[0])), float(np.median(times[1]))


out("| mesh | faces | eager s | inside jit s | ratio | eager grad s | grad inside jit s | ratio |")
out("|---|---:|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(root, "*.obj"))):
    name = os.path.splitext(os.path.basename(path))[0]
    if args.only and name not in args.only:
        continue
    vertices, faces = load_obj_triangulated(path)
    x = jnp.asarray(vertices)
    weights = jnp.asarray(np.random.default_rng(0).normal(size=vertices.shape))

    def solve(v, faces=faces):
        return tt.untangle(v, faces).vertices

    def loss(v, faces=faces, weights=weights):
        return jnp.sum(weights * tt.untangle(v, faces).vertices)

    eager, inside = paired_seconds(solve, jax.jit(solve), x)
    eager_grad, inside_grad = paired_seconds(jax.grad(loss), jax.jit(jax.grad(loss)), x)
    same = np.array_equal(np.asarray(jax.jit(solve)(x)), np.asarray(solve(x)))
    if not same:
        raise SystemExit(f"{name}: the result inside jit differs from the eager one")
    out(
        f"| {name} | {len(faces)} | {eager:.3f} | {inside:.3f} | {inside / eager:.2f} | {eager_grad:.3f} | "
        f"{inside_grad:.3f} | {inside_grad / eager_grad:.2f} |"
    )
    jax.clear_caches()
out()
out(f"Median of {args.repeats} warm calls each, alternated; the results inside jit equal the eager ones bit for bit.")
out.write(args.markdown, "operator")

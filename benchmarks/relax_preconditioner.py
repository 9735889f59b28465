"""Phase 2 (relax) on the ISIR meshes with the multigrid preconditioner of the per-edge stiffness
matrix (``stiffness_matrix``: each spring weighted by its own rest length), against the uniform
spring weight it replaced (``2 / 3 h^2`` for every edge), in the same run.

Run: python benchmarks/relax_preconditioner.py [--starts 3] [--only NAME ...]

Relax's path is sensitive to the last bits of its arithmetic (a change that only rounds differently
moves the step count by 10 %), so each mesh is relaxed from phase 1's result and from ``starts - 1``
copies of it moved by 1e-9 h (random, seeded); the table gives means and ranges over those starts.
Phase 1 runs once per mesh and is not timed; wall time excludes compilation (a first relax from the
unperturbed start is run and discarded for each preconditioner).
"""

import argparse
import dataclasses
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

jax.config.update("jax_enable_x64", True)

from tritri_jax._elastic import laplacian_matrix  # noqa: E402
from tritri_jax._multigrid import multigrid  # noqa: E402
from tritri_jax._untangle import UntangleOptions, _normalise, _relax_setup, _run_phase1, _run_relax  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tests.meshes import load_obj_triangulated  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--starts", type=int, default=3)
parser.add_argument("--only", nargs="*", help="mesh names to run (default: all)")
args = parser.parse_args()

MESHES = ["cinquefoil_knot", "figure_of_eight_knot", "mobius_strip", "pretzel", "three_twist_knot", "trefoil_knot"]
root = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks", "isir-misc")


def uniform_stiffness(problem, settings):
    """The matrix before per-edge weights: every spring's ``2 / (3 l_e^2)`` taken as ``2 / (3 h^2)``."""
    lap = laplacian_matrix(problem.edges_np, problem.theta.shape[0])
    identity = sp.identity(problem.theta.shape[0])
    return (2 / problem.h**2) * (settings.bending * (lap.T @ lap) + lap / 3 + settings.pull * identity)


def relax_from(problem, settings, starts, setup):
    """``(steps, CG iterations, seconds, gradient norm)`` per start, after a discarded warm-up run."""
    _run_relax(problem, settings, starts[0], setup)
    rows = []
    for x in starts:
        begin = time.perf_counter()
        out, _, (steps, cg, _, gradient) = _run_relax(problem, settings, x, setup)
        jax.block_until_ready(out)
        rows.append((steps, cg, time.perf_counter() - begin, gradient))
    return np.array(rows)


def spread(values, digits=0):
    return f"{values.mean():.{digits}f} ({values.min():.{digits}f}–{values.max():.{digits}f})"


print(f"# {os.cpu_count()} CPU cores, jax {jax.__version__}, float64, {args.starts} starts per mesh")
print(
    "| mesh | per-edge: Newton steps | CG iterations | time (s) | uniform: Newton steps | CG iterations | "
    "time (s) | time ratio per-edge / uniform | largest final ‖∇E‖∞ |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
ratios = []
for name in args.only or MESHES:
    vertices, faces = load_obj_triangulated(os.path.join(root, f"{name}.obj"))
    settings = UntangleOptions()
    problem = _normalise(np.asarray(vertices, np.float64), np.asarray(faces), jnp.float64)
    x1, remaining, _, _ = _run_phase1(problem, settings, None)
    assert len(remaining) == 0, f"{name}: phase 1 left {len(remaining)} pairs"
    x1 = np.asarray(x1)
    starts = [jnp.asarray(x1)] + [
        jnp.asarray(x1 + 1e-9 * problem.h * np.random.default_rng(seed).normal(size=x1.shape))
        for seed in range(1, args.starts)
    ]
    per_edge = _relax_setup(problem, settings, starts[0])
    uniform = dataclasses.replace(
        per_edge, preconditioner=multigrid(uniform_stiffness(problem, settings), dtype=problem.theta.dtype)
    )
    new, old = relax_from(problem, settings, starts, per_edge), relax_from(problem, settings, starts, uniform)
    ratio = new[:, 2].mean() / old[:, 2].mean()
    ratios.append(ratio)
    print(
        f"| {name} | {spread(new[:, 0], 1)} | {spread(new[:, 1])} | {spread(new[:, 2], 2)} | {spread(old[:, 0], 1)} | "
        f"{spread(old[:, 1])} | {spread(old[:, 2], 2)} | {ratio:.2f} | {max(new[:, 3].max(), old[:, 3].max()):.1e} |",
        flush=True,
    )
print(f"\nGeometric mean of the time ratios: {np.exp(np.mean(np.log(ratios))):.2f}")

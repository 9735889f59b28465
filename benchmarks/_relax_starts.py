"""Shared by the relax benchmarks: phase 1 once per ISIR mesh, then relax from its result and from
copies moved by 1e-9 h, so that two formulations are compared over several paths in one run.

Relax's path is sensitive to the last bits of its arithmetic (a change that only rounds differently
moves the step count by 10 %): one run per formulation cannot compare them.
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from tritri_jax._phase1 import run_phase1  # noqa: E402
from tritri_jax._phase2 import pad_like, phase2_setup, run_relax  # noqa: E402
from tritri_jax._untangle import UntangleOptions, _normalise  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tests.meshes import load_obj_triangulated  # noqa: E402

MESHES = ["cinquefoil_knot", "figure_of_eight_knot", "mobius_strip", "pretzel", "three_twist_knot", "trefoil_knot"]
ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks", "isir-misc")


def phase1_starts(name, settings: UntangleOptions, count: int):
    """``(problem, starts)``: phase 1's result on the mesh and ``count - 1`` copies of it moved by
    1e-9 h (random, seeded). Phase 1 is not timed."""
    vertices, faces = load_obj_triangulated(os.path.join(ROOT, f"{name}.obj"))
    problem = _normalise(np.asarray(vertices, np.float64), np.asarray(faces), jnp.float64)
    x1, remaining, *_ = run_phase1(problem, settings, None)
    assert len(remaining) == 0, f"{name}: phase 1 left {len(remaining)} pairs"
    x1 = np.asarray(x1)
    moved = [x1 + 1e-9 * problem.h * np.random.default_rng(seed).normal(size=x1.shape) for seed in range(1, count)]
    return problem, [jnp.asarray(x) for x in [x1, *moved]]


def relax_from(problem, settings: UntangleOptions, starts, setup=None):
    """``(steps, CG iterations, seconds, gradient norm)`` per start, after a discarded warm-up run
    (compilation is not timed); ``setup``: a ``RelaxSetup`` of ``phase2_setup`` (default: ``untangle``'s)."""
    theta, default = phase2_setup(problem, settings)
    setup = setup or default
    run_relax(theta, settings, pad_like(starts[0], theta), setup)
    rows = []
    for x in starts:
        begin = time.perf_counter()
        out, _, (steps, cg, _, gradient) = run_relax(theta, settings, pad_like(x, theta), setup)
        jax.block_until_ready(out)
        rows.append((steps, cg, time.perf_counter() - begin, gradient))
    return np.array(rows)


def spread(values, digits=0):
    """Mean (min–max)."""
    return f"{values.mean():.{digits}f} ({values.min():.{digits}f}–{values.max():.{digits}f})"


def table_header(new: str, old: str, starts: int):
    print(f"# {os.cpu_count()} CPU cores, jax {jax.__version__}, float64, {starts} starts per mesh")
    print(
        f"| mesh | {new}: Newton steps | CG iterations | time (s) | {old}: Newton steps | CG iterations | "
        f"time (s) | time ratio | largest final ‖∇E‖∞ |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def table_row(name, new, old):
    """Print one mesh's row; returns the ratio of the mean times, new / old."""
    ratio = new[:, 2].mean() / old[:, 2].mean()
    print(
        f"| {name} | {spread(new[:, 0], 1)} | {spread(new[:, 1])} | {spread(new[:, 2], 2)} | {spread(old[:, 0], 1)} | "
        f"{spread(old[:, 1])} | {spread(old[:, 2], 2)} | {ratio:.2f} | {max(new[:, 3].max(), old[:, 3].max()):.1e} |",
        flush=True,
    )
    return ratio

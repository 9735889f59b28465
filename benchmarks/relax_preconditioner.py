"""Phase 2 (relax) on the ISIR meshes with the multigrid preconditioner of the per-edge stiffness
matrix (``stiffness_matrix``: each spring weighted by its own rest length), against the uniform
spring weight it replaced (``2 / 3 h^2`` for every edge), in the same run.

Run: python benchmarks/relax_preconditioner.py [--starts 3] [--only NAME ...]

Each mesh is relaxed from phase 1's result and from ``starts - 1`` copies of it moved by 1e-9 h
(``_relax_starts``); the table gives means and ranges over those starts. Wall time excludes
compilation (a first relax is run and discarded for each preconditioner).
"""

import argparse
import dataclasses

import numpy as np
import scipy.sparse as sp
from _relax_starts import MESHES, phase1_starts, relax_from, table_header, table_row

from tritri_jax._elastic import laplacian_matrix
from tritri_jax._multigrid import multigrid
from tritri_jax._phase2 import phase2_setup
from tritri_jax._untangle import UntangleOptions

parser = argparse.ArgumentParser()
parser.add_argument("--starts", type=int, default=3)
parser.add_argument("--only", nargs="*", help="mesh names to run (default: all)")
args = parser.parse_args()


def uniform_stiffness(problem, settings):
    """The matrix before per-edge weights: every spring's ``2 / (3 l_e^2)`` taken as ``2 / (3 h^2)``."""
    lap = laplacian_matrix(problem.edges_np, problem.theta.shape[0])
    identity = sp.identity(problem.theta.shape[0])
    return (2 / problem.h**2) * (settings.bending * (lap.T @ lap) + lap / 3 + settings.pull * identity)


table_header("per-edge", "uniform", args.starts)
ratios = []
for name in args.only or MESHES:
    settings = UntangleOptions()
    problem, starts = phase1_starts(name, settings, args.starts)
    theta, per_edge = phase2_setup(problem, settings)
    uniform = dataclasses.replace(
        per_edge,
        preconditioner=multigrid(
            uniform_stiffness(problem, settings), dtype=problem.theta.dtype, padded_rows=theta.shape[0]
        ),
    )
    new, old = relax_from(problem, settings, starts, per_edge), relax_from(problem, settings, starts, uniform)
    ratios.append(table_row(name, new, old))
print(f"\nGeometric mean of the time ratios (per-edge / uniform): {np.exp(np.mean(np.log(ratios))):.2f}")

"""Phase 2 (relax) on the ISIR meshes with the barrier's Hessian blocks built from the distinct
primitive pairs within dhat (``_barrier._live_blocks``), against the blocks it replaced:
differentiating all 15 primitive pairs of every close face pair at once, in the same run.

Run: python benchmarks/relax_barrier_blocks.py [--starts 3] [--only NAME ...]

Each mesh is relaxed from phase 1's result and from ``starts - 1`` copies of it moved by 1e-9 h
(``_relax_starts``); the table gives means and ranges over those starts. Wall time excludes
compilation (a first relax is run and discarded for each form). Both forms are the same matrix
up to rounding; only the cost of building it differs.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _relax_starts import MESHES, phase1_starts, relax_from, table_header, table_row
from jax import lax

from tests.test_distance import pair_gauss_newton_reference as pair_gauss_newton  # the block of all 15 at once
from tritri_jax import _relax
from tritri_jax._barrier import BlockSystem, pair_reach, shared_vertices
from tritri_jax._distance import pair_barrier
from tritri_jax._mesh_energy import pair_triangles
from tritri_jax._relax import relax_jit
from tritri_jax._untangle import UntangleOptions


def pair_hessian(u, v, same, dhat_sq):
    """The exact Hessian of one face pair's barrier, all 15 primitive pairs differentiated."""
    energy = lambda x: pair_barrier(x[:9].reshape(3, 3), x[9:].reshape(3, 3), same, dhat_sq)  # noqa: E731
    return jax.hessian(energy)(jnp.concatenate([u.reshape(-1), v.reshape(-1)]))


def per_face_pair(vertices, faces, pairs, count, dhat, *, exact, chunk=16):
    """The replaced form: the block of each of the first ``count`` face pairs, 16 at a time."""
    capacity = pairs.shape[0]
    padded = jnp.concatenate([pairs, jnp.full((chunk, 2), -1, pairs.dtype)])

    def body(k, blocks):
        rows = lax.dynamic_slice_in_dim(padded, k * chunk, chunk)
        u, v = pair_triangles(vertices, faces, rows)
        arguments = (u, v, shared_vertices(faces, rows), pair_reach(dhat, rows) ** 2)
        values = lax.cond(
            exact,
            lambda: jax.vmap(pair_hessian)(*arguments),
            lambda: jax.vmap(pair_gauss_newton)(*arguments),
        )
        live = k * chunk + jnp.arange(chunk) < count
        return lax.dynamic_update_slice_in_dim(blocks, jnp.where(live[:, None, None], values, 0), k * chunk, 0)

    blocks = jnp.zeros((capacity + chunk, 18, 18), vertices.dtype)
    blocks = lax.fori_loop(0, (jnp.minimum(count, capacity) + chunk - 1) // chunk, body, blocks)
    return BlockSystem(faces[jnp.maximum(pairs, 0)].reshape(-1, 6), blocks[:capacity])


def relax_per_face_pair(problem, settings, starts):
    """Relax with the replaced blocks (``relax`` recompiled with them)."""
    saved = _relax.barrier_blocks
    _relax.barrier_blocks = per_face_pair
    relax_jit.clear_cache()
    try:
        return relax_from(problem, settings, starts)
    finally:
        _relax.barrier_blocks = saved
        relax_jit.clear_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="mesh names to run (default: all)")
    args = parser.parse_args()
    table_header("distinct primitive pairs", "all 15 per face pair", args.starts)
    ratios = []
    for name in args.only or MESHES:
        settings = UntangleOptions()
        problem, starts = phase1_starts(name, settings, args.starts)
        new = relax_from(problem, settings, starts)
        old = relax_per_face_pair(problem, settings, starts)
        ratios.append(table_row(name, new, old))
    mean = np.exp(np.mean(np.log(ratios)))
    print(f"\nGeometric mean of the time ratios (distinct primitive pairs / all 15): {mean:.2f}")


if __name__ == "__main__":
    main()

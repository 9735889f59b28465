"""Phase 2's driver on the host: its rest shape and buffers for a mesh (padded to the mesh's shape
bucket), the barrier's reach chosen for the mesh, and ``relax`` run until stationary or stuck, with
its buffers grown where one fills up. ``_untangle`` calls it after phase 1."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from ._elastic import elastic_pattern, stiffness_matrix
from ._multigrid import multigrid
from ._neighbours import RelaxSetup, adjacent_face_pairs
from ._relax import UNEVEN_SHARE, close_count_jit, relax_jit, uneven_share
from ._sizes import bucket, pad_relax, slot_bucket

if TYPE_CHECKING:
    from ._untangle import UntangleOptions, _Problem

STATIONARY = 1e-6  # max-norm of phase 2's (dimensionless) gradient accepted as a stationary point


def phase2_setup(problem: _Problem, settings: UntangleOptions, *, pad: bool = True):
    """Phase 2's rest shape and its ``RelaxSetup`` (buffers not yet sized: ``size_buffers``).

    ``pad``: on the mesh padded to its shape bucket (``_sizes.pad_relax``: vertices, faces, edges,
    adjacent face pairs; the multigrid's levels and every sparse row width too), so that the meshes
    of one bucket share phase 2's compiled code and persistent-cache entries; the returned rest
    shape then has the padding rows, and so must every point given to phase 2 (``pad_like``)."""
    theta, faces, edges = np.asarray(problem.theta), np.asarray(problem.faces), problem.edges_np
    adjacent, counts, width = adjacent_face_pairs(faces), {}, None
    if pad:
        theta, faces, edges, adjacent = pad_relax(theta, faces, edges, adjacent)
        counts = dict(num_faces=jnp.int32(problem.faces.shape[0]), num_edges=jnp.int32(len(problem.edges_np)))
        width = slot_bucket
    num_faces, dtype = len(faces), problem.theta.dtype
    stiffness = stiffness_matrix(problem.theta, problem.edges_np, bending=settings.bending, pull=settings.pull)
    setup = RelaxSetup(
        faces=jnp.asarray(faces),
        edges=jnp.asarray(edges),
        adjacent=jnp.asarray(adjacent),
        capacity=bucket(64 * num_faces),  # sized by ``size_buffers`` (the pretzel: 10 per face at 0.25 h)
        active_capacity=bucket(num_faces // 8),
        survivor_capacity=bucket(4 * num_faces),
        bending=settings.bending,
        pull=settings.pull,
        margin=settings.margin,
        local_reach=local_reach_on(settings, problem),
        barrier_weight=settings.barrier_weight,
        max_step=settings.relax_step,
        pattern=elastic_pattern(edges, len(theta), dtype, width=width),
        preconditioner=multigrid(stiffness, dtype=dtype, padded_rows=len(theta) if pad else None),
        **counts,
    )
    return jnp.asarray(theta, dtype), setup


def pad_like(x, theta):
    """``x`` (phase 1's vertices) with ``theta``'s padding rows: there the pull to ``theta`` is zero."""
    return jnp.concatenate([jnp.asarray(x, theta.dtype), theta[x.shape[0] :]])


def local_reach_on(settings: UntangleOptions, problem: _Problem) -> bool:
    """``settings.local_reach`` as phase 2 takes it: ``"auto"`` is on where at least ``UNEVEN_SHARE``
    of the faces would get a smaller reach (``_relax.uneven_share``)."""
    if settings.local_reach != "auto":
        return bool(settings.local_reach)
    share = uneven_share(np.asarray(problem.theta, np.float64), np.asarray(problem.faces), settings.margin, problem.h)
    return share >= UNEVEN_SHARE


def size_buffers(theta, settings: UntangleOptions, x1, setup: RelaxSetup):
    """Size phase 2's buffers from the neighbours at ``x1`` (growing until nothing overflows there,
    with room for the neighbours to grow by half, the close pairs to quadruple and the crossing
    check's survivors to double: measured on the cinquefoil knot, a list 96 % full at ``x1``
    overflowed two Newton steps later, and the run had to be resized, recompiled and resumed)."""
    while True:
        close, survivors, count, overflowed = close_count_jit(x1, theta, setup)
        if bool(overflowed):
            setup = dataclasses.replace(setup, capacity=max(2 * setup.capacity, bucket(3 * int(count) // 2 + 1)))
            continue
        if 3 * int(count) > 2 * setup.capacity:
            setup = dataclasses.replace(setup, capacity=bucket(3 * int(count) // 2 + 1))
        if 4 * int(close) > setup.active_capacity:
            setup = dataclasses.replace(setup, active_capacity=bucket(4 * int(close)))
        if 2 * int(survivors) > setup.survivor_capacity:  # a full one rejects every trial point
            setup = dataclasses.replace(setup, survivor_capacity=bucket(2 * int(survivors)))
        return setup


def run_relax(theta, settings: UntangleOptions, x1, setup: RelaxSetup, floor=None):
    """Phase 2 from ``x1`` (both stages of ``relax``) on the rest shape ``theta`` with ``setup``
    (``phase2_setup``; sized again at ``x1``, its capacities at least ``floor``), resumed (with larger
    buffers where one was full) if it stalled short of a stationary point or stopped on a full
    buffer, at most 4 runs besides those that stopped where a step outgrew the close-pair buffer
    (resumed with that buffer at least doubled, up to the neighbour list's size).

    Returns ``(x, setup, (Newton steps, CG iterations, energy, gradient norm))``."""
    if floor is not None:
        capacity, active, survivors = map(max, floor, relax_capacities(setup))
        setup = dataclasses.replace(setup, capacity=capacity, active_capacity=active, survivor_capacity=survivors)
    setup = size_buffers(theta, settings, x1, setup)
    x, steps, cg_total, runs = x1, 0, 0, 0
    run = functools.partial(relax_jit, theta=theta, cg_iters=settings.relax_cg_iters, tol=STATIONARY / 2)
    while runs < 4:
        result, blocked = run(x, setup=setup, iters=settings.relax_iters, polish=settings.relax_polish)
        x = result.x
        steps += int(result.iterations)
        cg_total += int(result.cg_iterations)
        if bool(blocked) and setup.active_capacity < setup.capacity:  # the close pairs outgrew their buffer
            setup = dataclasses.replace(setup, active_capacity=bucket(2 * setup.active_capacity))
            setup = size_buffers(theta, settings, x, setup)
            continue
        runs += 1
        finite = np.isfinite(float(result.energy))  # not finite: a buffer filled up at the new point
        stalled = bool(result.stalled)
        if finite and (float(result.gradient_norm) < STATIONARY or not stalled):
            break
        # the same size after a stall: a plain retry, the step cap and the operator reset
        setup = size_buffers(theta, settings, x, setup)
    return x, setup, (steps, cg_total, float(result.energy), float(result.gradient_norm))


def relax_capacities(setup: RelaxSetup):
    return setup.capacity, setup.active_capacity, setup.survivor_capacity

"""Layer 4/5: untangling, phase 1: smoothed descent on the intersection-curve length.

Recipe (DESIGN.md §1, "What did reach zero"): on a mesh scaled to unit bounding-box diagonal, with
``h`` its mean edge length, each step

1. re-detects the crossing pairs (broad phase + float predicate, inside ``jit``);
2. takes the gradient ``g`` of the summed crossing-segment length $\\sum \\ell$ (it vanishes
   continuously as a crossing shrinks or a poke retracts, and does not fade);
3. smooths it in the metric of the mesh Laplacian, $d = -(I + \\lambda L)^{-2} g$, two matrix-free
   CG solves ("large steps", Nicolet et al. 2021);
4. scales the step so the largest vertex move is ``step_fraction * h`` (no line search);
5. halves $\\lambda$ (down to ``min_smoothing``) when ``patience`` steps set no new minimum of the
   crossing count, and keeps the best state seen.

It stops when the float predicate finds no crossing pair; the eager wrapper then certifies the
result with the exact detection of ``find_intersections`` and resumes if that disagrees.
Phase 2 (elastic relaxation) and the implicit-function VJP are not implemented yet.
"""

import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.sparse.linalg import cg

from ._broad_phase import candidate_pairs
from ._kernels import crossing_length, intersects
from ._mesh_energy import check_mesh, find_intersections, pair_mask, pair_triangles, scatter_to_vertices
from ._types import Array, Bool, Float, Int


class UntangleResult(NamedTuple):
    """Result of [`untangle`][tritri_jax.untangle].

    - ``vertices``: ``(V, 3)`` the untangled positions (the best state found), in the input's frame.
    - ``converged``: the exact detection finds no crossing pair in ``vertices``.
    - ``iterations``: phase-1 steps taken.
    - ``num_intersections``: crossing pairs left in ``vertices`` (exact detection).
    - ``history``: ``(iterations,)`` crossing-pair counts (float predicate) at each step's start.
    - ``max_displacement``, ``mean_displacement``: vertex moves relative to the bounding-box diagonal.
    - ``seconds``: wall time of the solve (compile included on the first call of a shape).
    """

    vertices: Float[Array, "V 3"]
    converged: Bool[Array, ""]
    iterations: Int[Array, ""]
    num_intersections: Int[Array, ""]
    history: Int[Array, " steps"]
    max_displacement: Float[Array, ""]
    mean_displacement: Float[Array, ""]
    seconds: float


class _State(NamedTuple):
    x: Array
    best_x: Array
    best_count: Array
    count: Array
    smoothing: Array
    stall: Array
    step: Array
    history: Array
    overflowed: Array


def _edges(faces):
    e = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    return np.unique(np.sort(e, axis=1), axis=0).astype(np.int32)


def _laplacian(x, edges, degree):
    """Uniform graph Laplacian $L x$ (PSD): degree times x minus the sum of neighbours."""
    n = x.shape[0]
    neighbours = jax.ops.segment_sum(x[edges[:, 1]], edges[:, 0], n) + jax.ops.segment_sum(
        x[edges[:, 0]], edges[:, 1], n
    )
    return degree[:, None] * x - neighbours


def _crossings(x, faces, capacity):
    candidates = candidate_pairs(x, faces, capacity=capacity)
    u, v = pair_triangles(x, faces, candidates.pairs)
    crossing = jax.vmap(intersects)(u, v) & pair_mask(candidates)
    return candidates, u, v, crossing


def _length_gradient(x, faces, candidates, u, v, crossing):
    gu, gv = jax.vmap(jax.grad(crossing_length, argnums=(0, 1)))(u, v)
    g = jnp.concatenate([gu, gv], axis=1).reshape(-1, 18)
    g = jnp.where(crossing[:, None], g, 0)
    corners = faces[jnp.maximum(candidates.pairs, 0)].reshape(-1, 6)
    return scatter_to_vertices(g, corners, x.shape[0])


def _phase1(
    x0, faces, edges, degree, h, state, *, capacity, max_steps, step_fraction, min_smoothing, patience, cg_iters
):
    def smooth(g, lam):
        def op(y):
            return y + lam * _laplacian(y, edges, degree)

        y, _ = cg(op, g, x0=g, maxiter=cg_iters)
        y, _ = cg(op, y, x0=y, maxiter=cg_iters)
        return y

    def cond(s):
        return (s.step < max_steps) & (s.count != 0) & ~s.overflowed

    def body(s):
        candidates, u, v, crossing = _crossings(s.x, faces, capacity)
        count = jnp.sum(crossing).astype(jnp.int32)
        improved = count < s.best_count
        best_x = jnp.where(improved, s.x, s.best_x)
        best_count = jnp.minimum(count, s.best_count)
        stall = jnp.where(improved, 0, s.stall + 1)
        lam = jnp.where(stall >= patience, jnp.maximum(s.smoothing / 2, min_smoothing), s.smoothing)
        stall = jnp.where(stall >= patience, 0, stall)
        g = _length_gradient(s.x, faces, candidates, u, v, crossing)
        d = -smooth(g, lam)
        largest = jnp.max(jnp.sqrt(jnp.sum(d * d, axis=1)))
        d = d * jnp.where(largest > 0, step_fraction * h / jnp.where(largest > 0, largest, 1), 0)
        moving = (count > 0) & ~candidates.overflowed
        return _State(
            x=jnp.where(moving, s.x + d, s.x),
            best_x=best_x,
            best_count=best_count,
            count=count,
            smoothing=lam,
            stall=stall,
            step=s.step + moving.astype(jnp.int32),
            history=s.history.at[s.step].set(count, mode="drop"),
            overflowed=candidates.overflowed,
        )

    return lax.while_loop(cond, body, state)


_phase1_jit = jax.jit(
    _phase1, static_argnames=("capacity", "max_steps", "step_fraction", "min_smoothing", "patience", "cg_iters")
)


def untangle(
    vertices,
    faces,
    *,
    max_steps: int = 400,
    smoothing: float = 20.0,
    min_smoothing: float = 1.25,
    step_fraction: float = 0.2,
    patience: int = 10,
    cg_iters: int = 50,
    capacity: int | None = None,
) -> UntangleResult:
    """Move the vertices of a self-intersecting mesh until no two faces cross (phase 1).

    Descent on the length of the intersection curve, smoothed by the mesh Laplacian, with a capped
    step and the crossings re-detected every step (see the module docstring for the recipe). The
    result is certified by the exact [`find_intersections`][tritri_jax.find_intersections]:
    ``converged`` is true only when it finds no pair. Connectivity is never changed. Several meshes
    passing through each other are one mesh with more faces.

    **Arguments:** ``vertices`` ``(V, 3)``, ``faces`` ``(F, 3)``; ``max_steps``: step budget;
    ``smoothing``: initial $\\lambda$; ``min_smoothing``: its floor; ``step_fraction``: largest vertex
    move per step, in mean edge lengths; ``patience``: steps without a new minimum before halving
    $\\lambda$; ``cg_iters``: CG iterations per solve; ``capacity``: broad-phase slots (grown on
    overflow).

    ```python
    >>> import jax, tritri_jax as tt
    >>> jax.config.update("jax_enable_x64", True)
    >>> vertices, faces = tt.scenes.two_spheres(8)
    >>> result = tt.untangle(vertices, faces)
    >>> bool(result.converged), int(result.num_intersections)
    (True, 0)

    ```
    """
    vertices, faces = check_mesh(vertices, faces)
    start = time.perf_counter()
    v_np, f_np = np.asarray(vertices, np.float64), np.asarray(faces)
    lo, hi = v_np.min(0), v_np.max(0)
    centre, diagonal = 0.5 * (lo + hi), float(np.linalg.norm(hi - lo)) or 1.0
    x0 = jnp.asarray((v_np - centre) / diagonal, vertices.dtype)
    edges_np = _edges(f_np)
    h = float(np.linalg.norm(np.diff(((v_np - centre) / diagonal)[edges_np], axis=1), axis=-1).mean())
    edges = jnp.asarray(edges_np)
    degree = jax.ops.segment_sum(jnp.ones(2 * len(edges_np), x0.dtype), edges.reshape(-1), x0.shape[0])
    capacity = capacity or max(1024, 1 << math.ceil(math.log2(16 * max(len(f_np), 1))))
    big = jnp.iinfo(jnp.int32).max
    state = _State(
        x=x0,
        best_x=x0,
        best_count=jnp.int32(big),
        count=jnp.int32(-1),
        smoothing=jnp.asarray(smoothing, x0.dtype),
        stall=jnp.int32(0),
        step=jnp.int32(0),
        history=jnp.full((max_steps,), -1, jnp.int32),
        overflowed=jnp.bool_(False),
    )
    while True:
        state = _phase1_jit(
            x0,
            faces,
            edges,
            degree,
            h,
            state,
            capacity=capacity,
            max_steps=max_steps,
            step_fraction=step_fraction,
            min_smoothing=min_smoothing,
            patience=patience,
            cg_iters=cg_iters,
        )
        if bool(state.overflowed):
            capacity *= 2
            state = state._replace(overflowed=jnp.bool_(False))
            continue
        final = state.x if int(state.count) == 0 else state.best_x
        remaining = find_intersections(final, faces)
        if len(remaining) and int(state.count) == 0 and int(state.step) < max_steps:
            # The float predicate saw none, the exact one disagrees (touching pairs): keep going.
            state = state._replace(count=jnp.int32(-1), x=final + 0.0)
            continue
        break
    out = np.asarray(final, np.float64) * diagonal + centre
    move = np.linalg.norm(out - v_np, axis=1) / diagonal
    steps = int(state.step)
    return UntangleResult(
        vertices=jnp.asarray(out, vertices.dtype),
        converged=jnp.bool_(len(remaining) == 0),
        iterations=jnp.int32(steps),
        num_intersections=jnp.int32(len(remaining)),
        history=state.history[:steps],
        max_displacement=jnp.asarray(move.max() if len(move) else 0.0),
        mean_displacement=jnp.asarray(move.mean() if len(move) else 0.0),
        seconds=time.perf_counter() - start,
    )

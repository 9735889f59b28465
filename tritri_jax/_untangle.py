"""Layer 5: the solver behind ``untangle`` (host-side, on concrete arrays): phase 1 (``_phase1``),
phase 2 (``_phase2``, ``_relax``), both certified by the exact detection, and the VJP of its result (implicit at
phase 2's stationary point); ``method="paper"`` runs the paper's route (``_paper_route``) instead of
phase 1. ``_operator`` makes it a JAX operator."""

import dataclasses
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._detect import find_intersections
from ._elastic import unique_edges
from ._memory import release_if_crowded
from ._paper_route import paper_route_jit
from ._phase1 import Capacities, run_phase1
from ._phase2 import STATIONARY, pad_like, phase2_setup, relax_capacities, run_relax, size_buffers
from ._relax import adjoint_jit
from ._sizes import shape_bucket
from ._topology import solve_mesh
from ._types import Array, Bool, Float, Int


class UntangleOptions(NamedTuple):
    """The options of [`untangle`][tritri_jax.untangle] (its keyword arguments), with their defaults.

    Phase 1: ``max_steps`` per attempt; ``restarts``: attempts after the first that did not reach zero,
    each from the input, with a quarter of the smoothing and half the step alternately;
    ``smoothing``: the initial $\\lambda$ of $(I + \\lambda L)^{-2}$, halved down to ``min_smoothing``
    after ``patience`` steps that did not take a tenth off the crossing count; ``step_fraction``:
    the largest vertex move per step; ``cg_iters`` per smoothing solve. The smoothing counts in
    squared edge rings and the step in phase 1's length unit, the mean edge length ``h`` or
    ``resolution`` (a fraction of the bounding-box diagonal) where the mesh is finer: a finer mesh then
    steps as far and smooths over as much of the surface as one at ``resolution``, so its step count
    does not grow with its face count (the smoothing in ``(resolution / h)^2`` rings, ``cg_iters``
    times ``resolution / h`` CG iterations); ``resolution=0``: always ``h``.
    ``fairing_steps``: after an attempt that ends with crossings left, up to this many implicit
    smoothing steps of the positions around the crossings (their rim held; a region twice phase 1's
    unit wide, doubled when a step does not lower the count) before the next attempt; 0: none.
    ``global_moves``: up to this many moves chosen from the intersection curves where an attempt
    stalls (a connected part moved clear of the one it crosses, before fairing; the side of a
    separating curve pushed back through the other sheet, after it), each kept only when the exact
    crossing count drops; the next attempt starts from the last one kept; 0: none.
    ``method``: ``"length"`` (the default phase 1) or ``"paper"`` (Newton on elastic + $\\kappa \\sum T$,
    $\\kappa$ from ``paper_kappa`` times 10 for each of ``paper_rounds`` rounds).
    Phase 2: ``relax`` (run it); up to ``relax_iters + relax_polish`` Newton steps, with a PSD
    Gauss-Newton operator far from the minimum and the exact Hessian near it (after ``relax_iters``
    steps also a little farther; none with ``relax_polish=0``); ``relax_cg_iters`` CG iterations
    each (preconditioned by a multigrid of the elastic stiffness);
    ``bending`` and ``pull`` weights of the elastic energy; ``margin``: the barrier's reach $\\hat d$
    in ``h``; ``local_reach``: each face's reach at most half its smallest rest altitude (for meshes
    whose edge lengths span orders of magnitude, where one reach pushes slivers apart at rest);
    ``"auto"`` (the default): on for a mesh where at least a tenth of the faces are that thin;
    ``barrier_weight`` $\\kappa$;
    ``relax_step``: the largest vertex move per Newton step, in ``h``.
    ``capacity``: broad-phase slots of phase 1 (default ``16 F``, grown on overflow).
    ``device_mesh``: a one-axis ``jax.sharding.Mesh`` over which phase 1's detection (every step's
    and the exact checks') is split, as in [`find_intersections`][tritri_jax.find_intersections];
    the rest runs as on one device, with the same result; phase 2 runs on one device. ``None``: one
    device.
    ``gradient_fallback``: what the VJP does where the implicit gradient is not available (the
    result is not phase 2's stationary point: ``relax=False``, phase 2 stopped short, or the result
    is not certified; or the adjoint CG solve stops above a relative residual of ``1e-8``):
    ``"raise"`` an error naming why; ``"approximate"``: at a certified point, the same adjoint solve
    there (the derivative of one more Newton step with the point held fixed; its last iterate if it
    did not converge; still an error where nothing is certified); ``"zero"``: a zero gradient, as
    ``jax.lax.stop_gradient``.

    ``untangle`` and ``Untangler`` reject counts and weights out of range (a negative count, a zero
    step) with a ``ValueError`` naming the option, before anything runs.

    ```python
    >>> import tritri_jax as tt
    >>> options = tt.UntangleOptions(step_fraction=0.1, relax=False)  # defaults for the rest
    >>> options.max_steps, options.step_fraction, options.relax
    (150, 0.1, False)
    >>> sorted(options._asdict())[:3]  # untangle(vertices, faces, **options._asdict()) takes them all
    ['barrier_weight', 'bending', 'capacity']

    ```
    """

    max_steps: int = 150
    restarts: int = 2
    smoothing: float = 80.0
    min_smoothing: float = 1.25
    step_fraction: float = 0.2
    resolution: float = 0.02
    patience: int = 10
    cg_iters: int = 50
    method: str = "length"
    paper_rounds: int = 6
    paper_kappa: float = 1.0
    relax: bool = True
    relax_iters: int = 30
    relax_polish: int = 120
    relax_cg_iters: int = 100
    bending: float = 1.0
    pull: float = 1e-2
    margin: float = 0.1
    local_reach: bool | str = "auto"
    barrier_weight: float = 1e-2
    relax_step: float = 0.25
    capacity: int | None = None
    fairing_steps: int = 8
    global_moves: int = 10
    gradient_fallback: str = "raise"
    device_mesh: jax.sharding.Mesh | None = None


GRADIENT_FALLBACKS = ("raise", "approximate", "zero")

# Options are static (no array leaves): an ``UntangleResult`` carrying them leaves a jitted function.
jax.tree_util.register_pytree_node(
    UntangleOptions, lambda options: ((), tuple(options)), lambda fields, _: UntangleOptions(*fields)
)


class UntangleResult(NamedTuple):
    """Result of [`untangle`][tritri_jax.untangle].

    - ``vertices``: ``(V, 3)`` the untangled positions (the best state found), in the input's frame.
    - ``converged``: the exact detection finds no crossing pair in ``vertices``.
    - ``iterations``: phase-1 steps taken, over all attempts; ``fairing_steps``: fairing steps taken
      where an attempt's descent stalled (0: descent alone finished; the ``fairing_steps`` option);
      ``global_moves``: global moves kept where descent stalled (a part moved clear, before
      fairing; a region pushed back, after it; the ``global_moves`` option);
      ``relax_iterations``, ``relax_cg_iterations``: phase 2's Newton steps and their CG iterations.
    - ``num_intersections``: crossing pairs left in ``vertices`` (exact detection). When it is not
      0, [`intersection_curves`][tritri_jax.intersection_curves]``(result.vertices, faces)`` groups
      them by intersection curve, longest first, with each curve's kind (what ``tritri-jax untangle
      --picture`` colours curve by curve).
    - ``history``: ``(iterations,)`` crossing-pair counts (float predicate) at each step's start
      (for ``method="paper"``: the count after each kappa round); ``history_length``: the
      intersection curve's length $\\sum \\ell$ there (in the input's units), what phase 1 descends on.
      Inside ``jit`` / ``vmap`` both have the longest length a solve can reach (``max_steps`` x
      (``restarts`` + 1), or ``paper_rounds``): the entries past ``iterations`` are ``-1`` and ``0``.
    - ``max_displacement``, ``mean_displacement``: vertex moves relative to the bounding-box diagonal.
    - ``worst_edge_ratio``: the smallest of (edge length / input length) and its inverse.
    - ``relax_energy``, ``relax_gradient_norm``: phase 2's energy and max-norm gradient at the end
      (NaN when phase 2 did not run); ``relax_converged``: that gradient is below ``1e-6``, a
      stationary point, where the implicit gradient is available.
    - ``seconds``: wall time of the solve (compile included on the first call of a shape; an array
      inside ``jit``).
    - ``options``: the [`UntangleOptions`][tritri_jax.UntangleOptions] used.

    ```python
    >>> import jax, tritri_jax as tt
    >>> jax.config.update("jax_enable_x64", True)
    >>> result = tt.untangle(*tt.scenes.two_spheres(6))
    >>> bool(result.converged), int(result.num_intersections), result.vertices.shape
    (True, 0, (124, 3))
    >>> int(result.history[0]) > 0, len(result.history) == int(result.iterations)  # counts per phase-1 step
    (True, True)
    >>> bool(result.worst_edge_ratio > 0.3), bool(result.relax_converged)
    (True, True)

    ```
    """

    vertices: Float[Array, "V 3"]
    converged: Bool[Array, ""]
    iterations: Int[Array, ""]
    fairing_steps: Int[Array, ""]
    global_moves: Int[Array, ""]
    num_intersections: Int[Array, ""]
    history: Int[Array, " steps"]
    history_length: Float[Array, " steps"]
    max_displacement: Float[Array, ""]
    mean_displacement: Float[Array, ""]
    worst_edge_ratio: Float[Array, ""]
    relax_iterations: Int[Array, ""]
    relax_cg_iterations: Int[Array, ""]
    relax_energy: Float[Array, ""]
    relax_gradient_norm: Float[Array, ""]
    relax_converged: Bool[Array, ""]
    seconds: float
    options: UntangleOptions


# The options that shape compiled code (static arguments, buffer sizes): calls that differ only in
# the others (step, smoothing, weights) run the same executables, so they never release them.
_STATIC_OPTIONS = ("max_steps", "patience", "method", "paper_rounds", "relax", "relax_iters")
_STATIC_OPTIONS += ("relax_polish", "relax_cg_iters", "capacity", "local_reach")


@dataclasses.dataclass(eq=False)
class Sizes:
    """Buffer capacities kept across the calls of one ``Untangler`` (grown, never shrunk): phase 1's
    detection (``Capacities``) and phase 2's lists (neighbours, close pairs, crossing-check
    survivors). Its later calls start at them, so they run the executables the first compiled
    instead of compiling for capacities sized to their own data."""

    phase1: Capacities | None = None
    relax: tuple[int, int, int] | None = None


# What the VJP of a result can be: phase 2's stationary point (the implicit gradient), a certified
# point that is not one (the adjoint there is an approximation), or an uncertified point (none).
IMPLICIT, APPROXIMATE, UNAVAILABLE = 0, 1, 2
FAILURES = (
    "untangle: the implicit gradient needs phase 2 to end at a stationary point of a certified mesh, and "
    "this result has none (relax=False, phase 2 stopped short, or its mesh failed the exact check); raise "
    "relax_iters or relax_polish, or pass gradient_fallback='approximate' or 'zero'",
    "untangle: no gradient: the result is not certified intersection-free (converged is false), so nothing "
    "is stationary there; give the solver more steps, or pass gradient_fallback='zero'",
    "untangle: the adjoint CG solve of the implicit gradient did not converge (the Hessian at the returned "
    "point may be singular or indefinite); pass gradient_fallback='approximate' to take its last iterate, "
    "or 'zero'",
)
_ADJOINT_RESIDUAL = 1e-8  # relative residual of the adjoint solve accepted as converged
_ADJOINT_ITERS = 2000  # preconditioned, the ISIR meshes take 250-400 (to 1e-12)


class Vjp:
    """The VJP of ``untangle``'s vertices at the point it returned (``x``: the solver's frame, without
    padding rows; ``problem=None``: fewer than two faces, the identity). ``prepared``: phase 2's
    ``(theta, setup, padded x)`` where it ended there, else built when first asked.

    The implicit function theorem at phase 2's stationary point ($\\nabla_x E(x^*, \\theta) = 0$) gives
    $\\partial x^* / \\partial \\theta = -H^{-1} \\partial_\\theta \\nabla_x E$: one adjoint CG solve with the
    exact Hessian. At a certified point that is not stationary the same solve is the derivative of one
    more Newton step from it with the point held fixed (``gradient_fallback="approximate"``)."""

    def __init__(self, problem, settings: UntangleOptions, x, status: int, gradient_norm=float("nan"), prepared=None):
        self.problem, self.settings, self.x, self.status = problem, settings, x, status
        self.gradient_norm, self.prepared = gradient_norm, prepared

    def failure(self, fallback: str) -> int:
        """0 if a gradient can be given with ``fallback`` (before solving), else 1 + the index of its
        ``FAILURES`` message."""
        if self.problem is None or self.status == IMPLICIT or fallback == "zero":
            return 0
        if self.status == APPROXIMATE:
            return 0 if fallback == "approximate" else 1
        return 2

    def apply(self, cotangent, fallback: str) -> tuple[np.ndarray, int]:
        """``(gradient, failure)``: the VJP of ``cotangent``, or zeros and 1 + the index of the
        ``FAILURES`` message that says why there is none."""
        cotangent = np.asarray(cotangent)
        if self.problem is None:  # nothing can cross: the identity, exactly
            return cotangent, 0
        failed = self.failure(fallback)
        if failed or (self.status != IMPLICIT and fallback == "zero"):
            return np.zeros_like(cotangent), failed
        if self.prepared is None:
            theta, setup = phase2_setup(self.problem, self.settings)
            padded = pad_like(self.x, theta)
            self.prepared = theta, size_buffers(theta, self.settings, padded, setup), padded
        theta, setup, padded = self.prepared
        diagonal = self.problem.diagonal
        scaled = pad_like(jnp.asarray(cotangent, theta.dtype) * diagonal, jnp.zeros_like(theta))
        gradient, residual = adjoint_jit(padded, theta, setup, scaled, cg_iters=_ADJOINT_ITERS)
        if not float(residual) <= _ADJOINT_RESIDUAL and fallback != "approximate":
            return np.zeros_like(cotangent), 3
        return np.asarray(gradient[: self.x.shape[0]] / diagonal, cotangent.dtype), 0

    def __call__(self, cotangent, fallback: str) -> np.ndarray:
        """The VJP of ``cotangent``; a ``ValueError`` that says why where there is none."""
        return _or_raise(*self.apply(cotangent, fallback), self.gradient_norm)


def _or_raise(gradient, failed: int, gradient_norm: float):
    if failed:
        norm = f" (phase 2's gradient norm: {gradient_norm:.3g})" if failed == 1 else ""
        raise ValueError(FAILURES[failed - 1] + norm)
    return gradient


class _Welded:
    """A ``Vjp`` on the solve mesh (``_topology.solve_mesh``) seen from the input's vertices: the
    copies' cotangents summed, the gradient shared among them (as if the solve read their mean),
    vertices no kept face uses passed through (the identity)."""

    def __init__(self, vjp: Vjp, mesh):
        self.vjp, self.mesh, self.status = vjp, mesh, vjp.status

    def apply(self, cotangent, fallback: str) -> tuple[np.ndarray, int]:
        cotangent, mesh = np.asarray(cotangent), self.mesh
        used = mesh.index >= 0
        summed = np.zeros((len(mesh.rows), 3), cotangent.dtype)
        np.add.at(summed, mesh.index[used], cotangent[used])
        solved, failed = self.vjp.apply(summed, fallback)
        if failed:
            return np.zeros_like(cotangent), failed
        gradient = cotangent.copy()
        gradient[used] = solved[mesh.index[used]] / mesh.copies[mesh.index[used], None]
        return gradient, 0

    def __call__(self, cotangent, fallback: str) -> np.ndarray:
        return _or_raise(*self.apply(cotangent, fallback), self.vjp.gradient_norm)


def solve_welded(v_np, f_np, settings: UntangleOptions, progress, sizes: Sizes | None = None):
    """``_solve`` on the solve mesh (``_topology.solve_mesh``: coincident vertices welded, faces that
    cannot move apart left out), scattered back to the input's vertices: every copy of a vertex gets
    its one position, unreferenced vertices stay where they are. Returns ``(result, vjp)``."""
    mesh = solve_mesh(v_np, f_np)
    if mesh.is_identity(len(v_np), len(f_np)):
        return _solve(v_np, f_np, settings, progress, sizes)
    result, vjp = _solve(v_np[mesh.rows], mesh.faces, settings, progress, sizes)
    used = mesh.index >= 0
    out = v_np.copy()
    out[used] = np.asarray(result.vertices)[mesh.index[used]]
    return result._replace(vertices=out), _Welded(vjp, mesh)


def vjp_at(v_np, f_np, settings: UntangleOptions, out_np, status: int):
    """The VJP of ``out_np``, a result of ``untangle(v_np, f_np)`` with that ``status``, rebuilt from
    these arrays (phase 2's set-up made again at that point): the backward pass under ``jit``, where
    only arrays survive from the forward one."""
    mesh = solve_mesh(v_np, f_np)
    identity = mesh.is_identity(len(v_np), len(f_np))
    if not identity:
        v_np, f_np, out_np = v_np[mesh.rows], mesh.faces, out_np[mesh.rows]
    problem, x = None, None
    if len(f_np) > 1:
        problem = _normalise(np.asarray(v_np, np.float64), f_np, v_np.dtype)
        x = jnp.asarray((np.asarray(out_np, np.float64) - problem.centre) / problem.diagonal, v_np.dtype)
    vjp = Vjp(problem, settings, x, status)
    return vjp if identity else _Welded(vjp, mesh)


def _shapes(*trees):
    """The shapes, dtypes and static parts of ``trees``: what a compiled function is keyed on."""
    leaves, structure = jax.tree_util.tree_flatten(trees)
    return structure, tuple((np.shape(leaf), str(getattr(leaf, "dtype", type(leaf)))) for leaf in leaves)


class _Problem(NamedTuple):
    """The mesh in the solver's frame: centred, scaled to unit bounding-box diagonal."""

    theta: Array
    faces: Array
    edges: Array
    edges_np: np.ndarray
    h: float
    centre: np.ndarray
    diagonal: float


def _normalise(v64, f_np, dtype):
    lo, hi = (v64.min(0), v64.max(0)) if len(v64) else (np.zeros(3), np.ones(3))
    centre, diagonal = 0.5 * (lo + hi), float(np.linalg.norm(hi - lo)) or 1.0
    scaled = (v64 - centre) / diagonal
    edges_np = unique_edges(f_np)
    h = float(np.linalg.norm(np.diff(scaled[edges_np], axis=1), axis=-1).mean()) if len(edges_np) else 1.0
    edges = jnp.asarray(edges_np)
    return _Problem(jnp.asarray(scaled, dtype), jnp.asarray(f_np, jnp.int32), edges, edges_np, h, centre, diagonal)


def _solve(v_np, f_np, settings: UntangleOptions, progress, sizes: Sizes | None = None):
    static = tuple(getattr(settings, name) for name in _STATIC_OPTIONS)
    buckets = (shape_bucket(len(v_np)), shape_bucket(len(f_np)))
    release_if_crowded(("untangle", buckets, str(v_np.dtype), static))
    start = time.perf_counter()
    dtype = v_np.dtype
    v64 = np.asarray(v_np, np.float64)
    problem = _normalise(v64, f_np, dtype)
    if len(f_np) < 2:  # nothing can cross (an empty mesh, a lone triangle): returned as it is
        x1, remaining, steps, fairing, moves = problem.theta, np.zeros((0, 2), np.int32), 0, 0, 0
        history = (np.zeros(0, np.int32), np.zeros(0))
    elif settings.method == "paper":
        theta, setup = phase2_setup(problem, settings, pad=False)
        setup = size_buffers(theta, settings, theta, setup)
        capacities = Capacities.for_faces(len(f_np), settings.capacity)
        x1, rounds, newton_steps, _ = paper_route_jit(
            problem.theta,
            setup,
            capacities,
            jnp.asarray(settings.paper_kappa, dtype),
            rounds=settings.paper_rounds,
            iters=20,
            growth=10.0,
            cg_iters=100,
        )
        remaining = find_intersections(x1, problem.faces, device_mesh=settings.device_mesh)
        steps, fairing, moves = int(newton_steps), 0, 0
        history = tuple(np.asarray(r) for r in rounds)
    else:
        floor = sizes.phase1 if sizes else None
        x1, remaining, steps, history, capacities, fairing, moves = run_phase1(problem, settings, progress, floor)
        if sizes:
            sizes.phase1 = capacities
    status = APPROXIMATE if len(remaining) == 0 else UNAVAILABLE
    final, prepared = x1, None
    relax_stats = (0, 0, float("nan"), float("nan"))
    if settings.relax and len(remaining) == 0 and len(f_np) > 1:
        theta, setup = phase2_setup(problem, settings)
        release_if_crowded(("relax", _shapes(theta, setup), static))
        floor = sizes.relax if sizes else None
        padded, setup, relax_stats = run_relax(theta, settings, pad_like(x1, theta), setup, floor)
        if sizes:
            sizes.relax = relax_capacities(setup)
        relaxed = padded[: x1.shape[0]]
        if progress:
            progress("relax", relax_stats[0], relax_stats[0])
        if len(find_intersections(relaxed, problem.faces, device_mesh=settings.device_mesh)) == 0:
            final, prepared = relaxed, (theta, setup, padded)
            status = IMPLICIT if relax_stats[3] < STATIONARY else APPROXIMATE
    vjp = Vjp(problem if len(f_np) > 1 else None, settings, final, status, relax_stats[3], prepared)

    out = np.asarray(final, np.float64) * problem.diagonal + problem.centre
    move = np.linalg.norm(out - v64, axis=1) / problem.diagonal
    edges_np = problem.edges_np
    if len(edges_np):
        ratio = np.linalg.norm(out[edges_np[:, 0]] - out[edges_np[:, 1]], axis=1) / np.maximum(
            np.linalg.norm(v64[edges_np[:, 0]] - v64[edges_np[:, 1]], axis=1), 1e-300
        )
        worst = float(np.min(np.minimum(ratio, 1 / np.maximum(ratio, 1e-300))))
    else:
        worst = 1.0
    result = UntangleResult(
        vertices=out.astype(dtype),
        converged=jnp.bool_(len(remaining) == 0),
        iterations=jnp.int32(steps),
        fairing_steps=jnp.int32(fairing),
        global_moves=jnp.int32(moves),
        num_intersections=jnp.int32(len(remaining)),
        history=jnp.asarray(history[0], jnp.int32),
        history_length=jnp.asarray(history[1] * problem.diagonal),
        max_displacement=jnp.asarray(move.max() if len(move) else 0.0),
        mean_displacement=jnp.asarray(move.mean() if len(move) else 0.0),
        worst_edge_ratio=jnp.asarray(worst),
        relax_iterations=jnp.int32(relax_stats[0]),
        relax_cg_iterations=jnp.int32(relax_stats[1]),
        relax_energy=jnp.asarray(relax_stats[2]),
        relax_gradient_norm=jnp.asarray(relax_stats[3]),
        relax_converged=jnp.bool_(relax_stats[3] < STATIONARY),
        seconds=time.perf_counter() - start,
        options=settings,
    )
    return result, vjp

"""Layer 5: ``untangle`` as a JAX operator. The solver (``_untangle``) runs on the host: called
directly on concrete arrays, through ``jax.pure_callback`` inside ``jit`` and ``vmap``; its VJP is a
``jax.custom_vjp`` either way. ``Untangler`` binds one connectivity and keeps its buffer sizes."""

import collections
import hashlib
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._devices import sharded_axis
from ._mesh_energy import check_mesh
from ._types import Array, Int
from ._untangle import (
    FAILURES,
    GRADIENT_FALLBACKS,
    Sizes,
    UntangleOptions,
    UntangleResult,
    solve_welded,
    vjp_at,
)

_FORWARD_MODE = (
    "untangle supports jax.jit, jax.vmap and reverse-mode derivatives (jax.grad, jax.vjp, jax.jacrev, "
    "jax.value_and_grad), not forward mode (jax.jvp, jax.linearize, jax.jacfwd, jax.hessian): its "
    "derivative is an implicit (adjoint) VJP"
)


def untangle(vertices, faces, *, progress: Callable | None = None, **options) -> UntangleResult:
    """Make a self-intersecting mesh intersection-free: untangle (phase 1), then relax (phase 2).

    Phase 1 descends on the length of the intersection curve, smoothed by the mesh Laplacian, with a
    capped step and the crossings re-detected every step. Phase 2 restores the shape by Newton-CG on
    an elastic energy to the input plus a log barrier on near pairs (IPC's), rejecting every step that
    would create a crossing, to a stationary point. Both phases are certified by the exact
    [`find_intersections`][tritri_jax.find_intersections]: ``converged`` is true only when it finds no
    pair; if the relaxed mesh failed that check, the phase-1 mesh is returned. Connectivity is never
    changed; several meshes passing through each other are one mesh with more faces.

    Vertices at identical coordinates are one vertex, as in ``find_intersections``: a triangle soup
    is solved welded and returned as a soup (the input's shapes, every copy of a vertex at one
    position); vertices no face uses, and faces of one repeated vertex, stay as they are.

    **A JAX operator.** It runs eagerly, inside ``jax.jit`` and under ``jax.vmap``, with the same
    result: inside a transformation the solver runs on the host through ``jax.pure_callback`` (its
    exact certification and buffer growth are host work), and under ``vmap`` the meshes of a batch
    are solved one after another (``faces`` may be batched too). ``history`` then has a fixed length
    (see [`UntangleResult`][tritri_jax.UntangleResult]). Reverse-mode derivatives (``jax.grad``,
    ``jax.vjp``, ``jax.jacrev``), eagerly or inside ``jit``: the VJP of ``vertices`` with respect to
    the input vertices (which are also the rest shape) comes from the implicit function theorem at
    phase 2's stationary point, one adjoint CG solve, not from differentiating iterations; where there
    is none, ``gradient_fallback`` decides. Forward mode (``jax.jvp``, ``jax.jacfwd``) raises a
    ``TypeError``. Only ``vertices`` carries a derivative. To untangle many meshes of one
    connectivity, [`Untangler`][tritri_jax.Untangler] keeps the buffer sizes between calls.

    **Arguments:**

    - ``vertices`` ``(V, 3)`` float, ``faces`` ``(F, 3)`` int (numpy or JAX arrays; not modified).
    - ``progress``: optional ``callback(phase, step, count)``, called from the host between chunks of
      phase-1 steps (``phase="untangle"``, ``count``: crossing pairs) and once after phase 2
      (``phase="relax"``, ``count``: Newton steps). Without it, each phase is one compiled loop.
    - ``**options``: the fields of [`UntangleOptions`][tritri_jax.UntangleOptions] (``max_steps``,
      ``step_fraction``, ``relax``, ``margin``, ``method="paper"``, ``gradient_fallback``, ...),
      documented there.

    **Returns:** an [`UntangleResult`][tritri_jax.UntangleResult].

    ```python
    >>> import jax, tritri_jax as tt
    >>> jax.config.update("jax_enable_x64", True)
    >>> vertices, faces = tt.scenes.two_spheres(6)
    >>> result = tt.untangle(vertices, faces)
    >>> bool(result.converged), int(result.num_intersections)
    (True, 0)
    >>> inside = jax.jit(lambda x: tt.untangle(x, faces).vertices)(vertices)
    >>> bool((inside == result.vertices).all())
    True

    ```
    """
    return _untangle(vertices, faces, options_from(options), progress, None)


class Untangler(eqx.Module):
    """[`untangle`][tritri_jax.untangle] bound to one connectivity and one set of options, for loops
    that untangle many vertex arrays of one mesh (an optimiser's iterates, a simulation's frames, a
    batch under ``vmap``). It keeps the buffer capacities its calls needed (phase 1's detection,
    phase 2's neighbour lists; grown on overflow, never shrunk), so that later calls run the
    executables compiled for the first instead of compiling again for capacities sized to their own
    data. Usable wherever ``untangle`` is: eagerly, inside ``jit`` and ``vmap``, under ``jax.grad``;
    an equinox module (``faces`` its one array leaf; the options and sizes static).

    ```python
    >>> import jax, tritri_jax as tt
    >>> jax.config.update("jax_enable_x64", True)
    >>> vertices, faces = tt.scenes.two_spheres(6)
    >>> solver = tt.Untangler(faces, gradient_fallback="approximate")
    >>> step = jax.jit(lambda x: solver(x).vertices)
    >>> x = step(vertices)
    >>> int(tt.find_intersections(x, faces).shape[0]), solver.options.gradient_fallback
    (0, 'approximate')

    ```
    """

    faces: Int[Array, "F 3"]
    options: UntangleOptions = eqx.field(static=True)
    sizes: Sizes = eqx.field(static=True)

    def __init__(self, faces, **options):
        self.options = options_from(options)
        faces = jnp.asarray(faces)
        if faces.size == 0:
            faces = faces.reshape(0, 3)
        if faces.ndim != 2 or faces.shape[-1] != 3 or not jnp.issubdtype(faces.dtype, jnp.integer):
            raise ValueError(f"Untangler: faces must be an (F, 3) integer array, got {faces.dtype}{list(faces.shape)}")
        self.faces = faces.astype(jnp.int32)
        self.sizes = Sizes()

    def __call__(self, vertices, *, progress: Callable | None = None) -> UntangleResult:
        """``untangle(vertices, faces, **options)`` with the sizes kept so far."""
        return _untangle(vertices, self.faces, self.options, progress, self.sizes)


class _Recent:
    """The VJPs of the last few solves inside a transformation, keyed by their arrays and options.
    Under ``jit`` the backward pass gets only arrays from the forward one and could rebuild phase 2's
    set-up from them (``vjp_at``: a multigrid hierarchy and a buffer sizing, +10-30 % on a gradient
    of an ISIR mesh); this finds the forward's instead. A miss (evicted: more than ``size`` solves
    between a forward pass and its backward one) rebuilds, with the same gradient."""

    def __init__(self, size: int = 4):
        self.size, self.entries = size, collections.OrderedDict()

    @staticmethod
    def key(settings, *arrays) -> bytes:
        digest = hashlib.blake2b(repr(settings).encode(), digest_size=16)
        for a in arrays:
            a = np.ascontiguousarray(a)
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(a.tobytes())
        return digest.digest()

    def put(self, key, vjp):
        self.entries[key] = vjp
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)

    def get(self, key):
        return self.entries.get(key)


_RECENT = _Recent()


# the least value of each count and whether each real must be positive (else non-negative)
_COUNTS = dict(max_steps=1, patience=1, cg_iters=1, relax_cg_iters=1, restarts=0, paper_rounds=0)
_COUNTS.update(relax_iters=0, relax_polish=0, fairing_steps=0, global_moves=0)
_REALS = dict(smoothing=True, step_fraction=True, margin=True, barrier_weight=True, relax_step=True)
_REALS.update(paper_kappa=True, min_smoothing=False, resolution=False, bending=False, pull=False)


def options_from(options: dict) -> UntangleOptions:
    """``UntangleOptions`` from ``untangle``'s keyword arguments, checked."""
    unknown = set(options) - set(UntangleOptions._fields)
    if unknown:
        raise ValueError(f"untangle: unknown option(s) {sorted(unknown)}; see tritri_jax.UntangleOptions")
    settings = UntangleOptions(**options)
    for name, low in _COUNTS.items():
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    for name, strict in _REALS.items():
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must be a number, got {value!r}")
        if not np.isfinite(value) or value < 0 or (strict and value == 0):
            raise ValueError(f"{name} must be finite and {'> 0' if strict else '>= 0'}, got {value!r}")
    if settings.capacity is not None and (isinstance(settings.capacity, bool) or int(settings.capacity) < 1):
        raise ValueError(f"capacity must be None or a positive integer, got {settings.capacity!r}")
    if settings.method not in ("length", "paper"):
        raise ValueError(f"method must be 'length' or 'paper', got {settings.method!r}")
    if settings.local_reach not in (True, False, "auto"):
        raise ValueError(f"local_reach must be True, False or 'auto', got {settings.local_reach!r}")
    if settings.gradient_fallback not in GRADIENT_FALLBACKS:
        raise ValueError(f"gradient_fallback must be one of {GRADIENT_FALLBACKS}, got {settings.gradient_fallback!r}")
    if settings.device_mesh is not None:
        sharded_axis(settings.device_mesh)
    return settings


def history_size(settings: UntangleOptions) -> int:
    """The longest ``history`` a solve with ``settings`` can have: its fixed length under ``jit``."""
    return settings.paper_rounds if settings.method == "paper" else settings.max_steps * (settings.restarts + 1)


def _concrete(*arrays) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def _host(function, device):
    """``function`` for ``jax.pure_callback``: run with the caller's default ``device``. JAX sets the
    callback's device as the default inside it, which is part of every jit cache key: without this
    the solver inside ``jit`` compiled all its stages again (41 s beside 0.16 s on a two-sphere
    scene whose stages an eager call had compiled)."""

    def run(*args):
        with jax.default_device(device):
            return function(*args)

    return run


def _untangle(vertices, faces, settings: UntangleOptions, progress, sizes: Sizes | None) -> UntangleResult:
    vertices, faces = check_mesh(vertices, faces)
    device = jax.config.jax_default_device
    fallback = settings.gradient_fallback
    eager = {}  # an eager solve's result and VJP (the host objects; a traced one passes arrays)

    def forward(v, f):
        if _concrete(v, f):
            result, vjp = solve_welded(np.asarray(v), np.asarray(f), settings, progress, sizes)
            eager.update(result=result, vjp=vjp)
            return (jnp.asarray(result.vertices, v.dtype), None), None
        shapes = _result_shapes(v, settings)

        def host(v, f):
            result, vjp = solve_welded(np.asarray(v), np.asarray(f), settings, progress, sizes)
            fixed = _fixed(result, settings, shapes)
            _RECENT.put(_RECENT.key(settings, v, f, fixed.vertices), vjp)
            return fixed, np.int32(vjp.status)

        result, status = jax.pure_callback(
            _host(host, device), (shapes, jax.ShapeDtypeStruct((), jnp.int32)), v, f, vmap_method="sequential"
        )
        return (result.vertices, result), (v, f, result.vertices, status)

    def backward(residual, cotangents):
        cotangent = cotangents[0]
        if residual is None and _concrete(cotangent):
            return jnp.asarray(eager["vjp"](cotangent, fallback), cotangent.dtype), None

        def host(c, *residual):  # no residual: an eager forward, its VJP applied inside jit
            if residual:
                v, f, out, status = (np.asarray(a) for a in residual)
                vjp = _RECENT.get(_RECENT.key(settings, v, f, out)) or vjp_at(v, f, settings, out, int(status))
            else:
                vjp = eager["vjp"]
            gradient, failed = vjp.apply(c, fallback)
            return np.asarray(gradient, c.dtype), np.int32(failed)

        shapes = (jax.ShapeDtypeStruct(cotangent.shape, cotangent.dtype), jax.ShapeDtypeStruct((), jnp.int32))
        operands = (cotangent,) + (residual or ())
        gradient, failed = jax.pure_callback(_host(host, device), shapes, *operands, vmap_method="sequential")
        gradient = eqx.branched_error_if(gradient, failed > 0, jnp.maximum(failed - 1, 0), FAILURES)
        return gradient, None

    solve = jax.custom_vjp(lambda v, f: forward(v, f)[0])
    solve.defvjp(forward, backward)
    try:
        out, result = solve(vertices, faces)
    except TypeError as error:
        if "forward-mode" in str(error):
            raise TypeError(_FORWARD_MODE) from error
        raise
    return (eager["result"] if result is None else result)._replace(vertices=out)


def _result_shapes(v, settings: UntangleOptions) -> UntangleResult:
    """The shapes and dtypes of an ``UntangleResult`` of ``v``'s shape under ``jit``."""
    real = jnp.zeros(()).dtype  # the default float: float32 without jax_enable_x64, as eagerly
    steps = history_size(settings)

    def scalar(dtype):
        return jax.ShapeDtypeStruct((), dtype)

    return UntangleResult(
        vertices=jax.ShapeDtypeStruct(v.shape, v.dtype),
        converged=scalar(jnp.bool_),
        iterations=scalar(jnp.int32),
        fairing_steps=scalar(jnp.int32),
        global_moves=scalar(jnp.int32),
        num_intersections=scalar(jnp.int32),
        history=jax.ShapeDtypeStruct((steps,), jnp.int32),
        history_length=jax.ShapeDtypeStruct((steps,), real),
        max_displacement=scalar(real),
        mean_displacement=scalar(real),
        worst_edge_ratio=scalar(real),
        relax_iterations=scalar(jnp.int32),
        relax_cg_iterations=scalar(jnp.int32),
        relax_energy=scalar(real),
        relax_gradient_norm=scalar(real),
        relax_converged=scalar(jnp.bool_),
        seconds=scalar(real),
        options=settings,
    )


def _fixed(result: UntangleResult, settings: UntangleOptions, shapes: UntangleResult) -> UntangleResult:
    """``result`` as NumPy arrays of ``shapes``: ``history`` padded with ``-1`` and ``0``."""
    steps, taken = history_size(settings), len(result.history)
    history, lengths = np.full(steps, -1, np.int32), np.zeros(steps)
    history[:taken], lengths[:taken] = np.asarray(result.history), np.asarray(result.history_length)
    result = result._replace(history=history, history_length=lengths)
    return jax.tree.map(lambda value, shape: np.asarray(value, shape.dtype), result, shapes)

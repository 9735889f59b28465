"""Layer 3: lift the pair kernels to a mesh: gather candidate pairs, vmap, sum, scatter.

The solver-facing pieces never form an 18 x 18 block: a [`PairSystem`][tritri_jax.PairSystem]
keeps each pair's Gauss-Newton factor (a 2 x 18 orthonormal basis and a 2 x 2 PSD core), and
[`hessian_vector_product`][tritri_jax.hessian_vector_product] applies the summed Hessian with one
gather, two small contractions per pair and one segment sum.
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._broad_phase import CandidatePairs, candidate_pairs
from ._devices import on_each_device, sharded_axis, share_of
from ._kernels import crossing_length, pair_energy
from ._pair_hessian import gauss_newton_factor
from ._sizes import default_capacity
from ._types import Array, Faces, Float, Int, Vertices

_MEASURES = {"energy": pair_energy, "length": crossing_length}


# ----------------------------------------------------------------------------- input checks


def check_mesh(vertices, faces, *, name="mesh"):
    """Validate a mesh at a public entry point and return ``(vertices, faces)`` as JAX arrays.

    Shape and dtype problems raise ``ValueError`` at trace time. Value problems (non-finite
    coordinates, indices out of range) raise ``ValueError`` right away on concrete input; on traced
    input they become an ``equinox`` runtime error. Nothing passed in is modified. Empty meshes and
    zero-area faces are valid, faces that repeat a vertex among them.
    """
    vertices = jnp.asarray(vertices)
    faces = jnp.asarray(faces)
    if vertices.ndim != 2 or vertices.shape[-1] != 3:
        raise ValueError(f"{name}: vertices must have shape (V, 3), got {vertices.shape}")
    if faces.ndim != 2 or faces.shape[-1] != 3:
        if faces.size == 0:
            faces = faces.reshape(0, 3)
        else:
            raise ValueError(f"{name}: faces must have shape (F, 3), got {faces.shape}")
    if not jnp.issubdtype(vertices.dtype, jnp.floating):
        if jnp.issubdtype(vertices.dtype, jnp.integer):
            vertices = vertices.astype(jnp.result_type(float))
        else:
            raise ValueError(f"{name}: vertices must be floating point, got {vertices.dtype}")
    if not jnp.issubdtype(faces.dtype, jnp.integer):
        raise ValueError(f"{name}: faces must be integers, got {faces.dtype}")
    faces = faces.astype(jnp.int32)
    num_vertices = vertices.shape[0]
    if isinstance(vertices, jax.core.Tracer) or isinstance(faces, jax.core.Tracer):
        bad_value = ~jnp.all(jnp.isfinite(vertices))
        vertices = eqx.error_if(vertices, bad_value, f"{name}: vertices contain NaN or infinite coordinates")
        out_of_range = jnp.any((faces < 0) | (faces >= num_vertices))
        faces = eqx.error_if(faces, out_of_range, f"{name}: face indices out of range [0, {num_vertices})")
        return vertices, faces
    v, f = np.asarray(vertices), np.asarray(faces)
    if not np.all(np.isfinite(v)):
        rows = np.flatnonzero(~np.all(np.isfinite(v), axis=1))
        raise ValueError(f"{name}: vertices contain NaN or infinite coordinates (first at vertex {rows[0]})")
    if f.size and (f.min() < 0 or f.max() >= num_vertices):
        row = int(np.flatnonzero(np.any((f < 0) | (f >= num_vertices), axis=1))[0])
        raise ValueError(f"{name}: face {row} = {f[row].tolist()} has an index out of range [0, {num_vertices})")
    return vertices, faces


# ----------------------------------------------------------------------------- gather / scatter


def pair_triangles(vertices: Vertices, faces: Faces, pairs: Int[Array, "P 2"]):
    """The two triangles of every pair: ``(u, v)``, each ``(P, 3, 3)``. Padding rows (``-1``) give face 0."""
    safe = jnp.maximum(pairs, 0)
    tri = vertices[faces[safe]]  # (P, 2, 3, 3)
    return tri[:, 0], tri[:, 1]


def pair_mask(candidates: CandidatePairs):
    """Which of the ``capacity`` slots hold a pair."""
    return jnp.arange(candidates.pairs.shape[0]) < jnp.minimum(candidates.count, candidates.pairs.shape[0])


def scatter_to_vertices(values: Float[Array, "P 18"], corner_vertices: Int[Array, "P 6"], num_vertices: int):
    """Sum per-pair 18-vectors into a ``(V, 3)`` array (a segment sum over the six corners)."""
    return jax.ops.segment_sum(values.reshape(-1, 3), corner_vertices.reshape(-1), num_segments=num_vertices)


def candidates_for(vertices, faces, capacity, skip_vertex_adjacent, cell_size):
    """Candidates inside a (possibly traced) computation, raising on overflow."""
    if capacity is None:
        capacity = default_capacity(faces.shape[0])
    candidates = candidate_pairs(
        jax.lax.stop_gradient(vertices),
        faces,
        capacity=capacity,
        cell_size=cell_size,
        skip_vertex_adjacent=skip_vertex_adjacent,
    )
    pairs = eqx.error_if(
        candidates.pairs,
        candidates.overflowed,
        "broad phase overflow: more candidate pairs than `capacity`; pass a larger capacity",
    )
    return candidates._replace(pairs=pairs)


# ----------------------------------------------------------------------------- energies


def intersection_energy(
    vertices: Vertices,
    faces: Faces,
    *,
    margin=0.0,
    measure: str = "energy",
    capacity: int | None = None,
    cell_size=None,
    skip_vertex_adjacent: bool = False,
    device_mesh=None,
) -> Float[Array, ""]:
    """Sum of the pair energies of all crossing pairs of a mesh: $E = \\sum_{(i,j)} T(f_i, f_j)$.

    Differentiable in ``vertices`` with ``jax.grad`` (the set of pairs is a constant of the
    differentiation) and usable inside a user's jitted loss. The broad phase runs inside; under
    ``jit`` its ``capacity`` (static) defaults to ``16 F`` rounded up to a power of two, and an
    overflow raises a runtime error asking for more.

    **Arguments:**

    - ``vertices`` ``(V, 3)``, ``faces`` ``(F, 3)``.
    - ``margin``: widen each pair's interval by this length (see [`pair_energy`][tritri_jax.pair_energy]).
    - ``measure``: ``"energy"`` (the paper's $T$, Eq. 2) or ``"length"`` (the crossing-segment
      length $\\ell$ of [`crossing_length`][tritri_jax.crossing_length]).
    - ``capacity``, ``cell_size``, ``skip_vertex_adjacent``: broad-phase options of
      [`candidate_pairs`][tritri_jax.candidate_pairs].
    - ``device_mesh``: a one-axis ``jax.sharding.Mesh``: every device builds the grid and evaluates
      its share of the candidate pairs, and the shares are summed across devices (``capacity`` is
      then per device, by default twice an even share); ``None``: one device. The gradient and
      higher derivatives go through it; eagerly, on a mesh with explicit axes (the default of
      ``jax.make_mesh``), take them inside ``with jax.set_mesh(device_mesh):``, as JAX requires.

    ```python
    >>> import jax, tritri_jax as tt
    >>> vertices, faces = tt.scenes.two_spheres(6)
    >>> energy = tt.intersection_energy(vertices, faces)
    >>> float(energy) > 0, jax.grad(tt.intersection_energy)(vertices, faces).shape
    (True, (124, 3))

    ```
    """
    if measure not in _MEASURES:
        raise ValueError(f"measure must be one of {sorted(_MEASURES)}, got {measure!r}")
    vertices, faces = check_mesh(vertices, faces)
    if faces.shape[0] < 2:
        return jnp.zeros((), vertices.dtype) + 0 * jnp.sum(vertices)
    if device_mesh is not None:
        sharded_axis(device_mesh)
        if capacity is None:
            capacity = default_capacity(share_of(faces.shape[0], device_mesh))
        energy, overflowed = _energy_on_devices(
            vertices,
            faces,
            margin,
            cell_size,
            measure=measure,
            capacity=capacity,
            skip_vertex_adjacent=skip_vertex_adjacent,
            device_mesh=device_mesh,
        )
        return eqx.error_if(
            energy, overflowed, "broad phase overflow: more candidate pairs than `capacity` on a device"
        )
    candidates = candidates_for(vertices, faces, capacity, skip_vertex_adjacent, cell_size)
    return pairs_energy(vertices, faces, candidates.pairs, pair_mask(candidates), margin=margin, measure=measure)


@functools.partial(jax.jit, static_argnames=("measure", "capacity", "skip_vertex_adjacent", "device_mesh"))
def _energy_on_devices(vertices, faces, margin, cell_size, *, measure, capacity, skip_vertex_adjacent, device_mesh):
    """``intersection_energy`` with each device's share of the raw pairs (``candidate_pairs``' ``part``)
    and an overflow flag. Jitted, so that its derivatives run as compiled code on any device mesh
    (eagerly, a mesh with explicit axes cannot place their scalars)."""

    def local(part, vertices, faces, margin, cell_size):
        candidates = candidate_pairs(
            jax.lax.stop_gradient(vertices),
            faces,
            capacity=capacity,
            cell_size=cell_size,
            skip_vertex_adjacent=skip_vertex_adjacent,
            part=part,
        )
        energy = pairs_energy(vertices, faces, candidates.pairs, pair_mask(candidates), margin=margin, measure=measure)
        axis = sharded_axis(device_mesh)
        return jax.lax.psum(energy, axis), jax.lax.pmax(candidates.overflowed, axis)

    return on_each_device(local, device_mesh, (vertices, faces, margin, cell_size), ((), ()))


def pairs_energy(vertices, faces, pairs, mask, *, margin=0.0, measure="energy"):
    """The mesh energy over a given pair list (``pairs`` ``(P, 2)``, ``mask`` ``(P,)``)."""
    u, v = pair_triangles(vertices, faces, pairs)
    if measure == "energy":
        values = jax.vmap(lambda a, b: pair_energy(a, b, margin=margin))(u, v)
    else:
        values = jax.vmap(_MEASURES[measure])(u, v)
    return jnp.sum(jnp.where(mask, values, 0))


class PairSystem(NamedTuple):
    """Per-pair Gauss-Newton data of a mesh, for matrix-free Newton steps.

    - ``energy``: the summed energy; ``gradient``: ``(V, 3)``.
    - ``corners``: ``(P, 6)`` vertex indices of each pair's two faces.
    - ``basis`` ``(P, 2, 18)`` and ``core`` ``(P, 2, 2)``: pair ``p``'s projected Hessian is
      ``basis[p].T @ core[p] @ basis[p]``; inactive pairs have a zero core.

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> vertices = jnp.array([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, -1], [0.3, 0.2, 1], [0.2, 0.3, 1]])
    >>> faces = jnp.array([[0, 1, 2], [3, 4, 5]])
    >>> found = tt.candidate_pairs(vertices, faces, capacity=4)
    >>> system = tt.pair_system(vertices, faces, found.pairs, jnp.arange(4) < found.count)
    >>> system.corners.shape, system.basis.shape, system.core.shape  # one row per broad-phase slot
    ((4, 6), (4, 2, 18), (4, 2, 2))
    >>> bool(jnp.all(system.core[1:] == 0))  # the empty slots add nothing
    True

    ```
    """

    energy: Float[Array, ""]
    gradient: Float[Array, "V 3"]
    corners: Int[Array, "P 6"]
    basis: Float[Array, "P 2 18"]
    core: Float[Array, "P 2 2"]


def pair_system(vertices: Vertices, faces: Faces, pairs, mask, *, margin=0.0) -> PairSystem:
    """Energy, gradient and factored PSD Gauss-Newton Hessian of the mesh energy over ``pairs``.

    ``pairs`` ``(P, 2)`` face indices and ``mask`` ``(P,)`` which rows hold a pair: the fields of
    [`candidate_pairs`][tritri_jax.candidate_pairs]' result. For a Newton step of your own:
    ``system.gradient`` and [`hessian_vector_product`][tritri_jax.hessian_vector_product].

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> vertices = jnp.array([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, -1], [0.3, 0.2, 1], [0.2, 0.3, 1]])
    >>> faces = jnp.array([[0, 1, 2], [3, 4, 5]])
    >>> found = tt.candidate_pairs(vertices, faces, capacity=4)
    >>> system = tt.pair_system(vertices, faces, found.pairs, jnp.arange(4) < found.count)
    >>> bool(system.energy > 0), system.gradient.shape, system.corners[0].tolist()
    (True, (6, 3), [0, 1, 2, 3, 4, 5])

    ```
    """
    u, v = pair_triangles(vertices, faces, pairs)
    factor = jax.vmap(lambda a, b: gauss_newton_factor(a, b, margin=margin))(u, v)
    corners = faces[jnp.maximum(pairs, 0)].reshape(-1, 6)
    gradient = jnp.where(mask[:, None], factor.gradient, 0)
    core = jnp.where(mask[:, None, None], factor.core, 0)
    return PairSystem(
        energy=jnp.sum(jnp.where(mask, factor.energy, 0)),
        gradient=scatter_to_vertices(gradient, corners, vertices.shape[0]),
        corners=corners,
        basis=factor.basis,
        core=core,
    )


def hessian_vector_product(system: PairSystem, x: Float[Array, "V 3"]) -> Float[Array, "V 3"]:
    """$\\left(\\sum_p H_p^+\\right) x$ from the factored blocks, without forming any matrix.

    Linear in ``x`` and positive semidefinite: ready for a conjugate-gradient solve
    (``jax.scipy.sparse.linalg.cg``, or [`newton_cg`][tritri_jax.newton_cg]).

    ```python
    >>> import jax.numpy as jnp, tritri_jax as tt
    >>> vertices = jnp.array([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, -1], [0.3, 0.2, 1], [0.2, 0.3, 1]])
    >>> faces = jnp.array([[0, 1, 2], [3, 4, 5]])
    >>> found = tt.candidate_pairs(vertices, faces, capacity=4)
    >>> system = tt.pair_system(vertices, faces, found.pairs, jnp.arange(4) < found.count)
    >>> step = -system.gradient
    >>> curvature = jnp.vdot(step, tt.hessian_vector_product(system, step))
    >>> bool(curvature >= 0)
    True

    ```
    """
    local = x[system.corners].reshape(-1, 18)
    y = jnp.einsum("pkn,pn->pk", system.basis, local)
    z = jnp.einsum("pkl,pl->pk", system.core, y)
    out = jnp.einsum("pkn,pk->pn", system.basis, z)
    return scatter_to_vertices(out, system.corners, x.shape[0])

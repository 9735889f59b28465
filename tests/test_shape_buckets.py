"""Shape buckets: padded meshes give the same answers as unpadded ones, and one bucket compiles once."""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tritri_jax as tt
from tritri_jax import _exact
from tritri_jax._broad_phase import brute_force_candidates, default_cell_size, face_bounds
from tritri_jax._sizes import pad_mesh, shape_bucket

from .compiles import CompileCount

_candidates = jax.jit(tt.candidate_pairs, static_argnames=("capacity", "skip_vertex_adjacent", "include_shared_edges"))


@given(st.integers(0, 1 << 22))
def test_the_ladder_rounds_up_by_at_most_a_quarter(n):
    size = shape_bucket(n)
    assert size >= max(n, 64)
    assert size <= max(64, 1.25 * n)
    assert shape_bucket(size) == size  # a bucket is its own bucket
    assert shape_bucket(n + 1) >= size  # monotone


def _pairs(result):
    return set(map(tuple, np.asarray(result.pairs)[: int(result.count)].tolist()))


def _garbage_rows(vertices, faces, rows, seed):
    """Padding rows filled with arbitrary valid-looking content: the callee must ignore them."""
    rng = np.random.default_rng(seed)
    extra_v = rng.normal(size=(shape_bucket(len(vertices)) - len(vertices), 3)) * 10
    v = np.concatenate([vertices, extra_v])
    extra_f = rng.integers(0, len(v), size=(rows - len(faces), 3))
    return v, np.concatenate([faces, extra_f]).astype(np.int32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("scene,n", [("crumpled_sheet", 10), ("twisted_torus", 8)])
@pytest.mark.parametrize("fill", ["copies", "garbage"])
def test_padded_broad_phase_equals_unpadded_and_brute_force(dtype, scene, n, fill):
    vertices, faces = tt.scenes.SCENES[scene](n)
    vertices, faces = vertices.astype(dtype), faces[:-5]  # off the ladder, so there is padding
    if fill == "copies":
        padded_v, padded_f = pad_mesh(vertices, faces)
    else:
        padded_v, padded_f = _garbage_rows(vertices, faces, shape_bucket(len(faces)), seed=n)
        padded_v = padded_v.astype(dtype)
    assert len(padded_f) > len(faces)
    plain = _candidates(jnp.asarray(vertices), jnp.asarray(faces), capacity=1 << 15)
    padded = _candidates(jnp.asarray(padded_v), jnp.asarray(padded_f), capacity=1 << 15, num_faces=np.int32(len(faces)))
    expected = set(map(tuple, np.asarray(brute_force_candidates(jnp.asarray(vertices), jnp.asarray(faces))).tolist()))
    assert _pairs(plain) == _pairs(padded) == expected
    assert int(plain.count) == int(padded.count)
    plain_cell = default_cell_size(*face_bounds(vertices, faces))
    padded_lo, padded_hi = face_bounds(padded_v, padded_f)
    real = np.arange(len(padded_f)) < len(faces)
    padded_lo, padded_hi = (np.where(real[:, None], x, x[:1]) for x in (padded_lo, padded_hi))
    assert float(plain_cell) == float(default_cell_size(padded_lo, padded_hi, np.int32(len(faces))))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_find_intersections_is_exact_at_every_size_of_a_bucket(dtype):
    """Meshes of several face counts inside one bucket: each answer equals brute force over the real
    faces (and the exact oracle agrees with libigl elsewhere)."""
    vertices, faces = tt.scenes.crumpled_sheet(12)
    vertices = vertices.astype(dtype)
    for keep in (len(faces) - 40, len(faces) - 3, len(faces)):
        sub = faces[:keep]
        got = set(map(tuple, tt.find_intersections(vertices, sub).tolist()))
        candidates = brute_force_candidates(jnp.asarray(vertices), jnp.asarray(sub), include_shared_edges=True)
        candidates = np.asarray(candidates)
        u, v = (vertices[sub[candidates[:, k]]].astype(np.float64) for k in (0, 1))
        expected = {
            tuple(pair)
            for pair, a, b in zip(candidates.tolist(), u, v, strict=True)
            if _exact.decide(a, b, sub[pair[0]], sub[pair[1]])
        }
        assert got == expected


def test_meshes_of_one_bucket_compile_detection_once():
    vertices, faces = tt.scenes.two_spheres(9)  # 576 faces, 292 vertices: bucket (640, 320)
    sizes = [len(faces) - k for k in (0, 13, 40, 61)]
    assert len({shape_bucket(s) for s in sizes}) == 1
    jax.clear_caches()
    with CompileCount("detect_on_device") as compiles:
        results = [tt.find_intersections(vertices, faces[:s]) for s in sizes]
    assert compiles.count == 1
    assert len(results[0]) > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_crossing_measures_equal_the_mesh_energy_and_length(dtype):
    from tritri_jax._detect import crossing_measures

    vertices, faces = tt.scenes.crumpled_sheet(10)
    vertices = vertices.astype(dtype)
    pairs = tt.find_intersections(vertices, faces)
    energy, length = crossing_measures(vertices, faces, pairs)
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(energy, float(tt.intersection_energy(vertices, faces)), rtol=rtol)
    np.testing.assert_allclose(length, float(tt.intersection_energy(vertices, faces, measure="length")), rtol=rtol)
    assert crossing_measures(vertices, faces, np.zeros((0, 2), int)) == (0.0, 0.0)


def test_detection_regrows_every_full_buffer_and_keeps_the_answer():
    from tritri_jax._detect import detect

    vertices, faces = tt.scenes.crumpled_sheet(12)
    expected = tt.find_intersections(vertices, faces)
    pairs, capacity = detect(*map(jnp.asarray, (vertices, faces)), capacity=64)
    assert capacity > 64
    assert set(map(tuple, pairs.tolist())) == set(map(tuple, expected.tolist()))


def test_phase1_of_meshes_in_one_bucket_compiles_once():
    vertices, faces = tt.scenes.two_spheres(9)
    first, second = faces, faces[:-37]  # a hole does not matter to phase 1
    jax.clear_caches()
    with CompileCount("_phase1") as compiles:
        results = [tt.untangle(vertices, f, relax=False) for f in (first, second)]
    assert compiles.count == 1
    assert all(bool(r.converged) for r in results)
    assert int(results[0].iterations) > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_padded_phase1_takes_the_unpadded_steps(dtype):
    """The same phase-1 steps on a mesh as it is and padded to its bucket (equal to round-off)."""
    from tritri_jax._elastic import laplacian_matrix, unique_edges
    from tritri_jax._multigrid import ell
    from tritri_jax._phase1 import Capacities, _State, phase1_jit

    vertices, faces = tt.scenes.crumpled_sheet(8)
    vertices = (vertices / np.ptp(vertices, axis=0).max()).astype(dtype)
    edges = unique_edges(faces)
    h = float(np.linalg.norm(vertices[edges[:, 0]] - vertices[edges[:, 1]], axis=1).mean())
    padded_v, padded_f = pad_mesh(vertices, faces)
    runs = []
    for v, f in ((vertices, faces), (padded_v, padded_f)):
        x = jnp.asarray(v)
        state = _State(
            x,
            x,
            jnp.int32(2**31 - 1),
            jnp.int32(-1),
            jnp.asarray(80.0, dtype),
            jnp.int32(0),
            jnp.int32(2**31 // 10),
            jnp.int32(0),
            jnp.full((30,), -1, jnp.int32),
            jnp.zeros((30,), dtype),
            jnp.bool_(False),
        )
        out = phase1_jit(
            x,
            jnp.asarray(f),
            np.int32(len(faces)),
            ell(laplacian_matrix(edges, len(v)), dtype),
            h,
            state,
            jnp.asarray(0.25, dtype),
            jnp.int32(30),
            jnp.asarray(1.0, dtype),
            jnp.int32(50),
            capacities=Capacities.for_faces(len(f)),
            patience=8,
        )
        runs.append(out)
    plain, padded = runs
    assert int(plain.step) == int(padded.step) > 0
    np.testing.assert_array_equal(np.asarray(plain.history), np.asarray(padded.history))
    scale = 1e-9 if dtype == np.float64 else 1e-3
    np.testing.assert_allclose(np.asarray(padded.x)[: len(vertices)], np.asarray(plain.x), atol=scale)
    np.testing.assert_array_equal(np.asarray(padded.x)[len(vertices) :], padded_v[len(vertices) :])


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux's memory mappings")
def test_many_sizes_in_one_process_keep_memory_maps_bounded(monkeypatch):
    """Meshes of many buckets in one process: past the mapping budget the compiled stages are
    released, so the mappings stay within the budget plus what one call adds."""
    from tritri_jax import _memory
    from tritri_jax._detect import _detect_on_device_jit

    jax.clear_caches()
    start = _memory.memory_mappings()[0]
    monkeypatch.setattr(_memory, "_MAPPING_BUDGET", start + 1500)  # about two detection compiles
    most, releases, cached = start, 0, 0
    for n in range(4, 9):  # five sphere sizes, five buckets
        vertices, faces = tt.scenes.two_spheres(n)
        assert len(tt.find_intersections(vertices, faces)) > 0
        releases += _detect_on_device_jit._cache_size() < cached + 1
        cached = _detect_on_device_jit._cache_size()
        most = max(most, _memory.memory_mappings()[0])
    assert releases >= 1
    assert most < start + 1500 + 2000


@functools.lru_cache
def _relax_problem(dtype):
    """Two spheres scaled as ``untangle`` scales them, and phase 1's intersection-free point."""
    from tritri_jax._untangle import _normalise

    vertices, faces = tt.scenes.two_spheres(7)
    problem = _normalise(vertices.astype(np.float64), faces, dtype)
    return problem, tt.untangle(np.asarray(problem.theta), faces, relax=False).vertices  # phase 1 only


def test_padded_relax_takes_the_unpadded_steps():
    """Phase 2 on a mesh as it is and padded to its bucket (vertices, faces, edges, adjacent pairs,
    the multigrid's levels, sparse widths): the same Newton steps to the same point (to round-off),
    the padding vertices unmoved, and the same implicit gradient."""
    from tritri_jax._phase2 import pad_like, phase2_setup, run_relax
    from tritri_jax._relax import adjoint_jit
    from tritri_jax._untangle import UntangleOptions

    settings = UntangleOptions()
    problem, x1 = _relax_problem(np.float64)
    cotangent = jnp.asarray(np.random.default_rng(0).normal(size=x1.shape))
    runs = []
    for pad in (False, True):
        theta, setup = phase2_setup(problem, settings, pad=pad)
        x, setup, (steps, _, energy, _) = run_relax(theta, settings, pad_like(x1, theta), setup)
        grad, residual = adjoint_jit(x, theta, setup, pad_like(cotangent, jnp.zeros_like(theta)), cg_iters=500)
        assert float(residual) < 1e-10
        runs.append((np.asarray(x), steps, energy, np.asarray(grad), np.asarray(theta)))
    (x, steps, energy, grad, _), (px, psteps, penergy, pgrad, ptheta) = runs
    assert len(px) > len(x) and steps == psteps > 0
    np.testing.assert_allclose(penergy, energy, rtol=1e-9)
    np.testing.assert_allclose(px[: len(x)], x, atol=1e-9)
    np.testing.assert_array_equal(px[len(x) :], ptheta[len(x) :])
    np.testing.assert_array_equal(pgrad[len(x) :], 0)
    np.testing.assert_allclose(pgrad[: len(x)], grad, atol=1e-9 * np.abs(grad).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_padded_relax_energy_gradient_and_hessian_equal_the_unpadded(dtype):
    """What a Newton step of phase 2 reads at phase 1's point (energy, gradient, the Hessian and the
    multigrid preconditioner applied to a vector), with and without padding, float32 and float64."""
    from tritri_jax._barrier import barrier_blocks, block_vector_product
    from tritri_jax._elastic import elastic_hessian
    from tritri_jax._multigrid import v_cycle
    from tritri_jax._neighbours import neighbours
    from tritri_jax._phase2 import pad_like, phase2_setup
    from tritri_jax._relax import relax_energy
    from tritri_jax._untangle import UntangleOptions

    @jax.jit
    def measure(x, theta, setup, v):
        rest = setup.rest(theta)
        near = neighbours(x, setup, rest.h)
        energy, gradient = jax.value_and_grad(relax_energy)(x, theta, setup, near)
        blocks = barrier_blocks(x, setup.faces, near.close, near.num_close, setup.margin * rest.h, exact=True)
        elastic = elastic_hessian(x, rest, setup.pattern, exact=True)
        product = elastic(v) + setup.barrier_weight * block_vector_product(blocks, v)
        return energy, gradient, product, v_cycle(setup.preconditioner, v), near.num_close

    settings = UntangleOptions(margin=0.5)  # the barrier's reach: half an edge, so that pairs are within it
    problem, x1 = _relax_problem(dtype)
    v = jnp.asarray(np.random.default_rng(1).normal(size=x1.shape), dtype)
    runs = []
    for pad in (False, True):
        theta, setup = phase2_setup(problem, settings, pad=pad)
        x = pad_like(x1, theta)
        runs.append(measure(x, theta, setup, pad_like(v, jnp.zeros_like(theta))))  # default buffers: ample here
    (energy, gradient, product, cycle, close), (penergy, pgradient, pproduct, pcycle, pclose) = runs
    n, rtol = len(x1), (1e-10 if dtype == np.float64 else 2e-4)
    assert int(close) == int(pclose) > 0
    np.testing.assert_allclose(float(penergy), float(energy), rtol=rtol)
    for plain, padded in ((gradient, pgradient), (product, pproduct), (cycle, pcycle)):
        plain, padded = np.asarray(plain), np.asarray(padded)
        np.testing.assert_allclose(padded[:n], plain, atol=rtol * np.abs(plain).max())
        np.testing.assert_array_equal(padded[n:], 0)


def test_meshes_of_one_bucket_compile_phase_two_once():
    """Three meshes of different vertex and face counts in one bucket: one compile of phase 2 (and
    of its buffer sizing) for all, with the same certified result as each alone."""
    vertices, faces = tt.scenes.two_spheres(9)  # 576 faces: bucket 640
    meshes = [(vertices, faces[: len(faces) - k]) for k in (0, 30, 61)]  # holes: unreferenced vertices drop out
    assert len({shape_bucket(len(f) + 1) for _, f in meshes}) == 1
    jax.clear_caches()
    with CompileCount("relax") as relax, CompileCount("close_count") as sizing:
        results = [tt.untangle(v, f) for v, f in meshes]
    assert relax.count == 1 and sizing.count == 1
    assert all(bool(r.converged) and bool(r.relax_converged) for r in results)


def test_a_mesh_with_faces_cut_away_keeps_phase_two_and_phase_one_layouts():
    """Phase 2's setup (the elastic pattern, the multigrid's matrices and their overflow lists) and
    phase 1's Laplacian of a 4.8k-face pair of UV spheres and of the same mesh with 2.5 % of its
    faces cut away have the same shapes: one compiled executable for both. Built on the host, no
    compile. Their stiffness overflows by 7,108 and about 6,000 entries (the poles' two-rings), which
    the mesh-shape ladder put on two rungs (7,168 and 6,144)."""
    from tritri_jax._elastic import laplacian_matrix
    from tritri_jax._multigrid import ell
    from tritri_jax._phase2 import phase2_setup
    from tritri_jax._sizes import slot_bucket
    from tritri_jax._untangle import UntangleOptions, _normalise

    vertices, faces = tt.scenes.stress_case("overlap", 5000, 0)
    layouts = []
    for f in (faces, faces[: len(faces) - len(faces) // 40]):
        problem = _normalise(np.asarray(vertices, np.float64), f, jnp.float64)
        theta, setup = phase2_setup(problem, UntangleOptions())
        assert setup.pattern.extra_rows.shape[0] > 0  # the poles overflow
        rows = shape_bucket(len(problem.theta))  # phase 1's padding (``_sizes.pad_mesh``)
        laplace = ell(laplacian_matrix(problem.edges_np, rows), jnp.float64, width=slot_bucket)
        trees = (theta, setup.pattern, setup.preconditioner, laplace)
        layouts.append(jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), trees))
    assert layouts[0] == layouts[1]

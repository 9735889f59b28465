"""Layer 4/5: untangle reaches certified zero crossings (libigl confirms), keeps connectivity, never lies."""

import os

import numpy as np
import pytest

import tritri_jax as tt

from .meshes import libigl_pairs, load_obj_triangulated


def _assert_certified(result, faces):
    assert bool(result.converged)
    assert int(result.num_intersections) == 0
    assert len(libigl_pairs(np.asarray(result.vertices), faces)) == 0  # independent exact check
    assert np.all(np.asarray(result.history) > 0)


@pytest.mark.parametrize(
    "name",
    ["mobius_strip", "cinquefoil_knot", "trefoil_knot", "figure_of_eight_knot", "pretzel", "three_twist_knot"],
)
def test_untangles_isir_meshes(benchmark_dir, name):
    vertices, faces = load_obj_triangulated(benchmark_dir / f"{name}.obj")
    before = vertices.copy()
    result = tt.untangle(vertices, faces, relax=False)  # phase 2 on these is measured in benchmarks/
    _assert_certified(result, faces)
    np.testing.assert_array_equal(vertices, before)  # the input is not modified
    assert float(result.max_displacement) < 0.15  # fraction of the bounding-box diagonal


@pytest.mark.slow
def test_both_phases_on_an_isir_mesh(benchmark_dir):
    """Phase 2 on a real mesh (the notebook runs the same solve: the compile cache shares it)."""
    vertices, faces = load_obj_triangulated(benchmark_dir / "cinquefoil_knot.obj")
    result = tt.untangle(vertices, faces)
    _assert_certified(result, faces)
    assert bool(result.relax_converged) and int(result.relax_iterations) > 0
    assert float(result.worst_edge_ratio) >= 0.3  # the bound on shape change after relax
    assert float(result.max_displacement) < 0.1


def test_a_refined_mesh_takes_a_comparable_number_of_steps():
    """Resolution independence of phase 1: the same surface with every triangle split in four (the
    same crossings, four times the faces) untangles in about as many steps, because phase 1 steps
    and smooths in ``resolution`` units where the mesh is finer. Small meshes, so ``resolution`` is
    raised to sit between their mean edges (0.08 and 0.04 of the diagonal); ``benchmarks/resolution.py``
    measures the defaults at 2k-32k faces. In edge lengths (``resolution=0``) it takes more."""
    vertices, faces = tt.scenes.stress_case("overlap", 500, seed=0)
    fine_vertices, fine_faces = tt.scenes.subdivide(vertices, faces)
    coarse = tt.untangle(vertices, faces, relax=False, resolution=0.06)
    fine = tt.untangle(fine_vertices, fine_faces, relax=False, resolution=0.06)
    in_edges = tt.untangle(fine_vertices, fine_faces, relax=False, resolution=0.0)
    _assert_certified(coarse, faces)
    _assert_certified(fine, fine_faces)
    assert int(fine.iterations) <= 1.5 * int(coarse.iterations) + 2
    assert int(fine.iterations) < int(in_edges.iterations)


@pytest.mark.parametrize("name", sorted(tt.scenes.SCENES))
@pytest.mark.parametrize("size", [10, 16])
def test_untangles_every_scene_at_two_sizes(name, size):
    vertices, faces = tt.scenes.SCENES[name](size)
    result = tt.untangle(vertices, faces, relax=False)
    _assert_certified(result, faces)
    # crumpled sheets move most: the 162-face one 0.62 of the diagonal in phase 1 since the initial
    # smoothing went from 20 to 80 (docs/untangling.md); phase 2 pulls it back towards the input
    assert float(result.max_displacement) < 0.7
    assert float(result.worst_edge_ratio) > 0.05


def test_clean_mesh_comes_back_unchanged():
    vertices, faces = tt.scenes.sphere(8)
    result = tt.untangle(vertices, faces, relax=False)
    assert bool(result.converged) and int(result.iterations) == 0
    np.testing.assert_allclose(np.asarray(result.vertices), vertices, atol=1e-12)


@pytest.mark.parametrize("method", ["length", "paper"])
def test_empty_meshes_and_a_lone_triangle_come_back_as_they_are(method):
    triangle = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [5, 5, 5]])  # and a vertex no face uses
    for vertices, faces in [(np.zeros((0, 3)), np.zeros((0, 3), np.int32)), (triangle, np.array([[0, 1, 2]]))]:
        result = tt.untangle(vertices, faces, method=method)
        assert bool(result.converged) and int(result.num_intersections) == 0 and int(result.iterations) == 0
        np.testing.assert_allclose(np.asarray(result.vertices), vertices, atol=1e-12)
        assert np.asarray(result.history).shape == (0,)


def test_a_budget_too_small_reports_failure_not_success():
    vertices, faces = tt.scenes.two_spheres(6)
    result = tt.untangle(vertices, faces, max_steps=2, restarts=0, fairing_steps=0, global_moves=0)
    assert not bool(result.converged)
    assert int(result.num_intersections) == len(tt.find_intersections(np.asarray(result.vertices), faces)) > 0


def test_a_full_detection_buffer_is_no_best_state():
    """A first step whose broad-phase buffer overflows undercounts the crossings; phase 1 grows the
    buffer and goes on, and its best state is one it counted in full (it was pinned to the input)."""
    vertices, faces = tt.scenes.two_spheres(6)
    before = len(tt.find_intersections(vertices, faces))
    result = tt.untangle(
        vertices, faces, max_steps=3, restarts=0, capacity=256, relax=False, fairing_steps=0, global_moves=0
    )
    assert not bool(result.converged)
    assert 0 < int(result.num_intersections) < before
    assert float(result.max_displacement) > 0


def test_relax_restores_shape_and_stays_certified():
    vertices, faces = tt.scenes.two_spheres(6)
    raw = tt.untangle(vertices, faces, relax=False)
    reports = []
    relaxed = tt.untangle(vertices, faces, progress=lambda *report: reports.append(report))
    _assert_certified(relaxed, faces)
    assert reports[-1] == ("relax", int(relaxed.relax_iterations), int(relaxed.relax_iterations))
    assert reports[0][0] == "untangle" and reports[-2] == ("untangle", int(relaxed.iterations), 0)
    lengths = np.asarray(relaxed.history_length)
    assert lengths.shape == np.asarray(relaxed.history).shape and np.all(lengths > 0)
    assert bool(relaxed.relax_converged) and relaxed.options == tt.UntangleOptions()
    assert int(relaxed.relax_iterations) > 0
    assert float(relaxed.relax_gradient_norm) < 1e-6  # a stationary point (dimensionless units)
    assert float(relaxed.mean_displacement) < float(raw.mean_displacement)
    assert float(relaxed.worst_edge_ratio) > 0.8


def test_implicit_gradient_matches_finite_differences():
    jnp = pytest.importorskip("jax.numpy")
    import jax

    vertices, faces = tt.scenes.two_spheres(6)
    rng = np.random.default_rng(0)
    weights = jnp.asarray(rng.normal(size=vertices.shape))

    def loss(x):
        return jnp.sum(weights * tt.untangle(x, faces).vertices)

    grad = jax.grad(loss)(jnp.asarray(vertices))
    assert np.all(np.isfinite(np.asarray(grad)))
    direction = rng.normal(size=vertices.shape)
    eps = 1e-5
    fd = (
        float(loss(jnp.asarray(vertices + eps * direction))) - float(loss(jnp.asarray(vertices - eps * direction)))
    ) / (2 * eps)
    np.testing.assert_allclose(float(jnp.sum(grad * direction)), fd, rtol=1e-3)


def test_paper_route_runs_and_reports_honestly():
    vertices, faces = tt.scenes.two_spheres(6)
    result = tt.untangle(vertices, faces, method="paper", paper_rounds=3)
    assert len(result.history) == 3
    assert int(result.num_intersections) == len(tt.find_intersections(np.asarray(result.vertices), faces))
    assert bool(result.converged) == (int(result.num_intersections) == 0)
    with pytest.raises(ValueError, match="method"):
        tt.untangle(vertices, faces, method="magic")
    with pytest.raises(ValueError, match="unknown option.*step_size"):
        tt.untangle(vertices, faces, step_size=0.1)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux's memory-mapping cap")
def test_compiled_code_is_released_when_the_process_nears_the_mapping_cap(monkeypatch):
    """Each compile of untangle maps thousands of regions; a process untangling many mesh sizes
    must drop the library's compiled code before Linux's cap aborts it, and only then."""
    from tritri_jax import _detect, _memory

    vertices, faces = tt.scenes.two_spheres(4)
    compiled = _detect.candidates_jit
    compiled(vertices, faces, capacity=1024)
    assert compiled._cache_size() >= 1
    monkeypatch.setattr(_memory, "_MAPPING_BUDGET", 10**9)
    monkeypatch.setattr(_memory, "_MAPPING_SHARE", 1.0)
    _memory.release_if_crowded()  # below the cap and the budget: nothing happens
    assert compiled._cache_size() >= 1
    monkeypatch.setattr(_memory, "_MAPPING_BUDGET", 0)  # as if the process were past its budget
    monkeypatch.setattr(_memory, "_SEEN", {"a call compiled already"})
    monkeypatch.setattr(_memory, "_HELD", [0])
    _memory.release_if_crowded("a call compiled already")  # its code is there: kept
    assert compiled._cache_size() >= 1
    _memory.release_if_crowded()
    assert compiled._cache_size() == 0
    # a key seen before its code was freed by someone else (jax.clear_caches) is forgotten
    compiled(vertices, faces, capacity=1024)
    monkeypatch.setattr(_memory, "_SEEN", {"a call compiled already", "another"})
    monkeypatch.setattr(_memory, "_MAPPING_BUDGET", 10**9)
    _memory.release_if_crowded("a call compiled already")  # the stages hold code: remembered
    compiled.clear_cache()  # freed elsewhere
    monkeypatch.setattr(_memory, "_MAPPING_BUDGET", 0)
    _memory.release_if_crowded("a call compiled already")  # no code behind it now: a release
    assert _memory._SEEN == {"a call compiled already"}


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("max_steps", 0, "max_steps must be an integer >= 1"),
        ("relax_polish", -1, "relax_polish must be an integer >= 0"),
        ("fairing_steps", 2.5, "fairing_steps must be an integer"),
        ("global_moves", True, "global_moves must be an integer"),
        ("step_fraction", 0.0, "step_fraction must be finite and > 0"),
        ("margin", float("nan"), "margin must be finite"),
        ("pull", -1e-3, "pull must be finite and >= 0"),
        ("smoothing", "80", "smoothing must be a number"),
        ("capacity", 0, "capacity must be None or a positive integer"),
    ],
)
def test_options_out_of_range_are_named_before_anything_runs(option, value, message):
    vertices, faces = tt.scenes.two_spheres(2)
    with pytest.raises(ValueError, match=message):
        tt.untangle(vertices, faces, **{option: value})
    with pytest.raises(ValueError, match=message):
        tt.Untangler(faces, **{option: value})


def test_local_reach_auto_counts_the_faces_thinner_than_twice_the_reach():
    """``uneven_share`` against a hand count: an equilateral triangle (half altitude 0.43), a right
    triangle 1 x 0.2 (0.098) and a sliver (5e-5), at reaches 0.01, 0.2 and 0.5."""
    from tritri_jax._relax import uneven_share

    theta = np.array([[0, 0, 0], [1, 0, 0], [0.5, np.sqrt(0.75), 0], [2, 0, 0], [1.5, 1e-4, 0], [0, 0.2, 0.0]])
    faces = np.array([[0, 1, 2], [1, 3, 4], [0, 5, 1]])
    assert uneven_share(theta, faces, 0.01, 1.0) == pytest.approx(1 / 3)
    assert uneven_share(theta, faces, 0.2, 1.0) == pytest.approx(2 / 3)
    assert uneven_share(theta, faces, 0.5, 1.0) == 1.0
    assert uneven_share(theta, np.zeros((0, 3), int), 0.1, 1.0) == 0.0
    with pytest.raises(ValueError, match="local_reach"):
        tt.untangle(theta, faces, local_reach="yes")


def test_a_clean_uneven_mesh_comes_back_from_relax_unmoved_with_a_local_reach():
    """A clean graded torus (edges spanning 1000x: slivers beside a fine patch). With one barrier
    reach for every face (``local_reach=False``) its slivers, closer than ``margin * h`` at rest, are
    pushed apart (the test checks that this happens, so that the option is what prevents it); with
    the default (``"auto"``: more than a tenth of its faces are thin, so each face's reach is at
    most half its own altitude) relax finds nothing to do."""
    vertices, faces = tt.scenes.graded_torus(9, grading=1000.0)
    pushed = tt.untangle(vertices, faces, local_reach=False)
    assert int(pushed.relax_iterations) > 0 and float(pushed.worst_edge_ratio) < 0.9
    result = tt.untangle(vertices, faces)
    assert bool(result.converged) and int(result.iterations) == 0
    assert int(result.relax_iterations) == 0 and bool(result.relax_converged)
    np.testing.assert_allclose(np.asarray(result.vertices), vertices, atol=1e-12)

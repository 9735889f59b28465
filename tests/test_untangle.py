"""Layer 4/5: untangle reaches certified zero crossings (libigl confirms), keeps connectivity, never lies."""

import numpy as np
import pytest

import tritri_jax as tt

from .meshes import libigl_pairs, load_obj_triangulated


def _assert_certified(result, faces):
    assert bool(result.converged)
    assert int(result.num_intersections) == 0
    assert len(libigl_pairs(np.asarray(result.vertices), faces)) == 0  # independent exact check
    assert np.all(np.asarray(result.history) > 0)


@pytest.mark.parametrize("name", ["mobius_strip", "cinquefoil_knot", "trefoil_knot"])
def test_untangles_isir_meshes(benchmark_dir, name):
    vertices, faces = load_obj_triangulated(benchmark_dir / f"{name}.obj")
    before = vertices.copy()
    result = tt.untangle(vertices, faces)
    _assert_certified(result, faces)
    np.testing.assert_array_equal(vertices, before)  # the input is not modified
    assert float(result.max_displacement) < 0.15  # fraction of the bounding-box diagonal


def test_untangles_two_spheres():
    vertices, faces = tt.scenes.two_spheres(8)
    result = tt.untangle(vertices, faces)
    _assert_certified(result, faces)


def test_clean_mesh_comes_back_unchanged():
    vertices, faces = tt.scenes.sphere(8)
    result = tt.untangle(vertices, faces)
    assert bool(result.converged) and int(result.iterations) == 0
    np.testing.assert_allclose(np.asarray(result.vertices), vertices, atol=1e-12)


def test_a_budget_too_small_reports_failure_not_success():
    vertices, faces = tt.scenes.two_spheres(8)
    result = tt.untangle(vertices, faces, max_steps=2)
    assert not bool(result.converged)
    assert int(result.num_intersections) == len(tt.find_intersections(np.asarray(result.vertices), faces)) > 0

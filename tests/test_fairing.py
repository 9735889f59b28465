"""Layer 4: fairing, phase 1's escalation, flattens creases, holds the rest of the mesh, never loses a
state; ``untangle`` reports it and needs it where descent stalls."""

import numpy as np
import pytest

import tritri_jax as tt
from tritri_jax._elastic import unique_edges
from tritri_jax._fairing import SHRINK_FLOOR, fair_crossings

from .meshes import libigl_pairs


def _crease(n, dtype=np.float64):
    """A capsule bent on an arc tighter than its radius, normalised as ``untangle`` does: its inner
    wall turns over on itself along the bend (phase 1's descent stalls on such creases at 8k faces)."""
    vertices, faces = tt.scenes.capsule(n, radius=0.3, length=3.0)
    vertices = tt.scenes.bend(vertices, angle=1.2, radius=0.1)
    lo, hi = vertices.min(0), vertices.max(0)
    x = (vertices - (lo + hi) / 2) / np.linalg.norm(hi - lo)
    edges = unique_edges(faces)
    h = float(np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1).mean())
    return x.astype(dtype), faces, edges, h


@pytest.mark.parametrize("n", [6, 12])
def test_fairing_removes_a_crease_at_two_resolutions_and_holds_the_rest(n):
    x, faces, edges, h = _crease(n)
    before = x.copy()
    remaining = tt.find_intersections(x, faces)
    assert len(remaining) > 10
    unit = max(h, 0.02)
    y, left, steps = fair_crossings(x, faces, edges, h, unit, remaining, 8)
    np.testing.assert_array_equal(x, before)  # the input is not modified
    assert len(left) == 0 and len(libigl_pairs(y, faces)) == 0  # certified, and libigl agrees
    assert 1 <= steps <= 3  # the region is sized in the mesh's units, not in edges: the same at both sizes
    # vertices farther from every crossing than the largest radius used are untouched, bit for bit
    crossing = np.unique(faces[remaining.reshape(-1)].reshape(-1))
    distance = np.min(np.linalg.norm(x[:, None] - x[None, crossing], axis=-1), axis=1)
    far = distance > 2 * unit * 2 ** (steps - 1) + np.max(np.linalg.norm(y - x, axis=1))
    assert far.sum() > len(x) // 4
    np.testing.assert_array_equal(y[far], x[far])
    assert np.all(np.isfinite(y))


def test_fairing_keeps_the_run_precision_and_the_best_state():
    x, faces, edges, h = _crease(6, np.float32)
    remaining = tt.find_intersections(x, faces)
    y, left, steps = fair_crossings(x, faces, edges, h, max(h, 0.02), remaining, 8)
    assert y.dtype == np.float32 and len(left) == 0 and len(tt.find_intersections(y, faces)) == 0
    # no step allowed: the state it was given, with its pairs
    y, left, steps = fair_crossings(x, faces, edges, h, max(h, 0.02), remaining, 0)
    assert steps == 0 and np.array_equal(y, x) and np.array_equal(left, remaining)


def test_fairing_never_shrinks_a_whole_part():
    """A region that would take every vertex of a connected part holds no rim: such a step shrinks
    the part toward a point (no crossing left, no shape either), so fairing stops before it. Two
    overlapping spheres with a region as wide as the mesh: no step is taken, the state is kept; with
    a region around one crossing that leaves both rims, steps are taken as usual."""
    vertices, faces = tt.scenes.two_spheres(6)
    lo, hi = vertices.min(0), vertices.max(0)
    x = (vertices - (lo + hi) / 2) / np.linalg.norm(hi - lo)
    edges = unique_edges(faces)
    h = float(np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1).mean())
    remaining = tt.find_intersections(x, faces)
    y, left, steps = fair_crossings(x, faces, edges, h, 0.5, remaining, 8)  # a radius of the whole diagonal
    assert steps == 0 and np.array_equal(y, x) and np.array_equal(left, remaining)
    y, left, steps = fair_crossings(x, faces, edges, h, h / 2, remaining, 1)
    assert steps == 1 and not np.array_equal(y, x)
    assert np.all(np.isfinite(y))


def test_fairing_leaves_no_edge_below_its_floor():
    """A step that shrinks an edge below ``SHRINK_FLOOR`` of its input length is not taken. The
    crease with a region of 0.3 of the diagonal: one step removes it, shrinking the worst edge to
    ~5 % of its length; measured against input edges ten times longer (a floor of 20 % of these),
    the same step is refused and the state kept."""
    x, faces, edges, h = _crease(6)
    lengths = np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1)
    remaining = tt.find_intersections(x, faces)
    y, left, steps = fair_crossings(x, faces, edges, h, 0.15, remaining, 8)
    shortest = np.min(np.linalg.norm(y[edges[:, 0]] - y[edges[:, 1]], axis=1) / lengths)
    assert steps == 1 and len(left) == 0 and SHRINK_FLOOR < shortest < 10 * SHRINK_FLOOR
    y, left, steps = fair_crossings(x, faces, edges, h, 0.15, remaining, 8, rest=10 * x)
    assert steps == 0 and np.array_equal(y, x) and np.array_equal(left, remaining)


def test_untangle_finishes_a_stalled_descent_by_fairing_and_says_so():
    """Descent limited to a few steps leaves the crease crossing; with fairing the same budget
    reaches certified zero, and the result counts the fairing steps (the move does the work)."""
    vertices, faces = tt.scenes.capsule(8, radius=0.3, length=3.0)
    vertices = tt.scenes.bend(vertices, angle=2.5, radius=0.1)
    budget = dict(max_steps=3, restarts=0, relax=False, global_moves=0)  # fairing alone
    without = tt.untangle(vertices, faces, fairing_steps=0, **budget)
    assert not bool(without.converged) and int(without.fairing_steps) == 0
    result = tt.untangle(vertices, faces, **budget)
    assert bool(result.converged) and len(libigl_pairs(np.asarray(result.vertices), faces)) == 0
    assert 1 <= int(result.fairing_steps) <= 8 and int(result.iterations) == 3
    # and phase 2 restores the shape from the faired state, still certified
    relaxed = tt.untangle(vertices, faces, max_steps=3, restarts=0)
    assert bool(relaxed.converged) and len(libigl_pairs(np.asarray(relaxed.vertices), faces)) == 0
    assert float(relaxed.worst_edge_ratio) > float(result.worst_edge_ratio)

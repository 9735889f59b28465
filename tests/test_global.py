"""Layer 4: global moves, phase 1's last escalation: a part moved clear of another, a separating
curve's smaller side pushed back; each kept only when the exact crossing count drops."""

import jax
import numpy as np

import tritri_jax as tt
from tritri_jax import scenes
from tritri_jax._global import global_moves

jax.config.update("jax_enable_x64", True)


def normalised(name, n):
    """A tangle scaled to unit bounding-box diagonal (phase 1's frame) and its unique edges."""
    vertices, faces = scenes.tangle(name, n)
    lo, hi = vertices.min(0), vertices.max(0)
    x = (vertices - 0.5 * (lo + hi)) / np.linalg.norm(hi - lo)
    edges = np.unique(np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1), axis=0)
    h = np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1).mean()
    return x, faces, edges, h


def test_a_ring_around_a_sheet_is_moved_clear_rigidly_in_one_move():
    x, faces, edges, h = normalised("sheet_through_ring", 8)
    remaining = tt.find_intersections(x, faces)
    assert len(remaining) > 0
    same, left, moves = global_moves(x, faces, edges, remaining, h, 0)
    assert moves == 0 and np.array_equal(same, x) and len(left) == len(remaining)
    moved, left, moves = global_moves(x, faces, edges, remaining, h, 10, pushes=False)
    assert moves == 1 and len(left) == 0
    shift = moved - x
    still = np.all(shift == 0, axis=1)
    assert still.any() and not still.all()  # one part stayed, the other moved ...
    np.testing.assert_allclose(shift[~still] - shift[~still][0], 0, atol=1e-12)  # ... rigidly


def test_a_pinch_is_pushed_back_and_the_far_sheet_is_untouched():
    x, faces, edges, h = normalised("pinch", 12)
    remaining = tt.find_intersections(x, faces)
    _, left, moves = global_moves(x, faces, edges, remaining, h, 1, pushes=False)
    assert moves == 0 and len(left) == len(remaining)  # one component: no rigid move applies
    moved, left, moves = global_moves(x, faces, edges, remaining, h, 1)
    assert moves == 1 and len(left) < len(remaining)
    lower = np.arange(len(x)) < len(x) // 2  # the flat lower sheet comes first
    shift = np.linalg.norm(moved - x, axis=1)
    assert shift[lower].max() == 0 or shift[~lower].max() == 0  # one sheet moved, the other held
    assert (shift < 1e-15).sum() > len(x) // 2  # the move fades out: most vertices did not move


def test_the_closed_klein_bottle_takes_no_move_and_untangle_ends_honestly():
    vertices, faces = scenes.klein_bottle(8)
    before = len(tt.find_intersections(vertices, faces))
    result = tt.untangle(vertices, faces, max_steps=20, restarts=0, relax=False)
    assert not bool(result.converged)
    assert 0 < int(result.num_intersections) <= before
    assert np.isfinite(np.asarray(result.vertices)).all()


def test_untangle_needs_the_global_move_for_a_ring_around_a_sheet():
    """The same small descent budget: without global moves the ring stays crossed, with them it
    is moved clear and the result is certified, its shape intact (the move does the work)."""
    vertices, faces = scenes.tangle("sheet_through_ring", 8)
    budget = dict(max_steps=5, restarts=0, relax=False, fairing_steps=0)
    without = tt.untangle(vertices, faces, global_moves=0, **budget)
    assert not bool(without.converged) and int(without.global_moves) == 0
    result = tt.untangle(vertices, faces, **budget)
    assert bool(result.converged) and int(result.global_moves) >= 1
    assert float(result.worst_edge_ratio) > 0.99  # moved rigidly from the input

"""Layer 4: phase 2's neighbour lists hold every pair that can matter anywhere within their reach,
and a list kept across steps measures the close pairs again exactly (brute force over all pairs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tritri_jax as tt
from tritri_jax._barrier import shared_vertices
from tritri_jax._distance import pair_distance_sq
from tritri_jax._mesh_energy import pair_triangles
from tritri_jax._neighbours import (
    _NEARBY_REACH,
    adjacent_bounds,
    adjacent_face_pairs,
    advance,
    checked_pairs,
    close_pairs,
    crossing_check,
    neighbours,
)
from tritri_jax._phase2 import phase2_setup, size_buffers
from tritri_jax._untangle import UntangleOptions, _normalise


def _two_sheets(n=8):
    """Two wavy sheets, one a copy of the other raised by 5 % of an edge at one side to 20 % at the
    other: intersection-free, with faces within the barrier's reach (10 % of an edge) of the other
    sheet's and faces beyond it."""
    s, t = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n), indexing="ij")
    sheet = np.stack([s, t, 0.05 * np.sin(3 * s) * np.cos(2 * t)], -1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(n - 1), np.arange(n - 1), indexing="ij")
    a = (i * n + j).ravel()
    faces = np.concatenate([np.stack([a, a + n, a + n + 1], 1), np.stack([a, a + n + 1, a + 1], 1)])
    raised = sheet + np.stack([0 * s, 0 * s, (0.05 + 0.15 * s) / (n - 1)], -1).reshape(-1, 3)
    return np.concatenate([sheet, raised]), np.concatenate([faces, faces + n * n]).astype(np.int32)


@pytest.fixture(scope="module")
def sheets():
    vertices, faces = _two_sheets()
    problem = _normalise(vertices, faces, jnp.float64)
    theta, setup = phase2_setup(problem, UntangleOptions(), pad=False)  # unpadded: compared with brute force
    return problem, size_buffers(theta, UntangleOptions(), theta, setup)


def _pair_set(rows, count):
    rows = np.asarray(rows)[: int(count)]
    return {tuple(sorted(row)) for row in rows.tolist()}


@jax.jit
def _all_distances(x, faces, pairs):
    u, v = pair_triangles(x, faces, pairs)
    return jax.vmap(pair_distance_sq)(u, v, shared_vertices(faces, pairs))


def _brute_force_close(x, faces, dhat):
    """Every face pair (adjacent ones included) with non-incident primitives closer than ``dhat``."""
    i, j = np.triu_indices(len(faces), 1)
    pairs = np.stack([i, j], 1).astype(np.int32)
    close = np.asarray(_all_distances(x, jnp.asarray(faces), jnp.asarray(pairs))) < dhat**2
    return {tuple(row) for row in pairs[close].tolist()}


def _moved(x, reach, seed):
    """``x`` with every vertex moved in a random direction, a quarter of them by ``reach`` and the rest
    by less."""
    rng = np.random.default_rng(seed)
    step = rng.normal(size=x.shape)
    length = reach * np.where(rng.uniform(size=(len(x), 1)) < 0.25, 1.0, rng.uniform(size=(len(x), 1)))
    return x + jnp.asarray(step / np.linalg.norm(step, axis=1, keepdims=True) * length)


_neighbours = jax.jit(neighbours)
_advance = jax.jit(advance)
_close = jax.jit(close_pairs)
_crossings = jax.jit(lambda x, setup, near: crossing_check(x, setup, near).num_flagged)
_checked = jax.jit(checked_pairs)
_bounds = jax.jit(adjacent_bounds)


@pytest.mark.parametrize("reach", [1 / 16, 1 / 2])  # in h: with a nearby list, and beyond its reach without one
def test_neighbours_hold_every_pair_within_dhat_or_crossing_anywhere_within_reach(sheets, reach):
    problem, setup = sheets
    x, faces, h = problem.theta, np.asarray(problem.faces), problem.h
    dhat, reach = setup.margin * h, reach * h
    near = _neighbours(x, setup, h, reach)
    assert not bool(near.overflowed)
    usable = int(near.num_nearby) <= near.nearby.shape[0]
    assert usable == (reach <= _NEARBY_REACH * h)
    if usable:  # the crossing check reads the nearby pairs only
        nearby = _pair_set(near.nearby, near.num_nearby)
        assert _pair_set(near.pairs, near.num_pairs) == nearby
        assert len(nearby) < int(near.count) + len(setup.adjacent)
    assert _pair_set(near.close, near.num_close) == _brute_force_close(x, faces, dhat)
    crossed = newly_close = 0
    for seed in range(6):
        y = _moved(x, reach, seed)
        close = _brute_force_close(y, faces, dhat)
        crossing = {tuple(row) for row in tt.find_intersections(y, faces).tolist()}
        assert close | crossing <= _pair_set(*_checked(y, setup, near))
        assert _pair_set(*_close(y, setup, near, dhat)) == close
        assert (int(_crossings(y, setup, near)) > 0) == bool(crossing)
        crossed += bool(crossing)
        newly_close += bool(close - _pair_set(near.close, near.num_close))
    assert crossed and newly_close  # the moves reached pairs that were neither crossing nor close at x


def test_a_kept_list_measures_the_close_pairs_again_and_is_rebuilt_past_its_skin(sheets):
    problem, setup = sheets
    x, faces, h = problem.theta, np.asarray(problem.faces), problem.h
    dhat, reach = setup.margin * h, setup.max_step * h / 16
    first = _advance(x, setup, h, reach, None)
    assert float(first.skin) == pytest.approx(2 * reach)  # twice the reach, where that still has nearby pairs
    y = _moved(x, reach / 2, 7)
    kept = _advance(y, setup, h, reach, first)  # moved reach / 2, plus a step of reach: within 2 reach
    np.testing.assert_array_equal(np.asarray(kept.reference), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(kept.origin), np.asarray(y))
    assert _pair_set(kept.close, kept.num_close) == _brute_force_close(y, faces, dhat)
    assert _pair_set(*_close(y, setup, kept, dhat)) == _brute_force_close(y, faces, dhat)
    rebuilt = _advance(y, setup, h, 2 * reach, first)  # a step of 2 reach would leave the skin
    np.testing.assert_array_equal(np.asarray(rebuilt.reference), np.asarray(y))
    assert _pair_set(rebuilt.close, rebuilt.num_close) == _brute_force_close(y, faces, dhat)


def test_adjacent_face_pairs_equal_brute_force():
    _, faces = _two_sheets(5)
    faces = np.concatenate([faces, faces[:1, [1, 2, 0]]])  # a repeated face: three shared vertices, left out
    shared = (faces[:, None, :, None] == faces[None, :, None, :]).sum(axis=(2, 3))
    i, j = np.nonzero(np.triu((shared >= 1) & (shared <= 2), 1))
    assert adjacent_face_pairs(faces).tolist() == np.stack([i, j], 1).tolist()
    assert adjacent_face_pairs(faces[:1]).shape == (0, 2)


def test_adjacent_bounds_are_lower_bounds_and_exact_below_the_threshold(sheets):
    problem, setup = sheets
    x, h = problem.theta, problem.h
    exact = np.sqrt(np.asarray(_all_distances(x, setup.faces, setup.adjacent)))
    unknown = jnp.full(len(setup.adjacent), -jnp.inf, x.dtype)
    at_x = np.asarray(_bounds(x, setup, unknown, x, 0.75 * h))
    np.testing.assert_allclose(at_x, exact, rtol=1e-12)  # nothing known: all measured
    y = _moved(x, 0.05 * h, 3)
    exact = np.sqrt(np.asarray(_all_distances(y, setup.faces, setup.adjacent)))
    at_y = np.asarray(_bounds(y, setup, jnp.asarray(at_x), x, 0.75 * h))
    below = at_y < 0.75 * h
    np.testing.assert_allclose(at_y[below], exact[below], rtol=1e-12)
    assert np.all(at_y <= exact * (1 + 1e-12))
    assert below.any() and (at_y[~below] < exact[~below] - 1e-3 * h).any()  # both kinds occur

"""Layer 2: the spatial hash returns exactly the AABB-overlapping, non-adjacent pairs (a superset of crossings)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tritri_jax as tt
from tritri_jax._broad_phase import brute_force_candidates

CASES = [
    ("two_spheres", 6),
    ("two_spheres", 10),
    ("folded_sheet", 8),
    ("twisted_torus", 8),
    ("crumpled_sheet", 10),
    ("crumpled_sheet", 16),
]

_candidates = jax.jit(tt.candidate_pairs, static_argnames=("capacity", "skip_vertex_adjacent", "include_shared_edges"))


def _as_set(pairs, count):
    pairs = np.asarray(pairs)[: int(count)]
    return set(map(tuple, pairs.tolist()))


def _scene(name, n):
    return tt.scenes.SCENES[name](n) if name in tt.scenes.SCENES else tt.scenes.sphere(n)


@pytest.mark.parametrize("name,n", CASES + [("sphere", 8)])
@pytest.mark.parametrize("cell_scale", [None, 0.5, 3.0])
def test_hash_grid_equals_brute_force(name, n, cell_scale):
    vertices, faces = _scene(name, n)
    v, f = jnp.asarray(vertices), jnp.asarray(faces)
    cell_size = None
    if cell_scale is not None:
        edge = np.linalg.norm(vertices[faces[:, 0]] - vertices[faces[:, 1]], axis=1).mean()
        cell_size = cell_scale * edge  # small cells force many "big" faces, large ones crowd cells
    result = _candidates(v, f, capacity=1 << 15, cell_size=cell_size)
    assert not bool(result.overflowed)
    got = np.asarray(result.pairs)[: int(result.count)]
    assert np.all(got[:, 0] < got[:, 1])
    assert len(set(map(tuple, got.tolist()))) == len(got), "duplicates"
    expected = set(map(tuple, np.asarray(brute_force_candidates(v, f)).tolist()))
    assert set(map(tuple, got.tolist())) == expected
    assert np.all(np.asarray(result.pairs)[int(result.count) :] == -1)


@pytest.mark.parametrize(
    "flags", [dict(skip_vertex_adjacent=True), dict(include_shared_edges=True), dict(padding=0.15)]
)
def test_topology_options_match_brute_force(flags):
    vertices, faces = tt.scenes.twisted_torus(8)
    v, f = jnp.asarray(vertices), jnp.asarray(faces)
    result = _candidates(v, f, capacity=1 << 15, **flags)
    expected = set(map(tuple, np.asarray(brute_force_candidates(v, f, **flags)).tolist()))
    assert _as_set(result.pairs, result.count) == expected


def test_overflow_is_reported_with_the_true_count():
    vertices, faces = tt.scenes.crumpled_sheet(10)
    v, f = jnp.asarray(vertices), jnp.asarray(faces)
    full = _candidates(v, f, capacity=1 << 15)
    small = _candidates(v, f, capacity=64)
    assert bool(small.overflowed) and not bool(full.overflowed)
    assert int(small.count) == int(full.count) > 64
    stored = _as_set(small.pairs, 64)
    assert stored <= _as_set(full.pairs, full.count) and len(stored) == 64


def test_a_huge_triangle_does_not_blow_up():
    vertices, faces = tt.scenes.sphere(8)
    giant = np.array([[-1e3, -1e3, 0.1], [1e3, -1e3, 0.1], [0, 1e3, 0.1]])
    vertices = np.concatenate([vertices, giant])
    faces = np.concatenate([faces, [[len(vertices) - 3, len(vertices) - 2, len(vertices) - 1]]])
    v, f = jnp.asarray(vertices), jnp.asarray(faces)
    result = _candidates(v, f, capacity=1 << 13)
    expected = set(map(tuple, np.asarray(brute_force_candidates(v, f)).tolist()))
    assert _as_set(result.pairs, result.count) == expected


def test_empty_and_single_face_meshes():
    v = jnp.zeros((3, 3))
    for faces in (jnp.zeros((0, 3), jnp.int32), jnp.array([[0, 1, 2]])):
        result = tt.candidate_pairs(v, faces, capacity=8)
        assert int(result.count) == 0 and not bool(result.overflowed)


def test_both_sort_paths_agree():
    from tritri_jax._broad_phase import _sort_keys

    keys = jnp.asarray(np.random.default_rng(0).integers(0, 2**31 - 1, 5000), jnp.int32)
    keys = keys.at[::7].set(keys[0])  # ties
    packed = _sort_keys(keys, pack=True)
    pairs = _sort_keys(keys, pack=False)
    np.testing.assert_array_equal(packed[0], pairs[0])
    np.testing.assert_array_equal(packed[0], np.sort(np.asarray(keys)))
    for _, order in (packed, pairs):
        np.testing.assert_array_equal(keys[order], packed[0])
        assert sorted(np.asarray(order).tolist()) == list(range(5000))


_part = jax.jit(lambda v, f, index, parts: tt.candidate_pairs(v, f, capacity=1 << 13, part=(index, parts)))


@pytest.mark.parametrize("parts", [1, 3, 8])
def test_the_parts_split_the_candidates_without_overlap(parts):
    vertices, faces = tt.scenes.sphere(8)  # with a huge triangle: its pairs are shared out too
    giant = np.array([[-1e3, -1e3, 0.1], [1e3, -1e3, 0.1], [0, 1e3, 0.1]])
    v = jnp.asarray(np.concatenate([vertices, giant]))
    f = jnp.asarray(np.concatenate([faces, [[len(v) - 3, len(v) - 2, len(v) - 1]]]))
    shares = [_part(v, f, index, parts) for index in range(parts)]
    found = [_as_set(share.pairs, share.count) for share in shares]
    assert sum(map(len, found)) == sum(int(share.count) for share in shares)
    assert sum(map(len, found)) == len(set().union(*found)), "a pair in two parts"
    assert set().union(*found) == set(map(tuple, np.asarray(brute_force_candidates(v, f)).tolist()))
    if parts > 1:
        assert max(map(len, found)) < 0.75 * sum(map(len, found)), "the parts are uneven"

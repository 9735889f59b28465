"""Intersection curves and regions (``intersection_curves``, ``curve_regions``) against brute force.

The crossing pairs come from libigl's exact predicates (no JAX compile); the curves are checked
against a chaining by geometry (segment ends that coincide in space), the regions against a
breadth-first flood fill over faces sharing an edge.
"""

import collections

import igl.predicates
import numpy as np
import pytest
from scipy.spatial import cKDTree

import tritri_jax as tt
from tritri_jax import scenes


def exact_pairs(vertices, faces):
    found = igl.predicates.find_self_intersections(np.asarray(vertices, np.float64), np.asarray(faces, np.int64))
    pairs = np.sort(np.asarray(found[1], np.int64).reshape(-1, 2), axis=1)
    return np.unique(pairs, axis=0)


def three_spheres():
    """Spheres at x = 0, 1.5, 3 (radius 1): two loops, the outer spheres do not meet."""
    parts = [scenes.sphere(8, centre=(1.5 * k, 0.0, 0.0)) for k in range(3)]
    offsets = np.cumsum([0] + [len(v) for v, _ in parts[:-1]])
    vertices = np.concatenate([v for v, _ in parts])
    faces = np.concatenate([f + o for (_, f), o in zip(parts, offsets, strict=True)])
    return vertices, faces


MESHES = {
    "two_spheres": lambda: scenes.two_spheres(8),
    "three_spheres": three_spheres,
    "crumpled_sheet_0": lambda: scenes.crumpled_sheet(16, seed=0),
    "crumpled_sheet_3": lambda: scenes.crumpled_sheet(20, seed=3),
    "folded_sheet": lambda: scenes.folded_sheet(16),
    "twisted_torus": lambda: scenes.twisted_torus(8),
    "klein_bottle": lambda: scenes.klein_bottle(8),
    "punctured_klein_bottle": lambda: scenes.klein_bottle(12, hole=0.8),
}


def segment_ends(vertices, faces, pair):
    """The points where an edge of one face of ``pair`` passes through the other (closed tests)."""
    points = []
    for own, other in ((pair[0], pair[1]), (pair[1], pair[0])):
        a, b, c = vertices[faces[other]]
        normal = np.cross(b - a, c - a)
        for k in range(3):
            p, q = vertices[faces[own][k]], vertices[faces[own][(k + 1) % 3]]
            sp, sq = normal @ (p - a), normal @ (q - a)
            if sp * sq > 0 or sp == sq:
                continue
            point = p + sp / (sp - sq) * (q - p)
            bary = [np.cross(y - x, point - x) @ normal for x, y in ((a, b), (b, c), (c, a))]
            if min(bary) >= -1e-12 * normal @ normal or max(bary) <= 1e-12 * normal @ normal:
                points.append(point)
    return points


def geometric_curves(vertices, faces, pairs):
    """Pairs linked when their segments share an end in space (index-free), as a set of frozensets."""
    points, owner = [], []
    for k, pair in enumerate(pairs):
        ends = segment_ends(vertices, faces, pair)
        points += ends
        owner += [k] * len(ends)
    parent = list(range(len(pairs)))

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for i, j in cKDTree(np.array(points)).query_pairs(1e-9 * np.ptp(vertices)):
        parent[find(owner[i])] = find(owner[j])
    groups = collections.defaultdict(set)
    for k, pair in enumerate(pairs):
        groups[find(k)].add(tuple(pair))
    return {frozenset(group) for group in groups.values()}


@pytest.mark.parametrize("name", sorted(MESHES))
def test_curves_partition_the_pairs_as_chaining_by_geometry_does(name):
    vertices, faces = MESHES[name]()
    pairs = exact_pairs(vertices, faces)
    curves = tt.intersection_curves(vertices, faces, pairs)
    found = [frozenset(map(tuple, curve.pairs.tolist())) for curve in curves]
    assert sum(len(group) for group in found) == len(pairs)
    assert set().union(*found) == set(map(tuple, pairs.tolist()))
    assert set(found) == geometric_curves(vertices, faces, pairs)
    assert [len(c.pairs) for c in curves] == sorted((len(c.pairs) for c in curves), reverse=True)


def flood_fill(faces, removed):
    by_edge = collections.defaultdict(list)
    for k, face in enumerate(faces):
        for a, b in ((face[0], face[1]), (face[1], face[2]), (face[2], face[0])):
            by_edge[(min(a, b), max(a, b))].append(k)
    neighbours = collections.defaultdict(set)
    for group in by_edge.values():
        for k in group:
            neighbours[k].update(group)
    label, regions = -np.ones(len(faces), int), 0
    for start in range(len(faces)):
        if removed[start] or label[start] >= 0:
            continue
        queue = collections.deque([start])
        label[start] = regions
        while queue:
            k = queue.popleft()
            for m in neighbours[k]:
                if not removed[m] and label[m] < 0:
                    label[m] = regions
                    queue.append(m)
        regions += 1
    return label


@pytest.mark.parametrize("name", sorted(MESHES))
def test_regions_are_the_flood_fill_without_the_cut_faces_and_their_areas_add_up(name):
    vertices, faces = MESHES[name]()
    tri = vertices[faces]
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    for curve in tt.intersection_curves(vertices, faces, exact_pairs(vertices, faces))[:4]:
        regions = tt.curve_regions(vertices, faces, curve)
        cut = np.zeros(len(faces), bool)
        cut[curve.pairs.ravel()] = True
        expected = flood_fill(faces, cut)
        assert ((regions.labels < 0) == cut).all()
        # the same partition: a one-to-one map between the two labelings
        assert len(set(zip(regions.labels[~cut], expected[~cut], strict=True))) == expected.max() + 1
        assert len(regions.areas) == expected.max() + 1
        np.testing.assert_allclose(regions.areas.sum() + area[cut].sum(), area.sum(), rtol=1e-12)
        for band in regions.bands:
            assert len(band) >= 1 and band.max() < len(regions.areas)


def test_known_topology_loops_boundary_curves_and_non_separating_loops():
    v, f = scenes.two_spheres(8)
    (curve,) = tt.intersection_curves(v, f, exact_pairs(v, f))
    assert curve.kind == "closed" and not curve.through_vertex
    regions = tt.curve_regions(v, f, curve)
    assert [len(band) for band in regions.bands] == [2, 2]  # a cap and the rest, on each sphere

    v, f = three_spheres()
    curves = tt.intersection_curves(v, f, exact_pairs(v, f))
    assert [c.kind for c in curves] == ["closed", "closed"]
    per_sphere = len(f) // 3
    for curve in curves:  # each loop joins two neighbouring spheres, never the outer two
        spheres = set((curve.pairs // per_sphere).ravel().tolist())
        assert spheres in ({0, 1}, {1, 2})

    v, f = scenes.folded_sheet(16)
    assert [c.kind for c in tt.intersection_curves(v, f, exact_pairs(v, f))] == ["boundary"]

    for hole in (0.0, 0.8):  # the double circle: one loop, and on each band one region on both sides
        for n in (8, 12):
            v, f = scenes.klein_bottle(n, hole=hole)
            (curve,) = tt.intersection_curves(v, f, exact_pairs(v, f))
            assert curve.kind == "closed"
            assert [len(band) for band in tt.curve_regions(v, f, curve).bands] == [1, 1]


def test_a_clean_mesh_has_no_curves_and_bad_pairs_are_named():
    v, f = scenes.sphere(6)
    assert tt.intersection_curves(v, f, np.zeros((0, 2), int)) == []
    with pytest.raises(ValueError, match="pairs must be"):
        tt.intersection_curves(v, f, np.array([[0, len(f)]]))
    with pytest.raises(ValueError, match="pairs must be"):
        tt.intersection_curves(v, f, np.array([0, 1, 2]))


def test_klein_bottles_have_the_topology_they_claim():
    for hole, euler in ((0.0, 0), (0.8, -1)):
        v, f = scenes.klein_bottle(10, hole=hole)
        edges = np.unique(np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1), axis=0)
        assert len(v) - len(edges) + len(f) == euler
        assert len(np.unique(v.round(9), axis=0)) == len(v)  # no two vertices coincide

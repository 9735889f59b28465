"""Layer 3: detection against libigl, the mesh energy's derivatives, the matrix-free Hessian, input checks."""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tritri_jax as tt
from tritri_jax._mesh_energy import candidates_for, pair_mask

from .meshes import libigl_pairs, load_obj_triangulated

ISIR_COUNTS = {
    "cinquefoil_knot": 450,
    "mobius_strip": 116,
    "figure_of_eight_knot": 570,
    "trefoil_knot": 404,
    "pretzel": 580,
    "three_twist_knot": 637,
}


@pytest.mark.parametrize("name", sorted(ISIR_COUNTS))
def test_find_intersections_equals_libigl_on_isir_meshes(benchmark_dir, name):
    vertices, faces = load_obj_triangulated(benchmark_dir / f"{name}.obj")
    ours = tt.find_intersections(vertices, faces)
    np.testing.assert_array_equal(ours, libigl_pairs(vertices, faces))
    assert len(ours) == ISIR_COUNTS[name]


@pytest.mark.parametrize(
    "name,n",
    [
        ("two_spheres", 8),
        ("two_spheres", 14),
        ("folded_sheet", 10),
        ("twisted_torus", 10),
        ("crumpled_sheet", 14),
        ("sphere", 10),
    ],
)
def test_find_intersections_equals_libigl_on_scenes(name, n):
    vertices, faces = tt.scenes.SCENES[name](n) if name != "sphere" else tt.scenes.sphere(n)
    ours = tt.find_intersections(vertices, faces)
    np.testing.assert_array_equal(ours, libigl_pairs(vertices, faces))
    assert (len(ours) == 0) == (name == "sphere")


def test_paper_mode_skips_vertex_adjacent_pairs():
    vertices, faces = tt.scenes.twisted_torus(10)
    all_pairs = tt.find_intersections(vertices, faces)
    paper = tt.find_intersections(vertices, faces, skip_vertex_adjacent=True)
    shares = lambda p: len(set(faces[p[0]]) & set(faces[p[1]])) > 0  # noqa: E731
    assert set(map(tuple, paper.tolist())) == {tuple(p) for p in all_pairs.tolist() if not shares(p)}


def test_folded_flat_shared_edge_pair_is_reported():
    vertices = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0.5, 0.8, 0]])
    faces = np.array([[0, 1, 2], [1, 0, 3]])  # the second folded onto the first
    np.testing.assert_array_equal(tt.find_intersections(vertices, faces), [[0, 1]])
    flat = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0.6, -0.8, 0]])
    assert len(tt.find_intersections(flat, faces)) == 0


# Two pairs from a deep fold (``scenes.stress_case("fold", 3000, 4)``): a face pair sharing a vertex
# and one sharing an edge, each folded shut to an opening of about 1e-12 radians. libigl's
# ``find_self_intersections`` reports both as intersecting; exact arithmetic says they touch only
# where they share.
_NEARLY_SHUT = [
    (
        [
            [-0.14865362151324354, -0.2598076211353315, 0.17469247826928339],
            [-0.09405211209976008, -0.285316954888546, 0.19205280456666],
            [-0.14074101647910445, -0.2598076211353315, 0.16228413754932625],
            [-0.1019684507661104, -0.285316954888546, 0.20446700027121448],
            [-0.11500444462860294, -0.285316954888546, 0.2113112341135368],
        ],
        [[0, 1, 3], [2, 3, 4]],
    ),
    (
        [
            [-0.09405211209976003, 0.2853169548885461, 0.19205280456666],
            [-0.14865362151324335, 0.2598076211353316, 0.17469247826928344],
            [-0.10196845076611036, 0.2853169548885461, 0.2044670002712145],
            [-0.1407410164791043, 0.2598076211353316, 0.16228413754932638],
        ],
        [[0, 1, 3], [0, 3, 2]],
    ),
]


@pytest.mark.parametrize("case", range(len(_NEARLY_SHUT)))
def test_nearly_shut_folds_touch_only_where_they_share(case):
    """The proof, in rationals: the vertices of one face that the other does not have lie strictly
    on one side of the other's plane, so the face meets that plane only in the shared vertex or
    edge, and the pair has no other point in common. ``find_intersections`` agrees (no pair)."""
    vertices, faces = np.array(_NEARLY_SHUT[case][0]), np.array(_NEARLY_SHUT[case][1])
    exact = lambda i: np.array([Fraction(c) for c in vertices[i]], object)  # noqa: E731

    def strictly_one_side(one, other):
        normal = np.cross(exact(one[1]) - exact(one[0]), exact(one[2]) - exact(one[0]))
        sides = [np.dot(exact(i) - exact(one[0]), normal) for i in other if i not in one]
        return all(s > 0 for s in sides) or all(s < 0 for s in sides)

    assert strictly_one_side(*faces) or strictly_one_side(*faces[::-1])
    assert len(tt.find_intersections(vertices, faces)) == 0


@pytest.fixture(scope="module")
def spheres():
    vertices, faces = tt.scenes.two_spheres(6)
    return jnp.asarray(vertices), jnp.asarray(faces)


def test_energy_gradient_matches_finite_differences(spheres):
    vertices, faces = spheres
    energy = jax.jit(tt.intersection_energy)
    grad = jax.jit(jax.grad(tt.intersection_energy))(vertices, faces)
    assert float(energy(vertices, faces)) > 0
    rng = np.random.default_rng(0)
    for _ in range(4):
        direction = jnp.asarray(rng.normal(size=vertices.shape))
        h = 1e-6
        fd = (energy(vertices + h * direction, faces) - energy(vertices - h * direction, faces)) / (2 * h)
        np.testing.assert_allclose(float(jnp.sum(grad * direction)), float(fd), rtol=1e-5)


def test_length_measure_and_margin(spheres):
    vertices, faces = spheres
    length = float(tt.intersection_energy(vertices, faces, measure="length"))
    assert length > 0
    assert float(tt.intersection_energy(vertices, faces, margin=0.05)) > float(tt.intersection_energy(vertices, faces))
    with pytest.raises(ValueError, match="measure"):
        tt.intersection_energy(vertices, faces, measure="volume")


def test_hessian_vector_product_matches_jvp_and_is_psd(spheres):
    vertices, faces = spheres
    candidates = candidates_for(vertices, faces, None, False, None)
    mask = pair_mask(candidates)
    system = jax.jit(tt.pair_system)(vertices, faces, candidates.pairs, mask)
    np.testing.assert_allclose(
        system.gradient, jax.grad(tt.intersection_energy)(vertices, faces), rtol=1e-9, atol=1e-12
    )

    # The Gauss-Newton operator: sum over pairs of J^T K+ J, checked against per-pair dense blocks.
    u, v = tt._mesh_energy.pair_triangles(vertices, faces, candidates.pairs)
    _, _, dense = jax.vmap(tt.pair_energy_grad_hessian)(u, v)
    rng = np.random.default_rng(1)
    hvp = jax.jit(tt.hessian_vector_product)
    for _ in range(3):
        x = jnp.asarray(rng.normal(size=vertices.shape))
        local = x[system.corners].reshape(-1, 18)
        expected = jax.ops.segment_sum(
            jnp.where(mask[:, None], jnp.einsum("pij,pj->pi", dense, local), 0).reshape(-1, 3),
            system.corners.reshape(-1),
            num_segments=vertices.shape[0],
        )
        got = hvp(system, x)
        np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-10)
        assert float(jnp.sum(x * got)) >= -1e-10 * float(jnp.sum(jnp.abs(got)))


def test_energy_works_inside_a_users_jitted_loss(spheres):
    vertices, faces = spheres

    @jax.jit
    def loss(x):
        return jnp.sum((x - vertices) ** 2) + tt.intersection_energy(x, faces, capacity=4096)

    value, grad = jax.value_and_grad(loss)(vertices)
    assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))


def test_a_full_capacity_inside_a_users_jit_is_an_error_not_a_smaller_energy(spheres):
    vertices, faces = spheres
    needed = int(tt.candidate_pairs(vertices, faces, capacity=16 * len(faces)).count)  # sized once, eagerly
    energy = jax.jit(lambda x, capacity: tt.intersection_energy(x, faces, capacity=capacity), static_argnums=1)
    assert float(energy(vertices, needed)) > 0
    with pytest.raises(Exception, match="broad phase overflow: more candidate pairs than `capacity`"):
        jax.block_until_ready(energy(vertices, needed - 1))


def test_input_checks_name_the_problem():
    vertices, faces = tt.scenes.sphere(4)
    before = vertices.copy()
    cases = [
        (vertices[:, :2], faces, "shape"),
        (vertices, faces[:, :2], "shape"),
        (np.where(np.arange(len(vertices))[:, None] == 3, np.nan, vertices), faces, "NaN"),
        (vertices, np.where(faces == faces.max(), len(vertices) + 5, faces), "out of range"),
        (vertices, faces.astype(float), "integers"),
    ]
    for v, f, message in cases:
        with pytest.raises(ValueError, match=message):
            tt.find_intersections(v, f)
        with pytest.raises(ValueError, match=message):
            tt.intersection_energy(v, f)
    np.testing.assert_array_equal(vertices, before)


def test_empty_meshes_and_zero_area_faces_are_valid():
    assert tt.find_intersections(np.zeros((0, 3)), np.zeros((0, 3), int)).shape == (0, 2)
    assert float(tt.intersection_energy(np.zeros((0, 3)), np.zeros((0, 3), int))) == 0.0
    vertices = np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0], [0.5, -1, -1], [0.5, 1, 1], [0.5, 1, -1]])
    # a zero-area face through a triangle, and a face repeating a vertex (zero-area too)
    for faces in (np.array([[0, 1, 2], [3, 4, 5]]), np.array([[0, 2, 2], [3, 4, 5]])):
        assert len(tt.find_intersections(vertices, faces)) == 0
        assert float(tt.intersection_energy(vertices, faces)) == 0.0
        g = jax.grad(tt.intersection_energy)(jnp.asarray(vertices), jnp.asarray(faces))
        assert np.all(np.isfinite(np.asarray(g)))


@pytest.mark.parametrize(
    "vertices, faces",
    [
        ([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0.2, 0.2, 0], [0.2, 0.2, 1], [0.5, 0.2, 1]], [[0, 1, 2], [3, 4, 5]]),
        ([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0.2, -0.5, 0], [0.2, 1, 0], [0.2, 0.2, 1]], [[0, 1, 2], [3, 4, 5]]),
        ([[0.0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, -1], [0, 1, 1]], [[0, 1, 2], [0, 3, 4]]),
        ([[0.0, 0, 0], [2, 0, 0], [0, 2, 0], [1, 1, 0], [2, 2, 0], [3, 1, 0]], [[0, 1, 2], [3, 4, 5]]),
    ],
    ids=["vertex-on-face", "edge-in-plane-through-face", "shared-vertex-edge-on-edge", "coplanar-t-junction"],
)
def test_exact_touching_is_reported(vertices, faces):
    """Touching counts as intersecting: a vertex resting exactly on a face, an edge lying in a face's
    plane, a face whose edge through the other's plane ends on the other's edge, a coplanar T-junction
    (computed distances or overlaps of exactly zero, which the float kernels hand to exact arithmetic)."""
    vertices, faces = np.array(vertices), np.array(faces)
    np.testing.assert_array_equal(tt.find_intersections(vertices, faces), libigl_pairs(vertices, faces))
    assert len(libigl_pairs(vertices, faces)) == 1


def test_the_halves_of_a_planar_quad_are_settled_in_floats():
    """Two faces across a shared edge with their third vertices on either side of it cannot be folded
    onto each other: the float kernel says so (no exact settling), coplanar to rounding or not; two
    on one side stay for exact arithmetic (or are called crossing)."""
    from tritri_jax._kernels import classify

    rng = np.random.default_rng(0)
    for _ in range(20):
        rotation, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        quad = np.array([[0.0, 0, 0], [1, 0, 0], [1.3, 0.9, 0], [-0.2, 1.1, 0]]) @ rotation.T + rng.normal(size=3)
        u, v = quad[[0, 1, 2]], quad[[0, 2, 3]]
        crossing, ambiguous = classify(jnp.asarray(u), jnp.asarray(v))
        assert not bool(crossing) and not bool(ambiguous)
        folded = quad[[0, 2, 1]] * (1 - 1e-3) + 1e-3 * quad[[0, 2, 1]].mean(0)  # inside u, sharing (0, 2)
        folded[:2] = quad[[0, 2]]
        crossing, ambiguous = classify(jnp.asarray(u), jnp.asarray(folded))
        assert bool(crossing) or bool(ambiguous)

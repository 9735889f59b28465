"""Hypothesis strategies and a numpy generator of random and adversarial triangle pairs."""

import numpy as np
from hypothesis import strategies as st

unit = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False, width=64)
grid = st.integers(-3, 3).map(float)


def triangle(coordinate=unit):
    return st.lists(st.lists(coordinate, min_size=3, max_size=3), min_size=3, max_size=3).map(np.array)


@st.composite
def random_pair(draw):
    return draw(triangle()), draw(triangle())


@st.composite
def grid_pair(draw):
    """Small integer coordinates: coplanar, touching, shared and degenerate cases abound."""
    return draw(triangle(grid)), draw(triangle(grid))


@st.composite
def shared_vertex_pair(draw):
    u, v = draw(triangle()), draw(triangle())
    i, j = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    v[j] = u[i]
    return u, v


@st.composite
def near_coplanar_pair(draw):
    """v lies in u's plane up to a tiny offset along the normal."""
    u = draw(triangle())
    weights = draw(st.lists(st.lists(st.floats(-1, 2), min_size=3, max_size=3), min_size=3, max_size=3))
    weights = np.array(weights)
    v = weights @ u / np.where(np.abs(weights.sum(1, keepdims=True)) > 1e-3, weights.sum(1, keepdims=True), 1)
    normal = np.cross(u[1] - u[0], u[2] - u[0])
    exponent = draw(st.integers(-300, -1))
    offsets = np.array(draw(st.lists(st.floats(-1, 1), min_size=3, max_size=3))) * 10.0**exponent
    return u, v + offsets[:, None] * normal


@st.composite
def sliver_pair(draw):
    """u has one vertex almost on the line through the other two."""
    u, v = draw(triangle()), draw(triangle())
    t = draw(st.floats(-0.5, 1.5))
    exponent = draw(st.integers(-17, -2))
    direction = np.array(draw(st.lists(unit, min_size=3, max_size=3)))
    u[2] = u[0] + t * (u[1] - u[0]) + 10.0**exponent * direction
    return u, v


@st.composite
def transformed(draw, pairs):
    """Scale by 10^k and offset far from the origin."""
    u, v = draw(pairs)
    scale = 10.0 ** draw(st.integers(-6, 6))
    offset = np.array(draw(st.lists(st.floats(-1, 1), min_size=3, max_size=3))) * 10.0 ** draw(st.integers(0, 6))
    return u * scale + offset, v * scale + offset


any_pair = st.one_of(
    random_pair(), grid_pair(), shared_vertex_pair(), near_coplanar_pair(), sliver_pair(), transformed(random_pair())
)


def adversarial_pairs(n, seed=0):
    """``(n, 2, 3, 3)`` float64 pairs of every awkward kind, for NaN sweeps (numpy, fast)."""
    rng = np.random.default_rng(seed)
    kinds = 12
    m = -(-n // kinds)
    u = rng.uniform(-1, 1, (kinds, m, 3, 3))
    v = rng.uniform(-1, 1, (kinds, m, 3, 3))
    normal = np.cross(u[..., 1, :] - u[..., 0, :], u[..., 2, :] - u[..., 0, :])
    # 1 coplanar: v made of affine combinations of u's vertices
    w = rng.uniform(-1, 2, (m, 3, 3))
    v[1] = np.einsum("mij,mjk->mik", w / w.sum(-1, keepdims=True), u[1])
    # 2 near-coplanar with offsets from 1e-300 to 1e-3
    w = rng.uniform(-1, 2, (m, 3, 3))
    offset = rng.uniform(-1, 1, (m, 3)) * 10.0 ** rng.integers(-300, -3, (m, 1))
    v[2] = np.einsum("mij,mjk->mik", w / w.sum(-1, keepdims=True), u[2]) + offset[..., None] * normal[2][:, None, :]
    # 3 shared vertex, 4 shared edge, 5 identical
    v[3, :, 0] = u[3, :, 0]
    v[4, :, :2] = u[4, :, :2]
    v[5] = u[5]
    # 6 degenerate: collinear u, point v
    u[6, :, 2] = u[6, :, 0] + rng.uniform(-1, 2, (m, 1)) * (u[6, :, 1] - u[6, :, 0])
    v[6, : m // 2] = v[6, : m // 2, :1]
    # 7 slivers
    u[7, :, 2] = (
        u[7, :, 0] + 0.3 * (u[7, :, 1] - u[7, :, 0]) + 10.0 ** rng.integers(-17, -3, (m, 1)) * rng.normal(size=(m, 3))
    )
    # 8 integer grid (exact on-plane vertices, touching)
    u[8] = rng.integers(-2, 3, (m, 3, 3))
    v[8] = rng.integers(-2, 3, (m, 3, 3))
    # 9 huge, 10 tiny, 11 far from the origin
    u[9] *= 1e6
    v[9] *= 1e6
    u[10] *= 1e-6
    v[10] *= 1e-6
    far = rng.uniform(-1, 1, (m, 1, 3)) * 1e6
    u[11] += far
    v[11] += far
    pairs = np.stack([u, v], axis=2).reshape(kinds * m, 2, 3, 3)
    return pairs[:n]

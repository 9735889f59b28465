"""Tangles whose intersection curves local descent may not shrink: the global-untangling cases.

Each generator takes a resolution ``n`` and returns ``(vertices, faces)``; ``scenes.tangle(name, n)``
is the public entry point. The cloth units follow the classes of Wicke et al. and Untangling26
(two layers, one pushed through the other so the contour is a closed loop, ends on a boundary,
runs across, forms nested loops or a figure eight), generated here, not copied.
"""

import numpy as np

from .scenes import join_meshes as _join


def _sheet(n, size=1.0, height=0.0):
    """A square ``[-size, size]^2`` grid at ``z = height`` with ``n x n`` vertices."""
    from .scenes import _grid_faces

    s, t = np.meshgrid(np.linspace(-size, size, n), np.linspace(-size, size, n), indexing="ij")
    return np.stack([s, t, np.full_like(s, height)], -1).reshape(-1, 3), _grid_faces(n, n)


def _bump(points, centre, width):
    return np.exp(-np.sum((points[:, :2] - np.asarray(centre)) ** 2, 1) / width**2)


def _layers(n, dip):
    """A flat lower sheet at ``z = 0`` and an upper one at ``z = 0.15`` lowered by ``dip(points)``
    (the upper sheet's vertices are offset by a third of a cell so no vertex lies on the other sheet)."""
    lower = _sheet(n)
    upper_v, upper_f = _sheet(n, height=0.15)
    upper_v[:, :2] += 0.7 / (n - 1)
    upper_v[:, 2] -= dip(upper_v)
    return _join(lower, (upper_v, upper_f))


def pinch(n):
    """The upper layer pinched down through the lower one: one closed loop (``Closed``)."""
    return _layers(n, lambda p: 0.4 * _bump(p, (0.1, 0.05), 0.35))


def nested_loops(n):
    """The upper layer dips through the lower one in a ring and comes back up in the middle: two
    nested loops bounding an annulus."""
    return _layers(n, lambda p: 0.45 * _bump(p, (0.0, 0.0), 0.55) - 0.3 * _bump(p, (0.02, 0.01), 0.2))


def figure_eight(n):
    """Two dips that merge into one peanut-shaped loop pinched in the middle (``Eight``)."""
    return _layers(n, lambda p: 0.3 * _bump(p, (-0.3, 0.0), 0.3) + 0.3 * _bump(p, (0.32, 0.03), 0.3))


def boundary_cut(n):
    """The upper layer dips through the lower one across the lower one's edge: a curve that ends on
    the boundary twice (``BB``)."""
    return _layers(n, lambda p: 0.4 * _bump(p, (0.95, 0.1), 0.4))


def cross(n):
    """The upper layer tilted through the lower one along a line from edge to edge (``Cross``)."""
    return _layers(n, lambda p: 0.3 * (p[:, 0] + 0.2))


def disc_through_annulus(n):
    """A dome pushed through a flat annulus (inner radius 0.5, outer 1.5): one loop around the hole,
    separating on both."""
    from .scenes import _grid_faces

    radius, angle = np.meshgrid(np.linspace(0.5, 1.5, n), 2 * np.pi * np.arange(4 * n) / (4 * n), indexing="ij")
    annulus = np.stack([radius * np.cos(angle), radius * np.sin(angle), np.zeros_like(radius)], -1)
    annulus_f = _grid_faces(n, 4 * n, wrap_cols=True)
    disc_v, disc_f = _sheet(2 * n, size=0.75)
    r_sq = np.sum(disc_v[:, :2] ** 2, 1)
    disc_v[:, :2] += 0.01
    disc_v[:, 2] = 0.3 - 0.6 * r_sq
    return _join((annulus.reshape(-1, 3), annulus_f), (disc_v, disc_f))


def sheet_through_ring(n):
    """A flat sheet through the hole of an upright ring (a torus of radii 0.7 and 0.2): the sheet cuts
    the tube in two small loops that do not separate the tube; the ring has to slide off the sheet."""
    from .scenes import torus

    ring_v, ring_f = torus(n, major=0.7, minor=0.2)
    ring_v = ring_v[:, [0, 2, 1]] + np.array([0.03, 0.0, 0.02])  # the ring stands upright in the xz-plane
    sheet_v, sheet_f = _sheet(2 * n, size=1.2)
    sheet_v = sheet_v[:, [2, 0, 1]]  # the plane x = 0: it cuts the tube at z = +-0.7
    return _join((ring_v, ring_f), (sheet_v, sheet_f))


def nested_spheres(n):
    """A sphere inside another whose bump pokes out through the outer one: one loop."""
    from .scenes import sphere

    inner_v, inner_f = sphere(n, radius=0.7)
    outer_v, outer_f = sphere(n, radius=1.0, centre=(0.01, -0.02, 0.015))
    inner_v = inner_v * (1 + 0.8 * _bump(inner_v[:, [0, 2]] / 0.7, (1.0, 0.0), 0.45))[:, None]
    return _join((outer_v, outer_f), (inner_v, inner_f))


def tube_through_wall(n):
    """A capsule bent back by 3 rad on an arc tighter than its radius: its end passes through its own
    wall."""
    from .scenes import bend, capsule

    v, f = capsule(n, radius=0.3, length=3.0)
    return bend(v, angle=3.0, radius=0.1, start=-0.3), f


def klein_bottle(n):
    """The figure-8 Klein bottle with a disc removed (``scenes.klein_bottle(n, hole=0.8)``)."""
    from .scenes import klein_bottle as klein

    return klein(n, hole=0.8)


TANGLES = {
    "pinch": pinch,
    "nested_loops": nested_loops,
    "figure_eight": figure_eight,
    "boundary_cut": boundary_cut,
    "cross": cross,
    "disc_through_annulus": disc_through_annulus,
    "sheet_through_ring": sheet_through_ring,
    "nested_spheres": nested_spheres,
    "tube_through_wall": tube_through_wall,
    "punctured_klein_bottle": klein_bottle,
}

"""The shapes of ``scenes.stress_case``: each family's base surface at a face count, and one draw of
its shape parameters."""

import numpy as np

from .scenes import (
    bend,
    capsule,
    crumpled_sheet,
    folded_sheet,
    graded_torus,
    knot_tube,
    overlapping_copies,
    poke,
    scatter_copies,
    sphere,
    torus,
    warp,
)


def resolution(faces_per_n_sq: float, target_faces: int) -> int:
    """The grid resolution ``n`` of a generator with about ``faces_per_n_sq * n**2`` faces."""
    return max(4, int(round(np.sqrt(target_faces / faces_per_n_sq))))


def draw(family, target_faces, seed, shape_seed, rng):
    """One draw of ``stress_case``: ``seed`` picks the base, ``shape_seed`` and ``rng`` the shape."""
    if family == "overlap":
        kind = seed % 3
        if kind == 0:
            base = sphere(resolution(4, target_faces / 2))
        elif kind == 1:
            base = torus(resolution(6, target_faces / 2))
        else:
            base = knot_tube(resolution(16, target_faces / 2))
        return overlapping_copies(*base, depth=rng.uniform(0.05, 0.5), seed=shape_seed)
    if family == "fold":
        radius = 0.3
        v, f = capsule(resolution(14, target_faces), radius=radius, length=3.0)
        angle, tight = rng.uniform(1.5, 3.0), rng.uniform(0.2, 0.6) * radius
        return bend(v, angle=angle, radius=tight, start=rng.uniform(-0.5, 0.2)), f
    if family == "uneven":
        base = graded_torus(resolution(12, target_faces), grading=1000.0)
        return overlapping_copies(*base, depth=rng.uniform(0.05, 0.5), seed=shape_seed)
    if family == "poke":
        v, f = torus(resolution(6, target_faces), minor=rng.uniform(0.15, 0.3))
        return poke(v, f, depth=rng.uniform(1.4, 2.0), width=rng.uniform(0.3, 0.6), seed=shape_seed), f
    if family == "sheet":
        if seed % 2 == 0:
            return crumpled_sheet(resolution(2, target_faces), amplitude=rng.uniform(0.25, 0.45), seed=shape_seed)
        n = resolution(4, target_faces)
        return folded_sheet(n, wrap=rng.uniform(1.1, 1.4))
    if family == "components":
        count = 3 + seed % 4
        per = target_faces / count
        base = sphere(resolution(4, per)) if seed % 2 == 0 else capsule(resolution(7.8, per), radius=0.4)
        return scatter_copies(*base, count=count, spread=1.5, seed=shape_seed)
    if family == "warp":
        kind = seed % 4
        if kind == 0:
            v, f = sphere(resolution(4, target_faces))
        elif kind == 1:
            v, f = torus(resolution(6, target_faces), minor=rng.uniform(0.15, 0.4))
        elif kind == 2:
            v, f = capsule(resolution(14, target_faces), radius=0.3, length=3.0)
        else:
            v, f = crumpled_sheet(resolution(2, target_faces), amplitude=0.0)
        strength, twist, squash = rng.uniform(0.3, 0.8), rng.uniform(0, 3), rng.uniform(0, 1.6)
        return warp(v, strength=strength, twist=twist, squash=squash, seed=shape_seed), f

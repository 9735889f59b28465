r"""Layer 4: local fairing, phase 1's escalation when its descent stalls.

Descent on the intersection curve's length stalls where the crossing sits in a crease: a deep fold's
inner wall turned over on itself, a crumpled sheet's pleats. Every short move there lengthens some
crossing as it shortens another. Fairing removes the crease itself. Each fairing step takes the
vertices within a radius $\rho$ of a crossing face's vertices (the region $R$, found by a k-d tree;
the rest of the mesh stays fixed) and solves

$$ (I + \lambda L_{RR})\, y_R = x_R - \lambda L_{RB}\, x_B, \qquad \lambda = (\rho / h)^2, $$

one implicit smoothing step of the region with its rim held ($L$ the uniform graph Laplacian, so
$\lambda$ counts squared edge rings and the region is smoothed over its own width, at any
resolution). A turned-over fold flattens and stops crossing; phase 2 then restores the shape under
its barrier. $\rho$ starts at twice phase 1's length unit and doubles after a step that did not
lower the exact crossing count. It runs on the host (SciPy's sparse LU), once per stalled attempt.

Fairing never shrinks the mesh away. It stops before a region that takes a whole connected part
(no rim held: the step shrinks the part toward a point or a line) and before a step that leaves an
edge shorter than ``SHRINK_FLOOR`` (2 %) of its input length. Measured on warped capsules and spheres
(the ``warp`` stress family): without these, the doubling radius reached zero crossings with the
worst edge 0.0001-0.0004 of its length, and phase 2 did not finish its first Newton run from there
in 12 minutes (6 GB resident: every face within the barrier's reach of many); a rim of a few
vertices did not prevent it in float32. The crumpled sheets and the fold that fairing finishes in
the stress table leave their worst edge at 0.04-0.12 of its length, which phase 2 restores to
0.30-0.49. A stopped fairing hands the stall on, with its crossings, to the global moves and the
next attempt.
"""

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import splu
from scipy.spatial import cKDTree

from ._detect import find_intersections
from ._elastic import laplacian_matrix

SHRINK_FLOOR = 0.02  # the shortest edge a fairing step may leave, relative to its input length


def fair_crossings(x, faces, edges, h: float, unit: float, remaining, max_steps: int, rest=None):
    """Fairing steps from ``x`` (``(V, 3)``, unit bounding-box diagonal) until the exact detection
    finds no crossing pair, ``max_steps`` steps, or a radius past the whole mesh.

    ``remaining``: the exact crossing pairs at ``x``; ``edges``: the mesh's unique edges; ``h``
    its mean edge length and ``unit`` phase 1's length unit; ``rest``: the input positions the edge
    lengths are measured against (``x`` when ``None``). Returns ``(x, remaining, steps)``:
    the state with the fewest crossings seen (``x`` itself when no step lowered the count)."""
    x, faces = np.asarray(x), np.asarray(faces)
    dtype = x.dtype
    rest = x if rest is None else np.asarray(rest)
    floor = SHRINK_FLOOR * np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1)
    laplacian = laplacian_matrix(edges, len(x)).tocsr()
    _, part = connected_components(laplacian, directed=False)
    best, best_remaining = x, remaining
    radius, y, steps = 2 * unit, x, 0
    while steps < max_steps and len(remaining) and radius <= 2.0:  # 2: past the unit diagonal
        seeds = np.unique(faces[np.asarray(remaining).reshape(-1)].reshape(-1))
        distance, _ = cKDTree(y[seeds]).query(y, distance_upper_bound=radius)
        region = np.isfinite(distance)
        if _takes_a_whole_part(region, part):
            break
        lam = (radius / h) ** 2
        rows = laplacian[region]
        system = (sp.identity(int(region.sum())) + lam * rows[:, region]).tocsc()
        rhs = y[region] - lam * (rows[:, ~region] @ y[~region])
        faired = y.astype(np.float64)  # solved in float64, checked (and returned) in the run's precision
        faired[region] = splu(system).solve(rhs)
        faired = faired.astype(dtype)
        before, after = (np.linalg.norm(p[edges[:, 0]] - p[edges[:, 1]], axis=1) for p in (y, faired))
        if np.any((after < floor) & (after < before)):
            break  # an edge shrank past the floor, and a larger region would shrink more
        y = faired
        steps += 1
        remaining = find_intersections(y, faces)
        if len(remaining) < len(best_remaining):
            best, best_remaining = y, remaining
        else:
            radius *= 2
    return best, best_remaining, steps


def _takes_a_whole_part(region, part) -> bool:
    """Whether ``region`` (a vertex mask) holds every vertex of a connected part it reaches (``part``:
    each vertex's part), so that no rim of that part is held. Lone vertices (in no edge) do not count."""
    sizes = np.bincount(part)
    reached = np.unique(part[region & (sizes[part] > 1)])
    held = np.unique(part[~region])
    return bool(np.setdiff1d(reached, held).size)

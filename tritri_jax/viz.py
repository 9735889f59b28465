"""Pictures (matplotlib; headless too, it falls back to Agg without a display): a mesh with its
crossing faces coloured by intersection curve, before/after, and a convergence plot. The view looks along the mesh's
thinnest principal axis, so flat and elongated meshes are seen face-on rather than edge-on.
"""

import numpy as np

from ._contours import intersection_curves


def _axes_frame(vertices):
    centred = vertices - vertices.mean(0)
    _, _, vt = np.linalg.svd(centred[:: max(1, len(centred) // 5000)], full_matrices=False)
    return vt  # rows: principal axes, the last is the thinnest


# one colour per intersection curve, the longest in red
_CURVE_COLOURS = np.array(
    [[0.85, 0.1, 0.1], [0.95, 0.55, 0.05], [0.55, 0.15, 0.75], [0.1, 0.6, 0.2], [0.9, 0.2, 0.6], [0.1, 0.5, 0.8]]
)


def _draw(ax, vertices, faces, curve_faces, frame, title):
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    local = (vertices - vertices.mean(0)) @ frame.T
    local = local[:, [0, 1, 2]]
    tris = local[faces]
    normal = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
    norm = np.linalg.norm(normal, axis=1, keepdims=True)
    shade = 0.35 + 0.6 * np.abs((normal / np.where(norm > 0, norm, 1)) @ np.array([0.3, 0.4, 0.87]))
    colours = np.stack([shade * 0.75, shade * 0.8, shade * 0.9, np.ones_like(shade)], axis=1)
    for k, crossing in enumerate(curve_faces):
        colours[crossing, :3] = _CURVE_COLOURS[k % len(_CURVE_COLOURS)]
    ax.add_collection3d(Poly3DCollection(tris, facecolors=colours, edgecolors=(0, 0, 0, 0.08), linewidths=0.2))
    lo, hi = local.min(0), local.max(0)
    centre, half = 0.5 * (lo + hi), 0.5 * (hi - lo).max()
    for setter, c in zip((ax.set_xlim, ax.set_ylim, ax.set_zlim), centre, strict=True):
        setter(c - half, c + half)
    ax.view_init(elev=55, azim=-60)
    ax.set_box_aspect(None, zoom=1.3)  # the default leaves a wide empty margin around a 3-D plot
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)


def _finish(fig, path):
    import matplotlib.pyplot as plt

    fig.tight_layout()
    if path is None:
        return fig
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return None


def before_after(
    path, vertices_before, vertices_after, faces, pairs_before, pairs_after, *, labels=("before", "after")
):
    """A side-by-side figure: both meshes with the faces of crossing pairs coloured by intersection
    curve (``intersection_curves``; the longest in red), titled ``labels``.

    Saved to ``path`` (PNG, PDF, ...), or returned as a matplotlib figure when ``path`` is ``None``.

    ```python
    >>> import os, tempfile, tritri_jax as tt
    >>> from tritri_jax import viz
    >>> vertices, faces = tt.scenes.two_spheres(6)
    >>> pairs = tt.find_intersections(vertices, faces)
    >>> path = os.path.join(tempfile.mkdtemp(), "spheres.png")
    >>> viz.before_after(path, vertices, vertices, faces, pairs, pairs[:0], labels=("input", "no pair marked"))
    >>> os.path.getsize(path) > 0
    True

    ```
    """
    import matplotlib.pyplot as plt

    faces = np.asarray(faces)
    frame = _axes_frame(np.asarray(vertices_before))
    fig = plt.figure(figsize=(10, 5), dpi=130)
    for k, (v, pairs, label) in enumerate(
        ((vertices_before, pairs_before, labels[0]), (vertices_after, pairs_after, labels[1]))
    ):
        ax = fig.add_subplot(1, 2, k + 1, projection="3d")
        v = np.asarray(v, np.float64)
        curves = intersection_curves(v, faces, np.asarray(pairs, int).reshape(-1, 2))
        title = f"{label}: {len(pairs)} crossing pairs" + (f" on {len(curves)} curves" if len(curves) > 1 else "")
        _draw(ax, v, faces, [np.unique(curve.pairs) for curve in curves], frame, title)
    return _finish(fig, path)


def convergence(path, history, title="untangling", length=None):
    """The crossing-pair count per phase-1 step (log scale), and with ``length`` the intersection
    curve's length per step on a second axis. Saved to ``path``, or returned when ``path`` is ``None``.

    ```python
    >>> from tritri_jax import viz
    >>> figure = viz.convergence(None, [70, 41, 12, 3, 0], title="two spheres", length=[2.1, 1.4, 0.5, 0.1, 0])
    >>> len(figure.axes)  # the count and, on a second axis, the curve's length
    2

    ```
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    history = np.asarray(history)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=130)
    ax.semilogy(np.arange(len(history)), np.maximum(history, 0.8), marker="o", markersize=3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("phase-1 step")
    ax.set_ylabel("crossing pairs (float predicate)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if length is not None and len(length):
        other = ax.twinx()
        other.semilogy(np.arange(len(length)), np.maximum(np.asarray(length), 1e-12), color="C1", linewidth=1)
        other.set_ylabel("intersection-curve length", color="C1")
    return _finish(fig, path)

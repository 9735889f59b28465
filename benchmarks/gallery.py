"""The pictures in the README and the docs' home page, drawn from a run and from the benchmark tables.

Run: python benchmarks/gallery.py [--mesh PATH] [--out docs/images]
- ``knot_before_after.png``: a knot (the ISIR trefoil by default) before and after ``untangle``, the
  faces of crossing pairs (exact detection) in red;
- ``knot_convergence.png``: its crossing-pair count and intersection-curve length per phase-1 step;
- ``detection_vs_libigl.png``: ``find_intersections`` against libigl over mesh sizes, read from the
  detection table that ``benchmarks/detect.py --markdown docs/benchmarks.md`` wrote.
"""

import argparse
import os
import re

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402
from tritri_jax import viz  # noqa: E402
from tritri_jax.io import read_mesh  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

TREFOIL = os.path.join(ROOT, "..", "shared", "benchmarks", "isir-misc", "trefoil_knot.obj")


def detection_rows(page):
    """(mesh, triangles, tritri_jax s, libigl s) of the detection table's rows in ``page``."""
    text = open(page).read()
    section = re.search(r"<!-- detect:begin -->(.*?)<!-- detect:end -->", text, re.S)
    if section is None:
        raise SystemExit(f"{page} has no detection table: run benchmarks/detect.py --markdown {page}")
    rows, columns = [], None
    for line in section.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if columns is None and "libigl" in cells and "triangles" in cells:
            columns = {name: k for k, name in enumerate(cells)}
        elif columns and len(cells) == len(columns) and cells[columns["triangles"]].replace(",", "").isdigit():
            size = int(cells[columns["triangles"]].replace(",", ""))
            ours, theirs = float(cells[columns["tritri_jax"]]), float(cells[columns["libigl"]].split()[0])
            rows.append((cells[0], size, ours, theirs))
    return rows


def detection_plot(path, rows):
    """Seconds against triangles: the crumpled sheets of growing size as lines, the ISIR meshes as dots."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8), dpi=130)
    series = sorted((r for r in rows if r[0].startswith("crumpled_sheet")), key=lambda r: r[1])
    meshes = [r for r in rows if not r[0].startswith("crumpled_sheet")]
    for k, (label, marker) in enumerate((("tritri_jax find_intersections", "o"), ("libigl (exact)", "s"))):
        ax.loglog([r[1] for r in series], [r[2 + k] for r in series], marker + "-", color=f"C{k}", label=label)
        ax.loglog([r[1] for r in meshes], [r[2 + k] for r in meshes], marker, color=f"C{k}", alpha=0.5)
    ax.set_xlabel("triangles (lines: crumpled sheets; dots: the ISIR meshes)")
    ax.set_ylabel("seconds after compile, 2 CPU cores")
    ax.set_title("Exact self-intersection detection")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", default=TREFOIL, help="the mesh to untangle (default: the ISIR trefoil)")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images"))
    parser.add_argument("--table", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    vertices, faces = read_mesh(args.mesh)
    name = os.path.splitext(os.path.basename(args.mesh))[0].replace("_", " ")
    before = tt.find_intersections(vertices, faces)
    result = tt.untangle(vertices, faces)
    after = tt.find_intersections(result.vertices, faces)
    viz.before_after(
        os.path.join(args.out, "knot_before_after.png"),
        vertices,
        result.vertices,
        faces,
        before,
        after,
        labels=(f"{name}, input", "untangled"),
    )
    viz.convergence(
        os.path.join(args.out, "knot_convergence.png"),
        np.asarray(result.history),
        title=f"{name}: phase 1, then {int(result.relax_iterations)} relax Newton steps",
        length=np.asarray(result.history_length),
    )
    detection_plot(os.path.join(args.out, "detection_vs_libigl.png"), detection_rows(args.table))
    print(f"{name}: {len(before)} -> {len(after)} crossing pairs; pictures in {args.out}")


if __name__ == "__main__":
    main()

"""The global-untangling cases: ``untangle`` on tangles whose curves local descent may not shrink.

Every case is ``tritri_jax.scenes.tangle(name, n)`` (cloth units, a dome through an annulus, a sheet
through a ring, nested spheres, a tube through its own wall, the punctured Klein bottle) at each
resolution ``n``, and the closed Klein bottle (``scenes.klein_bottle(n)``), which no method can
untangle: it must end with ``converged=False`` and no more crossings than it started with. The
curves column is ``tritri_jax.intersection_curves`` on the input (c: closed, b: boundary, o: open;
a ``*`` marks curves with a band that does not separate its surface). Success: libigl's exact
predicates find no crossing pair in the output, and the worst edge ratio is at least 0.3. The
baseline of the same run is libigl's detection on the input: ``ratio`` is untangle's time over it
(compiling left out).

    python benchmarks/tangles.py --sizes 12 24 --markdown docs/benchmarks.md
"""

import argparse
import ast
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_enable_x64", True)

from _report import Output, exact_count, timed_untangle  # noqa: E402

import tritri_jax as tt  # noqa: E402
from tritri_jax import scenes  # noqa: E402

SHAPE_BAR = 0.3


def curve_summary(vertices, faces):
    """Curves of the input by kind, ``*`` on those with a band that does not separate its surface."""
    adjacency = None
    marks = []
    for curve in tt.intersection_curves(vertices, faces):
        from tritri_jax._contours import face_adjacency

        adjacency = face_adjacency(faces) if adjacency is None else adjacency
        regions = tt.curve_regions(vertices, faces, curve, adjacency)
        leaks = any(len(band) < 2 for band in regions.bands)
        marks.append(curve.kind[0] + ("*" if leaks else ""))
    counts = {}
    for mark in marks:
        counts[mark] = counts.get(mark, 0) + 1
    return " ".join(f"{count}{mark}" for mark, count in sorted(counts.items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[12, 24])
    parser.add_argument("--names", nargs="+", default=[*scenes.TANGLES, "klein_bottle"])
    parser.add_argument("--set", nargs="*", default=[], metavar="OPTION=VALUE", help="untangle options to change")
    parser.add_argument("--markdown", help="write the table into this page (section tangles)")
    args = parser.parse_args()
    changed = {key: ast.literal_eval(value) for key, value in (o.split("=", 1) for o in args.set)}
    out = Output()
    out("Float64, " + (", ".join(f"`{k}={v}`" for k, v in changed.items()) or "default options") + ".")
    out()
    out(
        "| case | n | faces | pairs before | curves | pairs after | converged | steps | fairing steps "
        "| global moves | s | ratio | worst edge ratio | success |"
    )
    out("|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    succeeded = total = 0
    for name in args.names:
        for n in args.sizes:
            if name == "klein_bottle":
                vertices, faces = scenes.klein_bottle(n)
            else:
                vertices, faces = scenes.tangle(name, n)
            start = time.perf_counter()
            before = exact_count(vertices, faces)
            check = time.perf_counter() - start
            curves = curve_summary(vertices, faces)
            tt.untangle(vertices, faces, **changed)  # the compile run
            result, seconds = timed_untangle(vertices, faces, **changed)
            after = exact_count(result.vertices, faces)
            ratio = float(result.worst_edge_ratio)
            if name == "klein_bottle":  # the negative control: success is an honest failure
                success = not bool(result.converged) and after <= before and np.isfinite(result.vertices).all()
            else:
                success = after == 0 and ratio >= SHAPE_BAR
            succeeded += success
            total += 1
            moves = int(getattr(result, "global_moves", 0))
            out(
                f"| {name} | {n} | {len(faces):,} | {before} | {curves} | {after} | {bool(result.converged)} "
                f"| {int(result.iterations)} | {int(result.fairing_steps)} | {moves} | {seconds:.2f} "
                f"| {seconds / max(check, 1e-9):.0f} | {ratio:.2f} | {'yes' if success else 'no'} |"
            )
    out()
    out(f"{succeeded} of {total} cases succeeded (the closed Klein bottle succeeds by ending unconverged).")
    out.write(args.markdown, "tangles")


if __name__ == "__main__":
    main()

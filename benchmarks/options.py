"""What each of untangle's options does: the same meshes with one option changed at a time.

Run: python benchmarks/options.py [--faces 2000] [--markdown docs/choosing-options.md]
Meshes: stress cases of three families (tritri_jax.scenes.stress_case, seed 0) and a built-in scene.
Every row is one variant of the options; each cell sums over the meshes. The baseline is the
defaults, in the same run (the first row); a variant's time is given as a ratio to it. Pairs after are counted by
libigl's exact predicates (the independent oracle), not by the library itself. Times leave out what
JAX reports as tracing, lowering and compiling.
"""

import argparse
import os
import sys

import jax

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Output, exact_count, timed_untangle  # noqa: E402

VARIANTS = [
    ("defaults", {}),
    ("step_fraction=0.1", {"step_fraction": 0.1}),
    ("step_fraction=0.4", {"step_fraction": 0.4}),
    ("smoothing=20", {"smoothing": 20.0}),
    ("smoothing=320", {"smoothing": 320.0}),
    ("restarts=0", {"restarts": 0}),
    ("margin=0.05", {"margin": 0.05}),
    ("margin=0.2", {"margin": 0.2}),
    ("bending=0.1", {"bending": 0.1}),
    ("relax=False", {"relax": False}),
    ('method="paper"', {"method": "paper"}),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--faces", type=int, default=2000, help="about this many triangles per stress case")
    parser.add_argument("--families", nargs="*", default=["overlap", "poke", "components"])
    parser.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    parser.add_argument("--markdown", help="write the table into this page (section options)")
    args = parser.parse_args()
    out = Output()

    meshes = [
        (f"{family} {args.faces}", *tt.scenes.stress_case(family, args.faces, seed=0)) for family in args.families
    ]
    meshes.append(("twisted_torus 16", *tt.scenes.twisted_torus(16)))
    variants = [(name, o) for name, o in VARIANTS if not args.only or name in args.only or name == "defaults"]

    # mesh by mesh, every variant (a process keeps a few meshes' compiled code, not all of them)
    rows = {name: [] for name, _ in variants}
    for _, vertices, faces in meshes:
        timed_untangle(vertices, faces)  # compile
        for name, options in variants:
            result, seconds = timed_untangle(vertices, faces, **options)
            rows[name].append((result, seconds, exact_count(result.vertices, faces)))

    out(f"Float64; {len(meshes)} meshes: " + ", ".join(f"{name} ({len(f):,} faces)" for name, _, f in meshes) + ".")
    out("Each cell sums (or takes the worst) over the meshes; time after compile, as a ratio to the defaults.")
    out()
    out(
        "| options | solved | pairs after (libigl) | phase-1 steps | relax Newton | time s | time ratio"
        " | worst edge ratio | max move / diag |"
    )
    out("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    baseline = sum(seconds for _, seconds, _ in rows[variants[0][0]])
    for name, _ in variants:
        runs = rows[name]
        seconds = sum(s for _, s, _ in runs)
        out(
            f"| {name} | {sum(left == 0 for _, _, left in runs)} of {len(runs)} | {sum(left for _, _, left in runs)} | "
            f"{sum(int(r.iterations) for r, _, _ in runs)} | {sum(int(r.relax_iterations) for r, _, _ in runs)} | "
            f"{seconds:.2f} | {seconds / baseline:.2f} | {min(float(r.worst_edge_ratio) for r, _, _ in runs):.2f} | "
            f"{max(float(r.max_displacement) for r, _, _ in runs):.3f} |"
        )
    out.write(args.markdown, "options")


if __name__ == "__main__":
    main()

"""Phase 1 across resolutions: the same shapes meshed at growing face counts, steps to zero.

Run: python benchmarks/resolution.py [--sizes 2000 8000 32000] [--families overlap fold poke uneven]
                                     [--seeds 2] [--markdown docs/benchmarks.md]
``tritri_jax.scenes.stress_case(family, size, seed)`` draws the same shape for every size (the seed
fixes the depth, the turn and the bend), so a row compares one geometry at several resolutions.
Phase 1 only (``relax=False``): its step count is what a finer mesh must not multiply. The baseline
is the smallest size of the same shape in the same run: ``steps ratio`` is steps over its steps.
The last three columns run the same case with ``resolution=0``, phase 1 in mean edge lengths (its
step and smoothing shrink with the edges), in the same process.
Seconds per step leave out what JAX reports as tracing, lowering and compiling.
Success: libigl's exact predicates find no crossing pair in the result.
"""

import argparse
import ast
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_enable_x64", True)

from _report import Output, exact_count, timed_untangle  # noqa: E402

from tritri_jax import scenes  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 8000, 32000])
    parser.add_argument("--families", nargs="*", default=["overlap", "fold", "poke", "uneven"])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--set", nargs="*", default=[], metavar="OPTION=VALUE", help="untangle options to change")
    parser.add_argument("--markdown", help="write the table into this page (section resolution)")
    args = parser.parse_args()
    changed = {key: ast.literal_eval(value) for key, value in (o.split("=", 1) for o in args.set)}
    out = Output()
    out(
        f"Float64, phase 1 only (`relax=False`), `max_steps={args.max_steps}` per attempt, "
        + (", ".join(f"`{k}={v}`" for k, v in changed.items()) or "defaults otherwise")
        + "."
    )
    out()
    out(
        "| family | seed | faces | pairs before | pairs after | steps | fairing steps | steps ratio | s per step "
        "| worst edge ratio | in edge lengths: pairs after | steps | steps ratio |"
    )
    out("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for family in args.families:
        for seed in range(args.seeds):
            first = {}
            for size in args.sizes:
                vertices, faces = scenes.stress_case(family, size, seed)
                options = {"relax": False, "max_steps": args.max_steps, **changed}
                cells = []
                for name, extra in (("default", {}), ("edges", {"resolution": 0.0})):
                    result, seconds = timed_untangle(vertices, faces, **{**options, **extra})
                    steps = int(result.iterations)
                    first.setdefault(name, max(steps, 1))
                    fairing = f" | {int(result.fairing_steps)}" if name == "default" else ""
                    pairs = exact_count(result.vertices, faces)
                    cells.append(f"{pairs} | {steps}{fairing} | {steps / first[name]:.1f}")
                    if name == "default":
                        cells.append(f"{seconds / max(steps, 1):.3f} | {float(result.worst_edge_ratio):.2f}")
                out(
                    f"| {family} | {seed} | {len(faces):,} | {exact_count(vertices, faces)} | "
                    + " | ".join(cells)
                    + " |"
                )
    out.write(args.markdown, "resolution")


if __name__ == "__main__":
    main()

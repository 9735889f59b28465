"""The stress suite: ``untangle`` on meshes nobody tuned it on, family x size x seed x dtype.

Every case comes from ``tritri_jax.scenes.stress_case`` (overlapping copies of closed surfaces, deep
folds, uneven tessellations, pokes through thin parts, open sheets, several components, random smooth
warps of space), at about the requested face counts, its shape drawn from the seed. A case succeeds when libigl's exact
predicates find no crossing pair in the output and the worst edge ratio (to the input's edges) is at
least 0.3; ``untangle`` claiming ``converged`` where libigl finds a pair is a false success, reported
on its own. The time is after compile: the first case of each mesh shape and dtype is run twice and
timed the second time, and any compiling a case still does (larger buffers) is taken off its time.
The baseline of the same run is libigl's exact detection on the input (``check s``): ``ratio`` is
the untangle time over it.

    python benchmarks/stress.py --sizes 2000 20000 --seeds 5 --results stress.jsonl \
        --markdown docs/benchmarks.md

``--results`` keeps one JSON line per case (a later run with the same file skips the cases it
holds, so a long suite can be run in parts); the table covers every case in the file.
"""

import argparse
import json
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_enable_x64", True)

from _report import exact_count, timed_untangle, write_section  # noqa: E402

import tritri_jax as tt  # noqa: E402
from tritri_jax import scenes  # noqa: E402

SHAPE_BAR = 0.3


def run_case(family, size, seed, dtype, seen, options):
    vertices, faces = scenes.stress_case(family, size, seed)
    start = time.perf_counter()
    before = exact_count(vertices, faces)
    check_seconds = time.perf_counter() - start
    x = np.asarray(vertices, dtype)
    shape = (len(x), len(faces), dtype)
    if shape not in seen:  # the compile run
        tt.untangle(x, faces, **options)
        seen.add(shape)
    result, seconds = timed_untangle(x, faces, **options)
    after = exact_count(result.vertices, faces)
    ratio = float(result.worst_edge_ratio)
    return {
        "family": family,
        "size": size,
        "seed": seed,
        "dtype": dtype,
        "faces": int(len(faces)),
        "before": before,
        "after": after,
        "converged": bool(result.converged),
        "false_success": bool(result.converged) and after > 0,
        "success": after == 0 and ratio >= SHAPE_BAR,
        "steps": int(result.iterations),
        "relax_steps": int(result.relax_iterations),
        "seconds": seconds,
        "check_seconds": check_seconds,
        "worst_edge_ratio": ratio,
        "max_displacement": float(result.max_displacement),
        "fairing_steps": int(result.fairing_steps),
    }


def table(rows):
    lines = [
        "| family | faces | dtype | cases | success | false success | median steps | worst steps "
        "| median s | median ratio | worst edge ratio | max displacement |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups = {}
    for row in rows:
        groups.setdefault((row["family"], row["size"], row["dtype"]), []).append(row)
    for (family, size, dtype), group in sorted(groups.items()):
        steps = [r["steps"] for r in group]
        seconds = [r["seconds"] for r in group]
        ratios = [r["seconds"] / max(r["check_seconds"], 1e-9) for r in group]
        lines.append(
            f"| {family} | {size:,} | {dtype} | {len(group)} | {sum(r['success'] for r in group) / len(group):.0%} "
            f"| {sum(r['false_success'] for r in group)} | {np.median(steps):.0f} | {max(steps)} "
            f"| {np.median(seconds):.2f} | {np.median(ratios):.0f} | {min(r['worst_edge_ratio'] for r in group):.2f} "
            f"| {max(r['max_displacement'] for r in group):.3f} |"
        )
    total = len(rows)
    succeeded = sum(r["success"] for r in rows)
    lines.append("")
    lines.append(
        f"{succeeded} of {total} cases succeeded ({succeeded / max(total, 1):.0%}); "
        f"{sum(r['false_success'] for r in rows)} false successes."
    )
    failures = [r for r in rows if not r["success"]]
    if failures:
        lines.append("")
        lines.append("Cases that failed (crossing pairs before -> after by libigl, steps, worst edge ratio):")
        lines.append("")
        for r in failures:
            lines.append(
                f"- {r['family']} {r['size']:,} seed {r['seed']} {r['dtype']}: {r['before']} -> {r['after']}, "
                f"{r['steps']} steps, ratio {r['worst_edge_ratio']:.2f}"
            )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", default=list(scenes.STRESS_FAMILIES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[2000, 20000, 100000, 250000])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 per family and size")
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument("--results", help="JSON lines file of per-case results (read, then appended to)")
    parser.add_argument("--markdown", help="write the table into this Markdown page (section 'stress')")
    args = parser.parse_args()

    rows = []
    if args.results and os.path.exists(args.results):
        with open(args.results) as saved:
            rows = [json.loads(line) for line in saved if line.strip()]
    done = {(r["family"], r["size"], r["seed"], r["dtype"]) for r in rows}
    seen = set()
    for size in args.sizes:
        for family in args.families:
            for seed in range(args.seeds):
                for dtype in args.dtypes:
                    if (family, size, seed, dtype) in done:
                        continue
                    row = run_case(family, size, seed, dtype, seen, {})
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if args.results:
                        with open(args.results, "a") as saved:
                            saved.write(json.dumps(row) + "\n")
    text = table(rows)
    print(text)
    if args.markdown:
        write_section(args.markdown, "stress", text)


if __name__ == "__main__":
    main()

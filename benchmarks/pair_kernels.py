"""Pairs per second of the per-pair kernels, against the naive route (jax.hessian + eigh clamp).

Run: python benchmarks/pair_kernels.py [--pairs 20000] [--float32]
Prints one table; the naive route is measured in the same run and every row is reported as a ratio to it.

The routes are measured with glibc's malloc keeping the memory it frees (the script restarts itself with
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set): with its defaults every call's output of
more than 32 MB (the dense route's 18 x 18 matrices) is fresh memory from the kernel, and its page
faults, not the kernel's arithmetic, set that route's rate. A child process with the defaults measures
the dense route and the naive one again, for the row that says so.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Output  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--pairs", type=int, default=20000)
parser.add_argument("--float32", action="store_true")
parser.add_argument("--repeats", type=int, default=15)
parser.add_argument("--markdown", help="write the table into this page (section pair-kernels)")
parser.add_argument("--allocator", choices=["keep", "default"], default="keep", help=argparse.SUPPRESS)
parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the child's answer
args = parser.parse_args()
KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "2000000000"}
if args.allocator == "keep" and any(os.environ.get(k) != v for k, v in KEEP_MEMORY.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **KEEP_MEMORY})
out = Output()
jax.config.update("jax_enable_x64", not args.float32)

import tritri_jax as tt  # noqa: E402
from tritri_jax._pair_hessian import interval_jacobian  # noqa: E402

dtype = jnp.float32 if args.float32 else jnp.float64
rng = np.random.default_rng(0)
# Crossing pairs: u in the z = 0 plane, v straddling it (so every row does the full work).
u = rng.uniform(-1, 1, (args.pairs, 3, 3)) * [1, 1, 0.05]
v = rng.uniform(-1, 1, (args.pairs, 3, 3)) * [0.5, 0.5, 1]
u, v = jnp.asarray(u, dtype), jnp.asarray(v, dtype)


def naive(a, b):
    x = jnp.concatenate([a.ravel(), b.ravel()])
    energy = lambda y: tt.pair_energy(y[:9].reshape(3, 3), y[9:].reshape(3, 3))  # noqa: E731
    h = jax.hessian(energy)(x)
    w, q = jnp.linalg.eigh(0.5 * (h + h.T))
    return energy(x), jax.grad(energy)(x), (q * jnp.maximum(w, 0)) @ q.T


def jacrev_of_interval(a, b):
    ends = lambda y: jnp.stack(tt.interval(y[:9].reshape(3, 3), y[9:].reshape(3, 3))[:2])  # noqa: E731
    return jax.jacrev(ends)(jnp.concatenate([a.ravel(), b.ravel()]))


routes = {
    "energy": tt.pair_energy,
    "Jacobian of (tc0, tc1), by hand": interval_jacobian,
    "Jacobian of (tc0, tc1), jax.jacrev": jacrev_of_interval,
    "energy + gradient": jax.value_and_grad(tt.pair_energy),
    "Gauss-Newton factor (39 numbers)": tt.gauss_newton_factor,
    "Gauss-Newton projected Hessian (dense)": lambda a, b: tt.pair_energy_grad_hessian(a, b),
    "exact projected Hessian": lambda a, b: tt.pair_energy_grad_hessian(a, b, hessian="exact"),
    "naive: jax.hessian + eigh clamp": naive,
}


DENSE, NAIVE = "Gauss-Newton projected Hessian (dense)", "naive: jax.hessian + eigh clamp"
if args.allocator == "default":
    routes = {name: routes[name] for name in (DENSE, NAIVE)}
compiled = {name: jax.jit(jax.vmap(f)) for name, f in routes.items()}
for g in compiled.values():
    jax.block_until_ready(g(u, v))
# Round robin, best of the repeats per route: this machine's speed drifts by 2x over minutes, and
# measuring the routes one after another would put the drift into the ratios.
best = dict.fromkeys(compiled, float("inf"))
for _ in range(args.repeats):
    for name, g in compiled.items():
        start = time.perf_counter()
        jax.block_until_ready(g(u, v))
        best[name] = min(best[name], time.perf_counter() - start)
results = {name: (args.pairs / best[name], compiled[name]) for name in compiled}
if args.json:
    print(json.dumps({name: rate for name, (rate, _) in results.items()}))
    sys.exit()
baseline = results[NAIVE][0]
# The dense route and its baseline again, with glibc's defaults (a child process: malloc reads them at start)
child_env = {k: v for k, v in os.environ.items() if k not in KEEP_MEMORY}
child = [sys.executable, __file__, "--pairs", str(args.pairs), "--repeats", str(args.repeats)]
child += ["--allocator", "default", "--json"] + (["--float32"] if args.float32 else [])
answer = subprocess.run(child, env=child_env, capture_output=True, text=True, check=True).stdout
fresh = json.loads(answer.splitlines()[-1])

# Floating-point operations per pair of the Gauss-Newton route, from XLA's cost model.
flops = {}
for name in ("Gauss-Newton factor (39 numbers)", "Gauss-Newton projected Hessian (dense)", "energy"):
    try:
        cost = results[name][1].lower(u, v).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops[name] = cost.get("flops", float("nan")) / args.pairs
    except Exception:
        flops[name] = float("nan")

cores = os.cpu_count()
peak = cores * 2.5e9 * (8 if args.float32 else 4) * 2  # AVX2 FMA, ~2.5 GHz: a rough upper bound
precision = "float32" if args.float32 else "float64"
out(f"{args.pairs} crossing pairs, {precision}, best of {args.repeats}; malloc keeping the memory it frees")
out(f"({' '.join(f'{k}={v}' for k, v in KEEP_MEMORY.items())}) except in the row that says otherwise.\n")
out("| route | pairs/s | ratio to naive | flops/pair (XLA) | fraction of peak |")
out("|---|---:|---:|---:|---:|")
for name, (r, _) in results.items():
    f = flops.get(name, float("nan"))
    frac = f * r / peak if np.isfinite(f) else float("nan")
    fs = f"{f:.0f}" if np.isfinite(f) else "–"
    fr = f"{frac:.2%}" if np.isfinite(frac) else "–"
    out(f"| {name} | {r:,.0f} | {r / baseline:.1f}x | {fs} | {fr} |")
    if name == DENSE:
        r_fresh = fresh[DENSE]
        out(f"| {name}, glibc's default malloc | {r_fresh:,.0f} | {r_fresh / fresh[NAIVE]:.1f}x | – | – |")
out(f"\npeak assumed: {peak / 1e9:.0f} GFLOP/s ({cores} cores x 2.5 GHz x {'8' if args.float32 else '4'}-wide FMA)")
out.write(args.markdown, "pair-kernels")

"""Past one device: detection, and one energy + gradient + Hessian-vector product, on 1, 2, 4 and 8
devices (``device_mesh``), against no device mesh in the same run.

On a CPU the devices are simulated (this script sets ``--xla_force_host_platform_device_count``
when JAX will run on the CPU): they share the machine's cores, so wall time cannot fall with more
devices there. What the table shows that does scale: each device's work (its share of the candidate
pairs: the largest share over the even one), each device's memory (XLA's buffers for one device's
program: arguments, outputs and temporaries) and the data that crosses devices. On a machine with
several GPUs the same script runs on them.

    python benchmarks/scaling.py --sizes 200000 1000000 --markdown docs/benchmarks.md
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--sizes", type=int, nargs="*", default=[200_000, 1_000_000, 4_000_000])
parser.add_argument("--devices", type=int, nargs="*", default=[1, 2, 4, 8])
parser.add_argument("--energy-max", type=int, default=1_000_000, help="largest size for the energy rows")
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--markdown", help="write the table into this page (section scaling)")
args = parser.parse_args()

if os.environ.get("JAX_PLATFORMS", "cpu") == "cpu":
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={max(args.devices)}"
    )

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402
from tritri_jax._detect import _detect_on_devices_jit  # noqa: E402
from tritri_jax._sizes import bucket, default_capacity, pad_mesh  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import Output  # noqa: E402

out = Output()


def best(f):
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = jax.block_until_ready(f())
        times.append(time.perf_counter() - start)
    return min(times), result


def first(f):
    start = time.perf_counter()
    result = jax.block_until_ready(f())
    return time.perf_counter() - start, result


def device_mesh(count):
    return jax.make_mesh((count,), ("devices",), devices=jax.devices()[:count])


def detection_shares(vertices, faces, mesh):
    """Per device: candidates in its share, and the bytes of its program's buffers, with the buffers
    ``find_intersections`` starts with (``_detect.detect``)."""
    v, f = pad_mesh(vertices, faces)
    share = -(-2 * f.shape[0] // max(2, mesh.size))
    options = dict(
        device_mesh=mesh,
        capacity=default_capacity(share),
        survivor_capacity=bucket(4 * share),
        flagged_capacity=bucket(4 * share),
        num_faces=np.int32(len(faces)),
    )
    found = _detect_on_devices_jit(v, f, **options)
    memory = _detect_on_devices_jit.lower(v, f, **options).compile().memory_analysis()
    per_device = memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
    return np.asarray(found.num_candidates), per_device, options["flagged_capacity"]


def energy_rows(vertices, faces, mesh, capacity):
    def energy(x):
        return tt.intersection_energy(x, faces, device_mesh=mesh, capacity=capacity)

    direction = np.random.default_rng(0).normal(size=vertices.shape)
    run = jax.jit(lambda x, d: (*jax.value_and_grad(energy)(x), jax.jvp(jax.grad(energy), (x,), (d,))[1]))
    return lambda: run(vertices, direction)


devices_available = len(jax.devices())
out(f"Devices: {devices_available} x {jax.devices()[0].device_kind}.")
out()
out(
    "| faces | devices | detection s | ratio | compile s | largest share | memory per device | gathered "
    "| energy+grad+HVP s | ratio | compile s | all-reduced |"
)
out("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in args.sizes:
    n = int(round((size / 2) ** 0.5)) + 1
    vertices, faces = tt.scenes.crumpled_sheet(n)
    vertices = np.asarray(vertices)
    reference = None
    base_detect = base_energy = None
    for count in [None, *args.devices]:
        if count is not None and count > devices_available:
            continue
        mesh = None if count is None else device_mesh(count)

        def detect(v=vertices, f=faces, mesh=mesh):
            return tt.find_intersections(v, f, device_mesh=mesh)

        compile_s, pairs = first(detect)
        seconds, pairs = best(detect)
        compile_s -= seconds
        if reference is None:
            reference, base_detect = pairs, seconds
        assert np.array_equal(pairs, reference), "different pairs"
        label = "none" if count is None else str(count)
        if mesh is None:  # the energy's buffer as on one device of a mesh (the default would be 16 F slots)
            shares, memory, gathered = "", "", ""
            capacity = bucket(int(1.25 * detection_shares(vertices, faces, device_mesh(1))[0].sum()))
        else:
            counts, per_device, flagged = detection_shares(vertices, faces, mesh)
            shares = f"{counts.max() / counts.mean():.2f}"
            memory = f"{per_device / 2**20:,.0f} MB"
            gathered = f"{count * flagged * 10 / 2**20:,.1f} MB"  # (pair, two flags) per slot, every device
            capacity = bucket(int(1.25 * counts.max()))
        energy_cells = "| | | | |"
        if size <= args.energy_max:
            run = energy_rows(vertices, faces, mesh, capacity)
            energy_compile, _ = first(run)
            energy_s, _ = best(run)
            base_energy = base_energy or energy_s
            reduced = "" if mesh is None else f"{2 * (vertices.size * 8 + 8) / 2**20:,.1f} MB"  # gradient and HVP
            energy_cells = f"| {energy_s:.3f} | {energy_s / base_energy:.2f} | {energy_compile - energy_s:.1f} "
            energy_cells += f"| {reduced} |"
        out(
            f"| {len(faces):,} | {label} | {seconds:.3f} | {seconds / base_detect:.2f} | {compile_s:.1f} | {shares} "
            f"| {memory} | {gathered} {energy_cells}"
        )
out()
out(
    "`largest share`: the most candidate pairs one device judged, over the mean (1.00: even). `memory per "
    "device`: XLA's buffers for one device's detection program. `gathered`: the flagged-pair buffers "
    "read back from all devices; `all-reduced`: the gradient and the Hessian-vector product summed across "
    "devices (the energy is one number). Every device also builds the whole grid (the sorts are not split)."
)
out.write(args.markdown, "scaling")

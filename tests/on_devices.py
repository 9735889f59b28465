"""Runs in a subprocess of ``test_devices``: JAX fixes its device count when it starts.

``python tests/on_devices.py sharded``: 8 simulated CPU devices; prints, as JSON, how one mesh's
pairs, energy, gradient and Hessian-vector product on 1, 2 and 8 of them compare with no device mesh,
and ``untangle``'s phase 1 on all 8 with it on none.

``python tests/on_devices.py process INDEX PORT``: one of two processes (``jax.distributed`` over
localhost, two CPU devices each, one device mesh over all four); prints the pairs, the energy and
the gradient.
"""

import json
import os
import sys

if __name__ == "__main__":  # (imported by the tests for ``mesh``: then nothing here may touch JAX's set-up)
    devices = "8" if sys.argv[1] == "sharded" else "2"
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=" + devices
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import tritri_jax as tt  # noqa: E402


def mesh():
    """A crumpled sheet: crossings, some between faces that share a vertex."""
    return tt.scenes.stress_case("sheet", 600, 1)


def measures(vertices, faces, direction, device_mesh):
    def energy(x):
        return tt.intersection_energy(x, faces, device_mesh=device_mesh)

    value, gradient = jax.jit(jax.value_and_grad(energy))(vertices)
    hvp = jax.jit(lambda x, d: jax.jvp(jax.grad(energy), (x,), (d,))[1])(vertices, direction)
    return np.asarray(value), np.asarray(gradient), np.asarray(hvp)


def sharded():
    vertices, faces = mesh()
    vertices = jnp.asarray(vertices)
    direction = jnp.asarray(np.random.default_rng(0).normal(size=vertices.shape))
    pairs = tt.find_intersections(vertices, faces)
    reference = measures(vertices, faces, direction, None)
    report = {"pairs": len(pairs), "energy": float(reference[0])}
    for count in (1, 2, 8):
        device_mesh = jax.make_mesh((count,), ("devices",), devices=jax.devices()[:count])
        found = tt.find_intersections(vertices, faces, device_mesh=device_mesh)
        got = measures(vertices, faces, direction, device_mesh)
        errors = [float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, reference, strict=True)]
        report[count] = {"same_pairs": bool(np.array_equal(found, pairs)), "relative_errors": errors}
    # untangle's phase 1 (phase 2 runs on one device either way)
    vertices, faces = tt.scenes.two_spheres(6)
    alone = tt.untangle(vertices, faces, relax=False)
    shared = tt.untangle(vertices, faces, relax=False, device_mesh=jax.make_mesh((8,), ("devices",)))
    report["untangle"] = {
        "converged": [bool(alone.converged), bool(shared.converged)],
        "iterations": [int(alone.iterations), int(shared.iterations)],
        "largest_difference": float(np.max(np.abs(np.asarray(alone.vertices) - np.asarray(shared.vertices)))),
        "size": float(np.ptp(vertices, axis=0).max()),
    }
    print(json.dumps(report))


def process(index, port):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=index, initialization_timeout=120)
    device_mesh = jax.make_mesh((4,), ("devices",))
    vertices, faces = mesh()
    pairs = tt.find_intersections(vertices, faces, device_mesh=device_mesh)
    with jax.set_mesh(device_mesh):  # eager derivatives on a mesh of explicit axes (make_mesh's default)
        energy, gradient = jax.value_and_grad(tt.intersection_energy)(vertices, faces, device_mesh=device_mesh)
    gradient = tt._devices.to_host(gradient)
    print(json.dumps({"pairs": pairs.tolist(), "energy": float(energy), "gradient": gradient.tolist()}))
    jax.distributed.shutdown()


if __name__ == "__main__":
    sharded() if sys.argv[1] == "sharded" else process(int(sys.argv[2]), int(sys.argv[3]))

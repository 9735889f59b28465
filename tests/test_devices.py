"""Past one device: ``device_mesh`` on simulated CPU devices and two processes over localhost give
the one-device results (the runs are subprocesses, ``tests/on_devices.py``: JAX fixes its device
count when it starts)."""

import json
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import tritri_jax as tt

from .on_devices import mesh

SCRIPT = pathlib.Path(__file__).with_name("on_devices.py")


def _last_json_line(output):
    return json.loads(output.strip().splitlines()[-1])  # (the CPU collectives print above it)


@pytest.mark.slow
def test_one_two_and_eight_devices_give_the_same_pairs_energy_gradient_hessian_product_and_untangling():
    run = subprocess.run([sys.executable, SCRIPT, "sharded"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = _last_json_line(run.stdout)
    assert report["pairs"] > 10 and report["energy"] > 0
    for count in ("1", "2", "8"):
        assert report[count]["same_pairs"], count
        assert max(report[count]["relative_errors"]) < 1e-12, (count, report[count])
    untangled = report["untangle"]
    assert untangled["converged"] == [True, True] and untangled["iterations"][0] == untangled["iterations"][1]
    assert untangled["largest_difference"] < 1e-9 * untangled["size"], untangled  # the pairs' order: round-off


@pytest.mark.slow
def test_two_processes_over_localhost_give_the_one_process_result():
    with socket.socket() as free:
        free.bind(("localhost", 0))
        port = free.getsockname()[1]
    runs = [
        subprocess.Popen(
            [sys.executable, SCRIPT, "process", str(index), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in (0, 1)
    ]
    try:
        outputs = [run.communicate(timeout=600) for run in runs]
    finally:
        for run in runs:
            run.kill()
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err[-3000:]
    vertices, faces = mesh()
    energy, gradient = jax.value_and_grad(tt.intersection_energy)(vertices, faces)
    for out, _ in outputs:
        got = _last_json_line(out)
        np.testing.assert_array_equal(np.array(got["pairs"]), tt.find_intersections(vertices, faces))
        np.testing.assert_allclose(got["energy"], float(energy), rtol=1e-12)
        np.testing.assert_allclose(np.array(got["gradient"]), gradient, rtol=1e-9, atol=1e-15 * np.abs(gradient).max())


def test_a_device_mesh_must_be_a_one_axis_jax_mesh():
    vertices, faces = tt.scenes.two_spheres(4)
    with pytest.raises(ValueError, match="device_mesh must be a jax.sharding.Mesh"):
        tt.find_intersections(vertices, faces, device_mesh=jax.devices())
    two_axes = jax.make_mesh((1, 1), ("a", "b"))
    with pytest.raises(ValueError, match="one axis"):
        tt.intersection_energy(vertices, faces, device_mesh=two_axes)
    with pytest.raises(ValueError, match="device_mesh must be a jax.sharding.Mesh"):
        tt.untangle(vertices, faces, device_mesh="cpu")

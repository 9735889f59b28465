"""Shared set-up: float64 on, and compiled kernels shared by every test (JIT time dominates)."""

import atexit
import gc
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for the session, shared with the subprocesses (the CLI tests and
# the notebooks' kernels inherit it): they compile the same functions at the same shapes as the tests.
_CACHE = tempfile.mkdtemp(prefix="tritri_jax_test_cache_")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("TRITRI_JAX_CACHE", os.environ["JAX_COMPILATION_CACHE_DIR"])

from hypothesis import settings  # noqa: E402

# The suite is reproducible: Hypothesis draws the same examples on every run, so CI on an unchanged
# tree gives the same verdict. ``pytest --hypothesis-profile=explore`` draws fresh random examples
# on each run; a counterexample it finds belongs in the test as an ``@example``.
settings.register_profile("reproducible", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("reproducible")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import pathlib  # noqa: E402

import pytest  # noqa: E402

import tritri_jax as tt  # noqa: E402
from tritri_jax._memory import memory_mappings  # noqa: E402

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks" / "isir-misc"


class Compiled:
    """Jitted kernels, compiled once per dtype and shape for the whole session."""

    interval = jax.jit(tt.interval)
    intersects = jax.jit(tt.intersects)
    pair_energy = jax.jit(tt.pair_energy)
    crossing_length = jax.jit(tt.crossing_length)
    energy_grad = jax.jit(jax.value_and_grad(tt.pair_energy, argnums=(0, 1)))
    gauss_newton = jax.jit(lambda u, v: tt.pair_energy_grad_hessian(u, v, hessian="gauss_newton"))
    exact = jax.jit(lambda u, v: tt.pair_energy_grad_hessian(u, v, hessian="exact"))
    factor = jax.jit(tt.gauss_newton_factor)
    length_grad = jax.jit(jax.grad(tt.crossing_length, argnums=(0, 1)))


@pytest.fixture(autouse=True)
def _release_compiled_code():
    """Free JAX's compiled code once this process holds many memory mappings. One ``untangle``
    compile adds ~6,000 (XLA's CPU executables; ``jax.clear_caches`` returns them), Linux allows a
    process 65,530 (``vm.max_map_count``), and past ~120 tests the suite aborted inside XLA.

    The line is below the library's own budget (12,000, ``_memory.release_if_crowded``), so that a
    test starts with room for two ``untangle`` compiles. At 30,000 the tests' own compiled kernels
    kept the process above the library's budget, and the library then released its code at every
    new shape or buffer size, inside a test, again and again: the operator tests took 16 minutes in
    the suite and 4.7 alone. Code freed here comes back from the session's persistent cache."""
    yield
    mappings = memory_mappings()
    if mappings is not None and mappings[0] > 10_000:
        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def compiled():
    return Compiled


@pytest.fixture(scope="session")
def benchmark_dir():
    if not BENCHMARKS.is_dir():
        pytest.skip(f"benchmark meshes not found at {BENCHMARKS}")
    return BENCHMARKS

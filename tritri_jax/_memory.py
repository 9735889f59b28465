"""Memory maps: each compile of ``untangle`` for a new mesh size maps thousands of regions, and Linux
caps them per process; past a share of the cap, the library's compiled functions are released."""

import gc

from ._detect import detection_jits
from ._paper_route import paper_route_jit
from ._phase1 import phase1_jit
from ._relax import adjoint_jit, close_count_jit, relax_jit


def memory_mappings():
    """``(mappings this process holds, Linux's cap on them)``, or ``None`` where they cannot be read
    (not Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            used = sum(1 for _ in maps)
        with open("/proc/sys/vm/max_map_count") as cap:
            return used, int(cap.read())
    except (OSError, ValueError):
        return None


_MAPPING_SHARE = 0.6  # of Linux's per-process cap, past which ``release_if_crowded`` drops compiled code


def release_if_crowded():
    """Drop this library's compiled functions when the process nears Linux's cap on memory mappings.

    Each compile of ``untangle`` for a new mesh size maps ~4,700 regions (XLA's CPU executables;
    two-spheres scenes, measured from ``/proc/self/maps``), the cap is ``vm.max_map_count``
    (65,530 by default), and past it XLA aborts the process: the test suite did, ~120 tests in. Past
    60 % of the cap the compiled ``untangle`` and detection functions are cleared (the next call of
    a size compiles again); the caller's own compiled functions are left alone."""
    mappings = memory_mappings()
    if mappings is not None and mappings[0] > _MAPPING_SHARE * mappings[1]:
        for compiled in (phase1_jit, paper_route_jit, relax_jit, close_count_jit, adjoint_jit, *detection_jits):
            compiled.clear_cache()
        gc.collect()

"""Memory maps: each compile for a new mesh bucket maps hundreds to thousands of regions, and Linux
caps them per process; past a budget, the library's compiled functions are released. Every module's
jitted stage is made with ``releasable_jit``, so this module depends on none of them."""

import gc

import jax

_RELEASABLE = []


def releasable_jit(fun, **jit_options):
    """``jax.jit(fun, **jit_options)``, registered to be cleared by ``release_if_crowded``."""
    compiled = jax.jit(fun, **jit_options)
    _RELEASABLE.append(compiled)
    return compiled


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
_MAPPING_BUDGET = 12_000  # ... or past this many, whichever is lower: one call then adds at most ~6,000


_SEEN = set()  # the call shapes compiled since the last release: a repeat of one never releases
_HELD = [0]  # how much compiled code the stages held at the last call (to notice ``jax.clear_caches``)


def _held() -> int:
    return sum(getattr(compiled, "_cache_size", lambda: 0)() for compiled in _RELEASABLE)


def release_if_crowded(key=None):
    """Drop this library's compiled functions when the process nears Linux's cap on memory mappings.

    Each compile of ``untangle`` for a new mesh size maps ~4,700 regions (XLA's CPU executables;
    two-spheres scenes, measured from ``/proc/self/maps``), the cap is ``vm.max_map_count``
    (65,530 by default), and past it XLA aborts the process: the test suite did, ~120 tests in. Past
    12,000 mappings (or 60 % of the cap, if lower) the compiled ``untangle`` and detection functions
    are cleared (the next call of a bucket compiles again, from the persistent cache when it is
    on); the caller's own compiled functions are left alone. A detection compile maps ~700.

    ``key``: the caller's shapes and static options. A key seen since the last release is a call
    whose code is compiled already: it never releases (else the second ``untangle`` of one mesh,
    in a crowded process, would clear and compile again what the first one made). Keys seen before
    the stages' code was freed by someone else (``jax.clear_caches``) are forgotten."""
    held = _held()
    if held < _HELD[0]:  # freed elsewhere (``jax.clear_caches``): the keys seen have no code now
        _SEEN.clear()
    _HELD[0] = held
    if key is not None and key in _SEEN:
        return
    mappings = memory_mappings()
    if mappings is not None and mappings[0] > min(_MAPPING_SHARE * mappings[1], _MAPPING_BUDGET):
        for compiled in _RELEASABLE:
            compiled.clear_cache()
        gc.collect()
        _SEEN.clear()
        _HELD[0] = 0
    if key is not None:
        _SEEN.add(key)

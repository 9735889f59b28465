"""Shared by the benchmark scripts: the machine line, and writing a table into a Markdown page between
markers, so that docs/benchmarks.md holds the current table of each benchmark and nothing older."""

import datetime
import os
import platform
import re
import sys
import time

import numpy as np


def machine_line() -> str:
    """CPU model, cores, Python and JAX versions, and JAX's backend, in one line."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores; Python {platform.python_version()}, JAX {jax.__version__} ({jax.default_backend()})"


def command_line() -> str:
    """The command that ran this script, as a user would type it from the repository's root."""
    return " ".join(["python", os.path.relpath(sys.argv[0])] + sys.argv[1:])


def write_section(path: str, name: str, body: str) -> None:
    """Replace the section ``name`` of the Markdown page ``path`` (between ``<!-- name:begin -->`` and
    ``<!-- name:end -->``) with ``body``, headed by the command, the date and the machine; append the
    section if the page has none."""
    header = f"Command: `{command_line()}`, {datetime.date.today().isoformat()}.\nMachine: {machine_line()}.\n\n"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{header}{body.rstrip()}\n{end}"
    text = open(path).read() if os.path.exists(path) else ""
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as page:
        page.write(text)


class Output:
    """A benchmark's table: each line printed as it comes and kept, then written into a page."""

    def __init__(self):
        self.lines = []

    def __call__(self, text="", **_):
        print(text, flush=True)
        self.lines.append(text)

    def write(self, path, name):
        """Into section ``name`` of the page ``path`` (``write_section``); nothing when ``path`` is None."""
        if path:
            write_section(path, name, "\n".join(self.lines))


def exact_count(vertices, faces) -> int:
    """Crossing face pairs by libigl's exact predicates (the independent oracle)."""
    import igl.predicates

    found = igl.predicates.find_self_intersections(np.asarray(vertices, np.float64), np.asarray(faces).astype(np.int64))
    return len(found[1])


def timed_untangle(vertices, faces, **options):
    """``tritri_jax.untangle`` and its seconds, less what JAX reports as tracing, lowering and
    compiling (a call may compile code of its own: a new bucket, larger buffers, another method)."""
    import tritri_jax as tt
    from tritri_jax.cli import _CompileClock

    clock = _CompileClock()
    start = time.perf_counter()
    result = tt.untangle(vertices, faces, **options)
    seconds = time.perf_counter() - start - clock.seconds
    clock.stop()
    return result, seconds

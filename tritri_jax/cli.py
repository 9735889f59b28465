"""The ``tritri-jax`` command line: ``demo``, ``check`` and ``untangle``.

Runs in float64 (exact predicates settle what float64 cannot). JAX's persistent compilation cache
is on (in ``~/.cache/tritri_jax/jax``, or ``$TRITRI_JAX_CACHE``), so a second run does not pay most
of the compile again; compile and solve time are reported apart.
"""

import argparse
import os
import sys
import time


def _setup_jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    cache = os.environ.get("TRITRI_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "tritri_jax", "jax"))
    try:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except Exception:  # an unwritable cache must not stop the command
        pass


class _CompileClock:
    """Seconds JAX spent tracing, lowering and compiling (its monitoring events) from creation to
    ``stop``, in total and per jitted function."""

    _STEPS = {
        "jaxpr_trace_duration": "trace",
        "jaxpr_to_mlir_module_duration": "lower",
        "backend_compile_duration": "compile",
    }

    def __init__(self):
        import jax

        self.seconds = 0.0
        self.by_function = {}
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, fun_name="?", **_):
        step = self._STEPS.get(event.rsplit("/", 1)[-1])
        if step is not None:
            self.seconds += duration
            name = str(fun_name).removeprefix("jit(").removesuffix(")")
            steps = self.by_function.setdefault(name, dict.fromkeys(self._STEPS.values(), 0.0))
            steps[step] += duration

    def stop(self):
        """Stop counting (a batch makes one clock per mesh: none may outlive its mesh)."""
        import jax

        jax.monitoring.unregister_event_duration_listener(self._listen)

    def report(self, least=0.05):
        """Lines ``name: total (trace, lower, compile)``, slowest first, for the functions that took
        ``least`` seconds or more; the rest summed on one line."""
        lines, rest = [], 0.0
        for name, steps in sorted(self.by_function.items(), key=lambda item: -sum(item[1].values())):
            total = sum(steps.values())
            if total < least:
                rest += total
                continue
            parts = ", ".join(f"{step} {seconds:.2f}" for step, seconds in steps.items())
            lines.append(f"    {name}: {total:.2f} s ({parts})")
        if rest >= 0.005:
            lines.append(f"    {len(self.by_function) - len(lines)} other functions: {rest:.2f} s")
        return lines


def _describe(vertices, faces):
    """One line on what the mesh holds besides its triangles (``mesh_report``)."""
    import tritri_jax as tt

    findings = tt.mesh_report(vertices, faces).findings()
    print(f"  input:                {', '.join(findings) or 'closed, manifold, consistently oriented, one piece'}")


def _check(vertices, faces, label, show_list=False, verbose=False):
    import tritri_jax as tt
    from tritri_jax._detect import crossing_measures

    clock, start = _CompileClock(), time.perf_counter()
    pairs = tt.find_intersections(vertices, faces)
    seconds = time.perf_counter() - start - clock.seconds
    energy, length = crossing_measures(vertices, faces, pairs) if len(faces) else (0.0, 0.0)
    clock.stop()
    print(f"{label}: {len(vertices)} vertices, {len(faces)} triangles")
    _describe(vertices, faces)
    print(f"  crossing pairs:       {len(pairs)}")
    print(f"  intersection energy:  {energy:.6g}  (sum of (tc0 tc1)^2, Eq. 2)")
    print(f"  intersection length:  {length:.6g}  (length of the intersection curve)")
    print(f"  detection time:       {seconds:.3f} s (+ {clock.seconds:.2f} s compiling)")
    if verbose:
        print("  compiling, per function (seconds traced, lowered, compiled):")
        print("\n".join(clock.report()))
    if show_list:
        for i, j in pairs:
            print(f"{i} {j}")
    return pairs


MESH_SUFFIXES = (".obj", ".ply", ".off", ".stl")


def _mesh_files(paths):
    """The mesh files named by ``paths``, a folder standing for its mesh files (sorted by name);
    and whether there are several outputs to write (more than one path, or a folder)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(
                os.path.join(path, name) for name in os.listdir(path) if name.lower().endswith(MESH_SUFFIXES)
            )
            if not found:
                raise ValueError(f"{path}: a folder with no mesh file ({', '.join(MESH_SUFFIXES)})")
            files += found
        else:
            files.append(path)
    return files, len(paths) > 1 or any(os.path.isdir(path) for path in paths)


def _part(text):
    """``--part I/N`` as ``(I, N)``, ``0 <= I < N``."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected I/N, for example 0/4") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"{text!r}: I/N needs 0 <= I < N")
    return index, count


def _meshes_bar(files, mode):
    """A tqdm bar over several mesh files (on a terminal, or always with ``mode="on"``)."""
    if len(files) < 2 or mode == "off" or (mode == "auto" and not sys.stderr.isatty()):
        return files
    from tqdm import tqdm

    return tqdm(files, desc="meshes", unit=" mesh", file=sys.stderr, dynamic_ncols=True)


def _progress_bar(mode):
    """A tqdm bar fed by ``untangle``'s progress callback (on a terminal, or always with ``mode="on"``)."""
    if mode == "off" or (mode == "auto" and not sys.stderr.isatty()):
        return None, None
    from tqdm import tqdm

    bar = tqdm(desc="phase 1 (untangle)", unit=" steps", file=sys.stderr, dynamic_ncols=True)

    def callback(phase, step, count):
        if phase == "untangle":
            bar.update(step - bar.n)
            bar.set_postfix(crossing_pairs=count)
        else:
            bar.set_description("phase 2 (relax) done")
            bar.set_postfix(newton_steps=step)

    return bar, callback


def _untangle(vertices, faces, label, out_path, overwrite, options, picture=None, progress="auto", verbose=False):
    import numpy as np

    import tritri_jax as tt
    from tritri_jax.io import write_mesh

    pairs_before = tt.find_intersections(vertices, faces)
    before = len(pairs_before)
    print(f"{label}: {len(vertices)} vertices, {len(faces)} triangles, {before} crossing pairs")
    _describe(vertices, faces)
    clock = _CompileClock()
    bar, callback = _progress_bar(progress)
    try:
        result = tt.untangle(vertices, faces, progress=callback, **options)
    finally:
        clock.stop()
        if bar is not None:
            bar.close()
    print(f"  phase 1 steps:        {int(result.iterations)}")
    print(f"  fairing steps:        {int(result.fairing_steps)}")
    print(f"  global moves:         {int(result.global_moves)}")
    print(f"  phase 2 Newton steps: {int(result.relax_iterations)} ({int(result.relax_cg_iterations)} CG iterations)")
    print(f"  crossing pairs after: {int(result.num_intersections)} (exact check)")
    print(f"  converged:            {bool(result.converged)}")
    print(
        f"  max / mean move:      {float(result.max_displacement):.4f} / {float(result.mean_displacement):.4f}"
        " of the bounding-box diagonal"
    )
    print(f"  worst edge ratio:     {float(result.worst_edge_ratio):.3f}")
    compile_seconds = min(clock.seconds, result.seconds)
    print(f"  time:                 {result.seconds - compile_seconds:.2f} s (+ {compile_seconds:.2f} s compiling)")
    if verbose:
        print("  compiling, per function (seconds traced, lowered, compiled):")
        print("\n".join(clock.report()))
    if out_path:
        write_mesh(out_path, np.asarray(result.vertices), faces, overwrite=overwrite)
        print(f"  wrote:                {out_path}")
    if picture:
        from tritri_jax import viz

        after = tt.find_intersections(np.asarray(result.vertices), faces)
        viz.before_after(picture, vertices, np.asarray(result.vertices), faces, pairs_before, after)
        root, ext = os.path.splitext(picture)
        history = np.append(np.asarray(result.history), int(result.num_intersections))  # the final count too
        length = np.asarray(result.history_length)
        viz.convergence(f"{root}_convergence{ext or '.png'}", history, os.path.basename(label), length=length)
        print(f"  pictures:             {picture}, {root}_convergence{ext or '.png'}")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tritri-jax", description="Self-intersections of triangle meshes, in JAX.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="untangle a built-in scene end to end")
    demo.add_argument("--scene", default="two_spheres", help="two_spheres, folded_sheet, twisted_torus, crumpled_sheet")
    demo.add_argument("--size", type=int, default=12, help="scene resolution")
    demo.add_argument("-o", "--output", default="tritri_demo_untangled.obj", help="where to write the result")
    progress_help = "progress bar on stderr: auto (on a terminal), on, off"
    demo.add_argument("--progress", default="auto", choices=["auto", "on", "off"], help=progress_help)
    check = commands.add_parser("check", help="count the crossing pairs of mesh files (exit 1 if any, 2 if unreadable)")
    check.add_argument("mesh", nargs="+", help="OBJ, PLY, OFF or STL files, or folders of them")
    check.add_argument("--list", action="store_true", help="print the crossing face pairs")
    check.add_argument("-v", "--verbose", action="store_true", help="compile time per jitted function")
    untangle = commands.add_parser("untangle", help="make a mesh file intersection-free (exit 1 if it did not)")
    untangle.add_argument("mesh", nargs="+", help="OBJ, PLY, OFF or STL files, or folders of them")
    output_help = "file to write, or a folder when there are several inputs (never an input unless --overwrite)"
    untangle.add_argument("-o", "--output", required=True, help=output_help)
    untangle.add_argument("--overwrite", action="store_true", help="allow replacing an existing output file")
    untangle.add_argument("--picture", help="PNG: before/after with crossing faces in red (+ a convergence plot)")
    untangle.add_argument("--weld", action="store_true", help="merge vertices with identical coordinates first")
    untangle.add_argument("--max-steps", type=int, default=150, help="phase-1 steps per attempt")
    untangle.add_argument("--no-relax", action="store_true", help="skip phase 2 (shape restoration)")
    untangle.add_argument("--method", default="length", choices=["length", "paper"], help="phase-1 route")
    untangle.add_argument("--progress", default="auto", choices=["auto", "on", "off"], help=progress_help)
    untangle.add_argument("-v", "--verbose", action="store_true", help="compile time per jitted function")
    part_help = (
        "I/N: only every N-th mesh file from the I-th (0-based), so that N processes (one per GPU or host) "
        "share a batch; the summary counts this part's meshes"
    )
    for command in (check, untangle):
        command.add_argument("--part", type=_part, help=part_help)
    args = parser.parse_args(argv)
    _setup_jax()
    from tritri_jax import scenes
    from tritri_jax.io import read_mesh

    try:
        if args.command == "demo":
            if args.scene not in scenes.SCENES:
                raise ValueError(f"unknown scene {args.scene!r}; choose from {sorted(scenes.SCENES)}")
            vertices, faces = scenes.SCENES[args.scene](args.size)
            label = f"scene {args.scene} (size {args.size})"
            result = _untangle(vertices, faces, label, args.output, True, {}, progress=args.progress)
            return 0 if bool(result.converged) else 1
        files, several = _mesh_files(args.mesh)
        scope = "meshes"
        if getattr(args, "part", None):
            index, count = args.part
            scope = f"meshes (part {index}/{count} of {len(files)})"
            files, several = files[index::count], True
        if args.command == "check":
            found = errors = 0
            for path in _meshes_bar(files, "auto"):
                try:
                    vertices, faces = read_mesh(path)
                    found += len(_check(vertices, faces, path, args.list, args.verbose)) > 0
                except ValueError as error:
                    if not several:
                        raise
                    errors += 1  # a batch goes on past a bad file, and says so at the end
                    print(f"tritri-jax: error: {error}", file=sys.stderr)
            if several:
                clean = len(files) - found - errors
                print(f"{len(files)} {scope}: {clean} clean, {found} intersecting, {errors} unreadable")
            return 2 if errors else 1 if found else 0
        if several:
            if args.picture:
                raise ValueError("--picture takes one input mesh")
            if os.path.exists(args.output) and not os.path.isdir(args.output):
                raise ValueError(f"{args.output}: is a file; with several inputs -o names a folder")
            os.makedirs(args.output, exist_ok=True)
            outputs = [os.path.join(args.output, os.path.basename(path)) for path in files]
            if len(set(outputs)) < len(outputs):
                raise ValueError("two inputs have the same file name; their outputs would collide in one folder")
        else:
            outputs = [args.output]
        for path, out in zip(files, outputs, strict=True):
            if os.path.abspath(out) == os.path.abspath(path) and not args.overwrite:
                raise ValueError(f"{out}: is the input; pass --overwrite to replace it")
            if os.path.exists(out) and not args.overwrite:
                raise ValueError(f"{out}: exists; pass --overwrite to replace it")
        options = dict(max_steps=args.max_steps, relax=not args.no_relax, method=args.method)
        failed = errors = 0
        for path, out in zip(_meshes_bar(files, args.progress), outputs, strict=True):
            try:
                vertices, faces = read_mesh(path, weld=args.weld)
                progress = "off" if several else args.progress
                result = _untangle(
                    vertices, faces, path, out, args.overwrite, options, args.picture, progress, args.verbose
                )
                failed += not bool(result.converged)
            except ValueError as error:
                if not several:
                    raise
                errors += 1  # a batch goes on past a bad file, and says so at the end
                print(f"tritri-jax: error: {path}: {error}", file=sys.stderr)
        if several:
            print(f"{len(files)} {scope}: {len(files) - failed - errors} untangled, {failed} not, {errors} unreadable")
        return 2 if errors else 1 if failed else 0
    except ValueError as error:
        print(f"tritri-jax: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

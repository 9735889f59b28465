"""The ``tritri-jax`` command line: ``demo`` and ``check``.

Detection runs in float64 (exact predicates settle what float64 cannot). JAX's persistent
compilation cache is turned on (in ``~/.cache/tritri_jax/jax``, or ``$TRITRI_JAX_CACHE``), so a
second run does not pay the compile again.
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


def _load(path):
    import meshio
    import numpy as np

    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        mesh = meshio.read(path)
    except Exception as error:  # meshio raises many kinds
        raise ValueError(f"{path}: cannot read mesh ({error})") from error
    faces = []
    for block in mesh.cells:
        data = np.asarray(block.data)
        if block.type == "triangle":
            faces.append(data)
        elif block.type in ("quad", "polygon") or data.shape[1] > 3:
            faces += [data[:, [0, k, k + 1]] for k in range(1, data.shape[1] - 1)]
    if not faces:
        raise ValueError(f"{path}: no triangle or polygon faces")
    return np.asarray(mesh.points, np.float64)[:, :3], np.concatenate(faces)


def _report(vertices, faces, label):
    import tritri_jax as tt

    start = time.perf_counter()
    pairs = tt.find_intersections(vertices, faces)
    detect_s = time.perf_counter() - start
    energy = float(tt.intersection_energy(vertices, faces))
    length = float(tt.intersection_energy(vertices, faces, measure="length"))
    print(f"{label}: {len(vertices)} vertices, {len(faces)} triangles")
    print(f"  crossing pairs:        {len(pairs)}")
    print(f"  intersection energy:   {energy:.6g}  (sum of (tc0 tc1)^2, Eq. 2)")
    print(f"  intersection length:   {length:.6g}  (length of the intersection curve)")
    print(f"  detection time:        {detect_s:.3f} s (compile included on a cold cache)")
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tritri-jax", description="Triangle-mesh self-intersection tools in JAX.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="detect the crossings of a built-in scene")
    demo.add_argument(
        "--scene", default="two_spheres", help="one of: two_spheres, folded_sheet, twisted_torus, crumpled_sheet"
    )
    demo.add_argument("--size", type=int, default=16, help="scene resolution")
    check = commands.add_parser("check", help="count the crossing pairs of a mesh file (exit 1 if any)")
    check.add_argument("mesh", help="OBJ, PLY, OFF or STL file")
    check.add_argument("--list", action="store_true", help="print the crossing face pairs")
    args = parser.parse_args(argv)
    _setup_jax()
    from tritri_jax import scenes

    try:
        if args.command == "demo":
            if args.scene not in scenes.SCENES:
                raise ValueError(f"unknown scene {args.scene!r}; choose from {sorted(scenes.SCENES)}")
            vertices, faces = scenes.SCENES[args.scene](args.size)
            _report(vertices, faces, f"scene {args.scene} (size {args.size})")
            return 0
        vertices, faces = _load(args.mesh)
        pairs = _report(vertices, faces, args.mesh)
        if args.list:
            for i, j in pairs:
                print(f"{i} {j}")
        return 1 if len(pairs) else 0
    except ValueError as error:
        print(f"tritri-jax: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

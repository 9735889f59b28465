"""Layer 2: device meshes: the one axis that mesh-level functions shard over, and sharded results
read back on the host (from every process of a multi-process run)."""

import jax
import numpy as np


def sharded_axis(device_mesh) -> str:
    """The name of ``device_mesh``'s one axis, or a ``ValueError`` naming what is wrong with it."""
    if not isinstance(device_mesh, jax.sharding.Mesh):
        raise ValueError(f"device_mesh must be a jax.sharding.Mesh, got {type(device_mesh).__name__}")
    if len(device_mesh.axis_names) != 1:
        raise ValueError(f"device_mesh must have one axis, got axes {device_mesh.axis_names}")
    return device_mesh.axis_names[0]


def share_of(rows: int, device_mesh) -> int:
    """Rows of a per-device buffer for work proportional to ``rows``: all of it on one device; on
    several, each holds about ``1 / devices`` of it, so room for twice that share."""
    return rows if device_mesh is None else -(-2 * rows // max(2, device_mesh.size))


def on_each_device(local, device_mesh, args, out_specs):
    """``local(part, *args)`` on every device of ``device_mesh`` (``jax.shard_map``), ``args`` replicated
    and ``part = (device index, device count)``; ``out_specs`` as ``shard_map``'s, with
    ``PartitionSpec(axis)`` written ``"sharded"`` (a leading device axis) and ``()`` replicated."""
    axis = sharded_axis(device_mesh)
    spec = {"sharded": jax.sharding.PartitionSpec(axis), (): jax.sharding.PartitionSpec()}

    def on_device(*args):
        return local((jax.lax.axis_index(axis), device_mesh.shape[axis]), *args)

    return jax.shard_map(
        on_device,
        mesh=device_mesh,
        in_specs=(jax.sharding.PartitionSpec(),) * len(args),
        out_specs=jax.tree.map(spec.__getitem__, out_specs, is_leaf=lambda x: x == () or isinstance(x, str)),
        check_vma=False,  # the broad phase's while-loops' buffers start replicated and end per device
    )(*args)


def to_host(x) -> np.ndarray:
    """``x`` as a numpy array; an array sharded over devices of other processes too is gathered from
    all of them (every process gets the whole array)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)

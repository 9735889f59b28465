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


def to_host(x) -> np.ndarray:
    """``x`` as a numpy array; an array sharded over devices of other processes too is gathered from
    all of them (every process gets the whole array)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)

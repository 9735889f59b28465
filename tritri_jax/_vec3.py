"""3-vector arithmetic in two memory layouts, so that each kernel is written once and runs in both.

- ``AOS``: a vector is an array ``(..., 3)``. Compact graphs: the differentiated kernels use it
  (``jax.grad``, ``jacrev`` and Hessians of them compile in seconds).
- ``SOA``: a vector is a tuple ``(x, y, z)`` of arrays. Under ``jax.vmap`` every operation then
  acts on long 1-D arrays, which XLA's CPU backend vectorises, while reductions over a trailing
  axis of 3 are not: the detection predicates run 4-40 times faster per pair this way
  (``benchmarks/pair_kernels.py``). Its graphs are larger, and reverse-mode derivatives of them
  took minutes to compile, so nothing differentiates through this layout.

Both layouts offer the same functions; scalars (dot products, coordinates) are plain arrays in both.
"""

from functools import reduce

import jax.numpy as jnp


def _minimum(*values):
    return reduce(jnp.minimum, values)


def _maximum(*values):
    return reduce(jnp.maximum, values)


def _any_of(*flags):
    return reduce(jnp.logical_or, flags)


def _all_of(*flags):
    return reduce(jnp.logical_and, flags)


class AOS:
    """Vectors as ``(..., 3)`` arrays."""

    minimum, maximum, any_of, all_of = map(staticmethod, (_minimum, _maximum, _any_of, _all_of))

    @staticmethod
    def points(t):
        """A triangle ``(..., 3, 3)`` (rows are vertices) as three vectors."""
        return t[..., 0, :], t[..., 1, :], t[..., 2, :]

    @staticmethod
    def point(p):
        """A point ``(..., 3)`` as a vector."""
        return p

    @staticmethod
    def coord(p, c):
        return p[..., c]

    @staticmethod
    def vector(x, y, z):
        return jnp.stack([x, y, z], axis=-1)

    @staticmethod
    def add(a, b):
        return a + b

    @staticmethod
    def sub(a, b):
        return a - b

    @staticmethod
    def scale(a, s):
        return a * jnp.expand_dims(s, -1)

    @staticmethod
    def dot(a, b):
        return jnp.sum(a * b, axis=-1)

    @staticmethod
    def cross(a, b):
        return jnp.cross(a, b)

    @staticmethod
    def where(condition, a, b):
        return jnp.where(jnp.expand_dims(condition, -1), a, b)


class SOA:
    """Vectors as ``(x, y, z)`` tuples of arrays."""

    minimum, maximum, any_of, all_of = map(staticmethod, (_minimum, _maximum, _any_of, _all_of))

    @staticmethod
    def points(t):
        """A triangle ``(..., 3, 3)`` (rows are vertices) as three vectors."""
        return tuple(SOA.point(t[..., i, :]) for i in range(3))

    @staticmethod
    def point(p):
        """A point ``(..., 3)`` as a vector."""
        return p[..., 0], p[..., 1], p[..., 2]

    @staticmethod
    def coord(p, c):
        return p[c]

    @staticmethod
    def vector(x, y, z):
        return x, y, z

    @staticmethod
    def add(a, b):
        return a[0] + b[0], a[1] + b[1], a[2] + b[2]

    @staticmethod
    def sub(a, b):
        return a[0] - b[0], a[1] - b[1], a[2] - b[2]

    @staticmethod
    def scale(a, s):
        return a[0] * s, a[1] * s, a[2] * s

    @staticmethod
    def dot(a, b):
        return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]

    @staticmethod
    def cross(a, b):
        return a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]

    @staticmethod
    def where(condition, a, b):
        return tuple(jnp.where(condition, x, y) for x, y in zip(a, b, strict=True))


def pick(ops, k, *options):
    """``options[k]`` (vectors) for an integer array ``k``: a chain of selects, every option evaluated."""
    out = options[-1]
    for i in range(len(options) - 2, -1, -1):
        out = ops.where(k == i, options[i], out)
    return out

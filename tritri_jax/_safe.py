"""Helpers whose values *and* derivatives of every order stay finite.

Each one uses the "double where" pattern: the unsafe operation is evaluated on a
harmless substitute where it would blow up, and the result is masked afterwards, so
that neither the primal nor any tangent/cotangent ever sees ``0/0`` or ``sqrt(0)'``.
A masked-out branch must not produce ``inf`` derivatives either (``0 * inf`` is NaN
in the backward pass), which is why the thresholds below are not just ``!= 0``.
"""

import jax.numpy as jnp


def eps_of(x):
    """Machine epsilon of ``x``'s floating dtype."""
    return jnp.finfo(jnp.result_type(x)).eps


def safe_divide(numerator, denominator, ok=None):
    """``numerator / denominator`` where ``ok`` (default: denominator != 0), else 0 with zero derivatives."""
    if ok is None:
        ok = denominator != 0
    return jnp.where(ok, numerator / jnp.where(ok, denominator, 1), 0)


def safe_norm(x, axis=-1):
    """Euclidean norm along ``axis`` with finite derivatives at ``x = 0`` (where it is 0)."""
    sq = jnp.sum(x * x, axis=axis)
    ok = sq > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1)), 0)


def safe_normalize(x, min_norm_sq, axis=-1):
    """``(x / |x|, ok)`` with ``ok = |x|^2 > min_norm_sq``; the zero vector with zero derivatives elsewhere.

    ``min_norm_sq`` bounds the derivatives (they grow like ``1/|x|`` per order), so it must be chosen
    by the caller from the scale of ``x``.
    """
    sq = jnp.sum(x * x, axis=axis, keepdims=True)
    ok = sq > min_norm_sq
    unit = jnp.where(ok, x / jnp.sqrt(jnp.where(ok, sq, 1)), 0)
    return unit, jnp.squeeze(ok, axis)

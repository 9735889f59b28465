"""jaxtyping aliases shared by every layer."""

from jaxtyping import Array, Bool, Float, Int

Triangle = Float[Array, "3 3"]
"""One triangle: three rows, one vertex each."""

Vertices = Float[Array, "V 3"]
Faces = Int[Array, "F 3"]
Pairs = Int[Array, "P 2"]
Scalar = Float[Array, ""]
BoolScalar = Bool[Array, ""]

__all__ = ["Array", "Bool", "BoolScalar", "Faces", "Float", "Int", "Pairs", "Scalar", "Triangle", "Vertices"]

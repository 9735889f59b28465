"""Buffer and shape sizes: the ladder every compiled stage rounds its sizes up to, so that meshes and
pair lists of nearby sizes share one compiled executable."""

import math


def bucket(n: int) -> int:
    """``n`` rounded up to a power of two, at least 1024: repeated calls reuse a few compiled shapes."""
    return max(1024, 1 << math.ceil(math.log2(max(n, 1))))


def default_capacity(num_faces: int) -> int:
    """Broad-phase slots for a mesh of ``num_faces`` faces: ``16 F``, bucketed."""
    return bucket(16 * num_faces)

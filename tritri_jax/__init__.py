"""tritri_jax: differentiable triangle-triangle intersection energy and mesh untangling in JAX.

Layers, bottom to top (each module imports only those above it in this list):
``_kernels`` (one pair) -> ``_broad_phase`` (spatial hash) -> ``_mesh_energy`` (sum over pairs).
"""

from . import scenes as scenes
from ._broad_phase import CandidatePairs as CandidatePairs
from ._broad_phase import candidate_pairs as candidate_pairs
from ._kernels import GaussNewtonFactor as GaussNewtonFactor
from ._kernels import Interval as Interval
from ._kernels import crossing_length as crossing_length
from ._kernels import gauss_newton_factor as gauss_newton_factor
from ._kernels import intersects as intersects
from ._kernels import interval as interval
from ._kernels import pair_energy as pair_energy
from ._kernels import pair_energy_grad_hessian as pair_energy_grad_hessian
from ._mesh_energy import PairSystem as PairSystem
from ._mesh_energy import find_intersections as find_intersections
from ._mesh_energy import hessian_vector_product as hessian_vector_product
from ._mesh_energy import intersection_energy as intersection_energy
from ._mesh_energy import pair_system as pair_system
from ._newton import NewtonResult as NewtonResult
from ._newton import newton_cg as newton_cg
from ._untangle import UntangleOptions as UntangleOptions
from ._untangle import UntangleResult as UntangleResult
from ._untangle import untangle as untangle

__version__ = "0.1.0"

"""tritri_jax: differentiable triangle-triangle intersection energy and mesh untangling in JAX.

Layers, bottom to top (each module imports only modules before it in this list):

1. one pair: ``_safe``, ``_vec3``, ``_kernels`` (interval, predicates, energy), ``_pair_hessian``
   (the Gauss-Newton factor and dense Hessians), ``_distance``
   (primitive distances, IPC's barrier), ``_exact`` (integer orientation predicates);
2. broad phase: ``_sizes`` (the shape ladder), ``_devices`` (device meshes), ``_broad_phase``
   (spatial hash grid);
3. over a mesh: ``_mesh_energy`` (checks, gather / scatter, energies), ``_topology`` (coincident
   vertices, the mesh a solver moves, ``mesh_report``), ``_detect`` (the detection pipeline),
   ``_contours`` (intersection curves and the regions they bound),
   ``_barrier`` (the barrier over near pairs), ``_elastic`` (springs, bending, pull);
4. solvers: ``_newton``, ``_multigrid``; ``_fairing`` and ``_global`` (phase 1's escalations when
   descent stalls), ``_phase1`` (untangle: descent on the curve length),
   ``_neighbours`` and ``_relax`` (relax: Newton on elastic + barrier), ``_paper_route``;
5. the operator: ``_memory``, ``_untangle`` (the solver and its VJP), ``_operator`` (``untangle``
   eagerly and inside ``jit`` / ``vmap`` / ``grad``, ``Untangler``);
6. the user's edges: ``scenes``, ``io``, ``viz``, ``cli``.
"""

from . import scenes as scenes
from ._broad_phase import CandidatePairs as CandidatePairs
from ._broad_phase import candidate_pairs as candidate_pairs
from ._contours import CurveRegions as CurveRegions
from ._contours import IntersectionCurve as IntersectionCurve
from ._contours import curve_regions as curve_regions
from ._contours import intersection_curves as intersection_curves
from ._detect import find_intersections as find_intersections
from ._kernels import Interval as Interval
from ._kernels import crossing_length as crossing_length
from ._kernels import intersects as intersects
from ._kernels import interval as interval
from ._kernels import pair_energy as pair_energy
from ._mesh_energy import PairSystem as PairSystem
from ._mesh_energy import hessian_vector_product as hessian_vector_product
from ._mesh_energy import intersection_energy as intersection_energy
from ._mesh_energy import pair_system as pair_system
from ._newton import NewtonResult as NewtonResult
from ._newton import newton_cg as newton_cg
from ._operator import Untangler as Untangler
from ._operator import untangle as untangle
from ._pair_hessian import GaussNewtonFactor as GaussNewtonFactor
from ._pair_hessian import gauss_newton_factor as gauss_newton_factor
from ._pair_hessian import pair_energy_grad_hessian as pair_energy_grad_hessian
from ._topology import MeshReport as MeshReport
from ._topology import mesh_report as mesh_report
from ._untangle import UntangleOptions as UntangleOptions
from ._untangle import UntangleResult as UntangleResult

__version__ = "0.1.0"

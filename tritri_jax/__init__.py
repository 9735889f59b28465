"""tritri_jax: differentiable triangle-triangle intersection energy and mesh untangling in JAX."""

from ._kernels import GaussNewtonFactor as GaussNewtonFactor
from ._kernels import Interval as Interval
from ._kernels import crossing_length as crossing_length
from ._kernels import gauss_newton_factor as gauss_newton_factor
from ._kernels import interval as interval
from ._kernels import intersects as intersects
from ._kernels import pair_energy as pair_energy
from ._kernels import pair_energy_grad_hessian as pair_energy_grad_hessian

__version__ = "0.1.0"

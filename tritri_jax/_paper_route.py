"""Layer 4: the paper's route, for comparison: Newton on elastic + kappa * sum T (the paper's energy,
Eq. 2) with its Gauss-Newton pair blocks, CG, and kappa continuation (``untangle(method="paper")``)."""

import jax.numpy as jnp
from jax import lax

from ._broad_phase import candidate_pairs
from ._elastic import elastic_energy, elastic_gauss_newton
from ._memory import releasable_jit
from ._mesh_energy import hessian_vector_product, pair_mask, pair_system, pairs_energy
from ._neighbours import RelaxSetup
from ._newton import newton_cg
from ._phase1 import crossing_pairs


def paper_route(theta, setup: RelaxSetup, capacities, kappa, *, rounds: int, iters: int, growth: float, cg_iters: int):
    """The paper's route: Newton on elastic + kappa * sum T, Gauss-Newton pair blocks, CG, a line
    search that scores trial points with the pairs detected there, kappa continuation. No step is
    rejected for creating crossings (the paper has no such rule); the step is capped at 0.5 h."""
    rest = setup.rest(theta)

    def near(y):
        candidates = candidate_pairs(lax.stop_gradient(y), setup.faces, capacity=capacities.candidates)
        return candidates.pairs, pair_mask(candidates)

    def one_round(carry, _):
        x, kappa = carry

        def energy(y):
            elastic = elastic_energy(y, rest, bending=setup.bending, pull=setup.pull)
            return elastic + kappa * pairs_energy(y, setup.faces, *near(y)) / rest.h**4

        def gauss_newton(y):
            elastic = elastic_gauss_newton(y, rest, bending=setup.bending, pull=setup.pull)
            system = pair_system(y, setup.faces, *near(y))
            return lambda v: elastic(v) + kappa / rest.h**4 * hessian_vector_product(system, v)

        result = newton_cg(
            energy,
            x,
            hessian=gauss_newton,
            max_iters=iters,
            cg_iters=cg_iters,
            max_step=0.5 * rest.h,
            tol=1e-10 / rest.h,
            damping=1e-10,
        )
        pairs, crossing, _ = crossing_pairs(result.x, setup.faces, capacities)
        length = pairs_energy(result.x, setup.faces, pairs, crossing, measure="length")
        count = jnp.sum(crossing).astype(jnp.int32)
        return (result.x, kappa * growth), (count, length, result.iterations, result.cg_iterations)

    (x, _), (history, lengths, newton, cg_total) = lax.scan(one_round, (theta, kappa), None, length=rounds)
    return x, (history, lengths), jnp.sum(newton), jnp.sum(cg_total)


paper_route_jit = releasable_jit(paper_route, static_argnames=("capacities", "rounds", "iters", "cg_iters"))

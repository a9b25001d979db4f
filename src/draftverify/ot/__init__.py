"""Optimal transport for multi-draft verification with i.i.d. drafts (seed 001, Global Resolution).

``optimal_acceptance`` / ``optimal_subset``: alpha* and H* (Theorem 3.1). ``solve``: a
:class:`TransportPlan` by ``lp``, ``maxflow``, ``maxflow-cs`` or ``gr``. numpy/scipy (and
OR-Tools for max-flow); inputs are validated by :func:`draftverify.probs.check_distributions`;
arrays in, results out.
"""

from ._networks import NetworkTooLarge
from ._plan import TransportPlan
from ._solve import MAX_DRAFTS, METHODS, solve
from ._subset import optimal_acceptance, optimal_subset

__all__ = ["MAX_DRAFTS", "METHODS", "NetworkTooLarge", "TransportPlan", "optimal_acceptance", "optimal_subset", "solve"]

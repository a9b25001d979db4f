"""``solve``: one entry point over the four OTLP methods (a registry, not an if/elif chain)."""

from __future__ import annotations

import numbers
import time
from functools import partial

from . import _gr, _networks
from ._plan import Decomposed, TransportPlan
from ._subset import Instance, make_instance

__all__ = ["solve", "METHODS", "MAX_DRAFTS"]

# The solvers weigh a drafted set by multinomial coefficients n! / (m_0! m_1! ... m_s!) in float64
# (``_networks.set_masses``, ``_objectives``): 170! is the largest factorial below 2^1024.
MAX_DRAFTS = 170
_DEFAULT_LIMITS = {"max_arcs": 20_000_000, "max_iter": 50, "fallback": "maxflow-cs"}


def _full(method: str, instance: Instance, tol: float, limits: dict):
    return _networks.solve_full(instance, method, limits["max_arcs"])


def _complementary(instance: Instance, tol: float, limits: dict):
    outer = partial(_networks.outer_network, max_arcs=limits["max_arcs"])
    inner = partial(_networks.inner_network, max_arcs=limits["max_arcs"])
    return Decomposed(instance, outer, inner, None, None)


def _global_resolution(instance: Instance, tol: float, limits: dict):
    outer = partial(_gr.outer_part, tol=tol, max_iter=limits["max_iter"])
    inner = partial(_gr.inner_part, tol=tol, max_iter=limits["max_iter"])
    fallback = None
    if limits["fallback"] is not None:
        fallback = (
            partial(_networks.outer_network, max_arcs=limits["max_arcs"]),
            partial(_networks.inner_network, max_arcs=limits["max_arcs"]),
        )
    return Decomposed(instance, outer, inner, fallback, limits["fallback"])


METHODS = {
    "lp": partial(_full, "lp"),
    "maxflow": partial(_full, "maxflow"),
    "maxflow-cs": _complementary,
    "gr": _global_resolution,
}


def _whole_number(value) -> bool:
    """An integer >= 1, or a float of such a value (``max_arcs=2e7``); never a bool, NaN or inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return value >= 1 and (isinstance(value, numbers.Integral) or float(value).is_integer())


def solve(target_probs, draft_probs, num_drafts: int, method: str = "gr", tol: float = 1e-4, **limits) -> TransportPlan:
    """An optimal transport for ``num_drafts`` i.i.d. drafts from ``draft_probs`` to ``target_probs``.

    Methods (seed 001): ``lp`` - relaxed OTLP (eq. 2) by HiGHS, completed by eq. 3; ``maxflow`` -
    the same as a bipartite max-flow (section 5.2, OR-Tools); ``maxflow-cs`` - the outer and inner
    networks of complementary slackness (section 5.3, Theorem 5.1), each solved only when a drafted
    tuple needs it; ``gr`` - Global Resolution (section 6, Algorithm 1; see ``_gr`` for what we
    changed), approximate within ``tol`` (target L1 error <= 3 tol, acceptance within 2 tol).

    Every method works on the draft's support (seed 001 appendix N): with a top-k draft that is the
    top-k set, and tokens outside it only receive residual mass. ``tol`` matters only for ``gr``.

    ``num_drafts`` is at most :data:`MAX_DRAFTS` (170; ``optimal_acceptance`` has no such limit).
    limits: ``max_arcs`` (network size above which the network methods raise ``ValueError``,
    default 2e7), ``max_iter`` (Newton iterations per ``gr`` system, default 50), ``fallback``
    (``"maxflow-cs"`` or None: the exact method serving a ``gr`` system that did not converge).
    """
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"unknown OT method {method!r}; known: {', '.join(METHODS)}")
    unknown = sorted(set(limits) - set(_DEFAULT_LIMITS))
    if unknown:
        raise ValueError(f"unknown limit(s) {', '.join(unknown)}; known: {', '.join(_DEFAULT_LIMITS)}")
    settings = {**_DEFAULT_LIMITS, **limits}
    if isinstance(tol, bool) or not (isinstance(tol, numbers.Real) and 0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    if settings["fallback"] not in ("maxflow-cs", None):
        raise ValueError(f"fallback must be 'maxflow-cs' or None, got {settings['fallback']!r}")
    for key in ("max_iter", "max_arcs"):
        if not _whole_number(settings[key]):
            raise ValueError(f"{key} must be an integer >= 1, got {settings[key]!r}")
        settings[key] = int(settings[key])
    start = time.perf_counter()
    instance = make_instance(target_probs, draft_probs, num_drafts)
    if instance.num_drafts > MAX_DRAFTS:
        raise ValueError(
            f"num_drafts = {instance.num_drafts} is above ot.solve's limit of {MAX_DRAFTS}: the solvers weigh "
            f"drafted tuples by multinomial coefficients up to n!, and {MAX_DRAFTS + 1}! overflows float64 "
            "(ot.optimal_acceptance has no such limit)"
        )
    solution = METHODS[method](instance, float(tol), settings)
    return TransportPlan(
        method=method,
        num_drafts=instance.num_drafts,
        tol=float(tol),
        optimal_acceptance=instance.optimal_acceptance,
        setup_seconds=time.perf_counter() - start,
        _solution=solution,
        _draft=instance.draft,
    )

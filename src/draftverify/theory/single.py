"""One draft, token-level verification: tokens per step, speedup and the optimal draft length.

Seed 002 ("Speculative decoding, formally", section "How much do we gain?" and "The metrics that
matter"); its p is our target, its q our draft, its gamma our ``draft_length`` L, its rho our
``cost_ratio`` = (cost of one draft forward) / (cost of one target forward). The closed forms model
every drafted token as accepted independently with one rate ``acceptance`` = 1 - TV(target, draft);
:func:`acceptance_profile` gives the exact value when the rate depends on the prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _validate

__all__ = [
    "tokens_per_step",
    "speedup",
    "OptimalDraftLength",
    "optimal_draft_length",
    "AcceptanceProfile",
    "acceptance_profile",
]


def tokens_per_step(acceptance, draft_length) -> np.ndarray:
    """Expected tokens committed per target call, (1 - a^{L+1}) / (1 - a); L + 1 when a = 1.

    Seed 002, "Expected tokens per step" (Leviathan et al. 2023, eq. 1): accepted tokens plus the
    one correction or bonus token, when each of the L drafted tokens is accepted independently with
    the same probability a. Exact only for a constant rate (see :func:`acceptance_profile`).
    Broadcasts over array arguments.
    """
    a = _validate.rate(acceptance, "acceptance")
    length = _validate.count(draft_length, "draft_length")
    below_one = a < 1
    geometric = (1 - a ** (length + 1)) / np.where(below_one, 1 - a, 1.0)
    return np.where(below_one, geometric, length + 1.0)


def speedup(acceptance, cost_ratio, draft_length) -> np.ndarray:
    """Wall-clock speedup S = k / (1 + L rho), k = :func:`tokens_per_step` (seed 002, boxed formula
    in "Wall-clock speedup"). Assumes one verification costs one target forward."""
    rho = _validate.rate(cost_ratio, "cost_ratio", high=np.inf)
    length = _validate.count(draft_length, "draft_length")
    return tokens_per_step(acceptance, length) / (1 + length * rho)


@dataclass(frozen=True)
class OptimalDraftLength:
    """``continuous``: the root L* of seed 002's optimality equation (0 if speculation does not pay
    at any L > 0); ``integer``: the best integer L; ``speedup``: S at ``integer``."""

    continuous: float
    integer: int
    speedup: float


def _optimality_gap(length: float, a: float, rho: float) -> float:
    # seed 002, dS/dL = 0:  -a^{L+1} ln a (1 + L rho) - rho (1 - a^{L+1}); same sign as dS/dL
    power = a ** (length + 1)
    return -power * math.log(a) * (1 + length * rho) - rho * (1 - power)


def optimal_draft_length(acceptance: float, cost_ratio: float) -> OptimalDraftLength:
    """The draft length maximising S(L) = (1 - a^{L+1}) / ((1 - a)(1 + L rho)).

    Seed 002, "Optimal draft length": the root of -a^{L+1} ln a (1 + L rho) = rho (1 - a^{L+1}).
    S is a concave function over a positive affine one, hence quasi-concave in L: the root is the
    unique maximiser and the integer optimum is its floor or ceiling. Needs 0 <= a < 1 and
    rho > 0 (with a = 1 or rho = 0, S grows without bound in L).
    """
    a = float(_validate.rate(acceptance, "acceptance", open_high=True))
    rho = float(_validate.rate(cost_ratio, "cost_ratio", high=np.inf))
    if rho == 0:
        raise ValueError("cost_ratio must be > 0: with free drafts the speedup grows without bound in L")
    if a == 0 or _optimality_gap(0.0, a, rho) <= 0:
        return OptimalDraftLength(continuous=0.0, integer=0, speedup=1.0)
    high = 1.0
    while _optimality_gap(high, a, rho) > 0:
        high *= 2
    from scipy.optimize import brentq  # scipy on use: the engine imports this package, and generate needs no scipy

    root = brentq(_optimality_gap, 0.0, high, args=(a, rho), xtol=1e-12, rtol=1e-12)
    candidates = np.array([math.floor(root), math.ceil(root)])
    values = speedup(a, rho, candidates)
    best = int(np.argmax(values))  # ties go to the shorter draft
    return OptimalDraftLength(continuous=root, integer=int(candidates[best]), speedup=float(values[best]))


@dataclass(frozen=True)
class AcceptanceProfile:
    """Exact acceptance counts of token-level SD over one block.

    ``at_least[i - 1]`` = P(A >= i) for i = 1..L; ``expected_accepted`` = E[A] = sum_i P(A >= i);
    ``tokens_per_step`` = E[A] + 1 (every call also emits one correction or bonus token).
    """

    at_least: np.ndarray  # [L]
    expected_accepted: float
    tokens_per_step: float


def path_products(target_tables: list[np.ndarray], draft_tables: list[np.ndarray]) -> list[np.ndarray]:
    """C(x^i) = prod_{j <= i} min(T, D)(x_j | x^{j-1}): the probability that token-level SD drafts
    x^i and accepts all of it (``[V] * i`` for i = 1..L). Inputs already validated."""
    products = [np.minimum(target_tables[0], draft_tables[0])]
    for target, draft in zip(target_tables[1:], draft_tables[1:]):
        products.append(products[-1][..., None] * np.minimum(target, draft))
    return products


def acceptance_profile(target_tables, draft_tables) -> AcceptanceProfile:
    """Exact P(A >= i) and E[A] for token-level SD (Leviathan et al. 2023) with prefix-dependent
    acceptance: E[A] = sum_{i=1..L} sum_{x^i} prod_{j<=i} min(T, D)(x_j | x^{j-1}).

    This is the general form of seed 002's (1 - a^{L+1}) / (1 - a), which it reduces to when
    1 - TV(T(.|x^j), D(.|x^j)) = a at every prefix. Tables: ``tables[i]`` of shape ``[V] * (i + 1)``
    holds the conditionals of token i + 1 given the block's first i tokens.
    """
    target, draft = _validate.table_pair(target_tables, draft_tables)
    at_least = np.array([product.sum() for product in path_products(target, draft)])
    expected = float(at_least.sum())
    return AcceptanceProfile(at_least=at_least, expected_accepted=expected, tokens_per_step=expected + 1)

"""The formulas of a draft law D coupled to a target law T, each written once.

The verifiers (:mod:`draftverify.verify`), the closed forms (:mod:`draftverify.theory`) and the
training measurements (:mod:`draftverify.train`) import them from here. Rows are along the last
axis, ``[..., V]``. They take numpy arrays or torch tensors (each computed by its own library)
unless they say otherwise, and check nothing: public callers validate first.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

__all__ = [
    "acceptance_probability",
    "any_accepted",
    "correction_weights",
    "kseq_beta",
    "kseq_rho",
    "overlap",
    "total_variation",
]


def _minimum(a, b):
    return torch.minimum(a, b) if isinstance(a, torch.Tensor) else np.minimum(a, b)


def overlap(target, draft):
    """sum_x min(T(x), D(x)) = 1 - TV(T, D): the acceptance of a maximal coupling, that of
    token-level speculative sampling at one position (seed 000 section 2 and Theorem 3.1;
    Leviathan et al. 2023, section 3.5). ``[..., V] -> [...]``."""
    return _minimum(target, draft).sum(-1)


def total_variation(target, draft):
    """TV(T, D) = 1/2 sum_x |T(x) - D(x)|. ``[..., V] -> [...]``."""
    return 0.5 * abs(target - draft).sum(-1)


def any_accepted(beta, num_drafts: int):
    """1 - (1 - beta)^K: the probability that one of K independent tests of success probability
    beta succeeds (K-SEQ's acceptance, Sun et al. 2023, with beta = beta(rho*))."""
    return 1 - (1 - beta) ** num_drafts


def kseq_beta(target, draft, rho):
    """beta(rho) = sum_x min(D(x), T(x) / rho) (Sun et al. 2023, K-SEQ; seed 004 section 3);
    ``rho`` [...] broadcasts against the leading axes of ``[..., V]``."""
    return _minimum(draft, target / rho[..., None]).sum(-1)


def acceptance_probability(target_at: torch.Tensor, draft_at: torch.Tensor, withheld: float) -> torch.Tensor:
    """(1 - lambda) min(T(x), D(x)) / D(x) = (1 - lambda) min(1, T(x)/D(x)) at drafted tokens x
    (seed 000, Proposition 3.2; lambda = ``withheld``, 0 for Leviathan et al. 2023)."""
    ratio = (target_at / draft_at).clamp_(max=1.0)  # min(1, T/D)
    return (1.0 - withheld) * ratio if withheld else ratio


def correction_weights(target_probs: torch.Tensor, draft_probs: torch.Tensor, withheld: float) -> torch.Tensor:
    """Unnormalised law of the correction token, r + sigma with r = (T - D)_+ and
    sigma = lambda min(T, D) (seed 000, Proposition 3.2; lambda = ``withheld``); lambda = 0 is
    Leviathan et al. (2023), Algorithm 1: (T - D)_+. Rows ``[..., V]``; with D = 0 it is T."""
    residual = (target_probs - draft_probs).clamp_(min=0.0)  # r
    if withheld:
        residual += torch.minimum(target_probs, draft_probs).mul_(withheld)  # r + sigma
    return residual


def kseq_rho(target: np.ndarray, draft: np.ndarray, num_drafts: int) -> np.ndarray:
    """The K-SEQ scale rho* in [1, K] solving 1 - (1 - beta(rho))^K = rho beta(rho), beta(rho) =
    sum_x min(D(x), T(x) / rho) (Sun et al. 2023, SpecTr; seed 004 section 3), vectorised over the
    leading axes of ``[..., V]`` float64 numpy arrays (unchecked: validated callers only;
    :func:`draftverify.theory.kseq_rho` checks its inputs and calls this; the ``kseq`` verifier
    calls it at every multi-candidate position).

    1 - (1 - beta)^K is non-increasing and rho beta non-decreasing in rho, so the difference g has
    one sign change in [1, K]. Between two consecutive likelihood ratios T(x) / D(x), beta(rho) =
    A + B / rho with A the draft mass of the tokens whose ratio is at least rho and B the target mass
    of the others. Tokens of ratio <= 1 are in B and those of ratio >= K in A for every rho in
    [1, K]; sorting the few ratios inside (1, K) gives g at each of them, hence the segment holding
    the root, where a bisection on the closed form runs in floats (no pass over V per step: the
    bisection over [1, K] with the full sum took 80 of them; sorting all V ratios cost 2-5 ms a call at
    V = 49,152). The returned rho is on the feasible side under the full sum (rho >= rho*,
    1 - (1 - beta)^K <= rho beta), as the general residual below needs: a closed-form root that
    rounding leaves infeasible is moved up in steps that double from 2^-44 rho, up to K, which
    1 - (1 - beta)^K <= K beta makes feasible (a rounding excess at K is left, as the bisection
    did). rho = 1 exactly when it is feasible (D = T), so K-SEQ then accepts every candidate.
    """
    k = float(num_drafts)

    def gap(beta, rho, power=operator.pow):  # g = 1 - (1 - beta)^K - rho beta, arrays or floats
        return 1 - power(1 - beta, num_drafts) - rho * beta

    def excess(rho: np.ndarray) -> np.ndarray:  # g with the full sum, as the verifier forms beta
        return gap(kseq_beta(target, draft, rho), rho)

    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = target / draft  # T / D: inf where D = 0 < T, nan where both are 0 (in no sum below)
    fixed_below = np.where(ratio <= 1, target, 0.0).sum(-1)  # B's tokens for every rho in [1, K]
    fixed_above = np.where(ratio >= k, draft, 0.0).sum(-1)  # A's
    ratio, masses = _inside(ratio, target, draft, k)  # [..., m] ascending, inf-padded; [2, ..., m] their T, D
    split = np.zeros(masses.shape[:-1] + (masses.shape[-1] + 1,))  # [2, ..., m + 1]: B and A before each ratio
    np.cumsum(masses, -1, out=split[..., 1:])  # the padding adds 0: rows alone or together alike
    split[0] += fixed_below[..., None]
    split[1] = fixed_above[..., None] + (split[1, ..., -1:] - split[1])
    # g at each ratio inside (1, K), the tokens before it below (T / rho), the rest above (D)
    inside = ratio < k
    at = np.where(inside, ratio, 1.0)
    beta = split[1, ..., :-1] + split[0, ..., :-1] / at
    infeasible = inside & (gap(beta, at, _power) > 0)  # _power: ** costs a pow call per entry
    high = np.where(inside & ~infeasible, ratio, k).min(-1)  # [...] the first feasible ratio, or K
    low = np.where(infeasible, ratio, 1.0).max(-1)  # the last infeasible ratio, or 1
    below = (ratio <= low[..., None]).sum(-1, keepdims=True)  # tokens below throughout (low, high)
    below_mass, above_mass = np.take_along_axis(split, below[None], -1)[..., 0]  # B, A
    rho = np.empty(low.shape)
    for i, (lo, hi, a, b) in enumerate(zip(low.ravel().tolist(), high.ravel().tolist(),
                                           above_mass.ravel().tolist(), below_mass.ravel().tolist())):
        middle = 0.5 * (lo + hi)
        while lo < middle < hi:  # to float resolution
            if gap(a + b / middle, middle) <= 0:
                hi = middle
            else:
                lo = middle
            middle = 0.5 * (lo + hi)
        rho.flat[i] = hi
    step = rho * 2.0**-44
    while np.any(infeasible := (excess(rho) > 0) & (rho < k)):  # K is feasible (Bernoulli's inequality)
        rho, step = np.where(infeasible, np.minimum(rho + step, k), rho), 2 * step
    return np.where(excess(np.ones(rho.shape)) <= 0, 1.0, rho)


def _inside(ratio: np.ndarray, target: np.ndarray, draft: np.ndarray, k: float):
    """The ratios inside (1, K), ascending (``[..., m]``, m the most any row has, at least 1), and
    their tokens' T and D (``[2, ..., m]``); each row padded after its own with ratio inf and masses 0."""
    inside = (ratio > 1) & (ratio < k)
    count = inside.sum(-1)
    slots = np.arange(max(int(count.max(initial=0)), 1)) < count[..., None]  # [..., m], row-major as the mask
    packed = np.zeros((3,) + slots.shape)
    packed[0] = np.inf
    packed[:, slots] = ratio[inside], target[inside], draft[inside]
    order = np.argsort(packed[0], -1)[None]
    packed = np.take_along_axis(packed, order, -1)
    return packed[0], packed[1:]


def _power(x: np.ndarray, n: int) -> np.ndarray:
    """``x ** n`` for an integer n >= 1 by repeated squaring (numpy's ``**`` calls pow per entry)."""
    result = None
    while n:
        if n & 1:
            result = x if result is None else result * x
        n >>= 1
        if n:
            x = x * x
    return result

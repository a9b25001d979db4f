"""The formulas of a draft law D coupled to a target law T, each written once.

The verifiers (:mod:`draftverify.verify`), the closed forms (:mod:`draftverify.theory`) and the
training measurements (:mod:`draftverify.train`) import them from here. Rows are along the last
axis, ``[..., V]``; they check nothing: public callers validate first.
"""

from __future__ import annotations

import torch

__all__ = ["acceptance_probability", "correction_weights"]


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

"""Token-level couplings: maximal acceptance, and the accounting of sub-maximal couplings.

Seed 000 ("Order-optimal draft-verify decoding", sections 2-3); its p is our draft, its q our
target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formulas import overlap
from . import _validate

__all__ = [
    "maximal_acceptance",
    "SubmaximalStep",
    "submaximal_step",
    "RejectionAccounting",
    "rejection_accounting",
]


def maximal_acceptance(target_probs, draft_probs) -> np.ndarray:
    """Acceptance of a maximal coupling, sum_x min(T, D) = 1 - TV(T, D) (seed 000 section 2 and
    Theorem 3.1; seed 002 "acceptance rate is one minus the TV distance"). Shape ``[...]`` for
    inputs ``[..., V]``. Token-level SD attains it at every prefix."""
    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    return overlap(target, draft)


@dataclass(frozen=True)
class SubmaximalStep:
    """One step of the rejection-correction scheme of seed 000, Proposition 3.2.

    ``accept_probs`` [..., V]: probability of accepting a drafted x, alpha(x) / D(x) (0 where
    D(x) = 0); ``correction`` [..., V]: the law of the correction token, (r + sigma) / (t + eps)
    (the target where t + eps = 0); ``rejection`` [...]: t + eps; ``extra_rejection`` [...]: eps,
    the rejections beyond a maximal coupling; ``output`` [..., V]: the exact law of the emitted
    token, alpha + (t + eps) * correction, which equals the target.
    """

    accept_probs: np.ndarray
    correction: np.ndarray
    rejection: np.ndarray
    extra_rejection: np.ndarray
    output: np.ndarray


def submaximal_step(target_probs, draft_probs, withheld) -> SubmaximalStep:
    """The sub-maximal coupling with correction of seed 000, Proposition 3.2 (proof sketch).

    With c = min(T, D), r = (T - D)_+, t = TV(T, D) and a withheld overlap 0 <= sigma <= c
    (``withheld``, shape ``[..., V]``), accept the drafted x with probability alpha(x) / D(x),
    alpha = c - sigma; on rejection emit z ~ (r + sigma) / (t + eps), eps = sum sigma. The emitted
    token has law alpha + r + sigma = T (exact for every sigma) and the rejection probability is
    t + eps, eps more than SD's. Seed 000 writes the agreement as 1 - TV - eps_n; here eps is
    given through the mass sigma it removes from the overlap.
    """
    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    sigma = _validate.as_float_array(withheld, "withheld")
    common = np.minimum(target, draft)  # c
    if sigma.shape != target.shape:
        raise ValueError(f"withheld: expected shape {target.shape}, got {sigma.shape}")
    if np.any(sigma < 0) or np.any(sigma > common):
        raise ValueError("withheld: must satisfy 0 <= withheld <= min(target, draft) entrywise")
    kept = common - sigma  # alpha
    accept = np.divide(kept, draft, out=np.zeros_like(kept), where=draft > 0)
    residual = np.maximum(target - draft, 0.0) + sigma  # r + sigma
    rejection = residual.sum(axis=-1)  # t + eps
    nothing = rejection[..., None] <= 0
    correction = np.where(nothing, target, residual / np.where(nothing, 1.0, rejection[..., None]))
    output = kept + rejection[..., None] * correction
    return SubmaximalStep(
        accept_probs=accept,
        correction=correction,
        rejection=rejection,
        extra_rejection=sigma.sum(axis=-1),
        output=output,
    )


@dataclass(frozen=True)
class RejectionAccounting:
    """Expected rejections over a horizon of one-proposal-per-position decoding: ``maximal`` with
    SD's maximal coupling, ``submaximal`` with the withheld share, ``extra`` = their difference."""

    maximal: float
    submaximal: float
    extra: float


def rejection_accounting(target_tables, draft_tables, fraction) -> RejectionAccounting:
    """E[Delta N_rej] = sum_n E[eps_n] over a horizon (seed 000, Proposition 3.2).

    Withholding sigma = lambda min(T, D) at every position (``fraction`` = lambda in [0, 1], the
    ``submaximal`` verifier's option) gives eps_n = lambda (1 - TV_n). With one proposal per
    position and exact output, the prefix before position n follows the target, so
    E[N_rej] = sum_n E_{x^{n-1} ~ T}[TV_n + eps_n] and the excess over SD is sum_n E[eps_n].
    Tables: ``tables[n]`` [V]*(n+1) holds the conditionals of position n + 1.
    """
    target, draft = _validate.table_pair(target_tables, draft_tables)
    share = float(_validate.rate(fraction, "fraction"))
    prefix_laws = [np.ones(())] + _validate.joint_laws(target)[:-1]  # law of x^{n-1}, n = 1..N
    agreement = sum(  # sum_n E[1 - TV_n]
        float((law * overlap(t, d)).sum()) for law, t, d in zip(prefix_laws, target, draft)
    )
    maximal = len(target) - agreement  # sum_n E[TV_n]
    extra = share * agreement  # sum_n E[eps_n]
    return RejectionAccounting(maximal=maximal, submaximal=maximal + extra, extra=extra)

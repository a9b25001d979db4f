"""``spectr-gbv``: seed 004's multi-draft block verification (SpecTr-GBV), as published; not exact.

Notation: T = target, D = draft; x_k^i = the first i tokens of draft k; T(x^i), D(x^i) are joint
probabilities from the start of the call. Seed 004 writes p for our D and q for our T. What is
wrong with it, and the exact alternative ``multidraft-bv`` (:mod:`.multidraft_bv`):
docs/spectr-gbv.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import rng
from ..formulas import any_accepted
from .base import Verifier, VerifyResult, register
from .modifications import ModificationStack

__all__ = ["SpecTrGBV", "SpecTrGBVState"]


def _miss(target_joint: torch.Tensor, draft_joint: torch.Tensor, num_drafts: int) -> torch.Tensor:
    """(1 - min(D / T, 1))^K elementwise; 0 where T = 0 (the seed multiplies it by T there)."""
    ratio = torch.where(target_joint > 0, draft_joint / torch.where(target_joint > 0, target_joint, 1), 1)
    return (1 - ratio.clamp(max=1)) ** num_drafts


@dataclass(frozen=True)
class SpecTrGBVState(ModificationStack):
    """Seed 004 Algorithm 2's pending modifications. Each replaces the next ``remaining`` target
    conditionals after the committed tokens c by q_new(x | u) proportional to
    T(c u x) (1 - min(D(c u x) / T(c u x), 1))^K, joints from the start of the call that committed c
    (u = tokens since then). Since T(c u x) = T(c) T(u x) and likewise for D, only ``weight`` =
    D(c) / T(c) is kept; T is the target as modified by the older pending modifications
    (Algorithm 3 line 6 feeds the modified q back in)."""

    verifier = "spectr-gbv"


def _path_joint(rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[K, n+1] joints along each draft: 1, r[0, x_0], r[0, x_0] r[1, x_1], ... for rows [K, n, V]."""
    step = rows.gather(-1, tokens[:, : rows.shape[1], None]).squeeze(-1)  # [K, n]
    return torch.cat([step.new_ones(step.shape[0], 1), torch.cumprod(step, 1)], 1)


def _apply_modifications(tokens, draft, target, modifications, num_drafts):
    """Effective target [K, L+1, V] after the pending modifications (oldest first), and per
    modification the rows below it (the target as modified by the older ones)."""
    effective = target.clone()
    below = []
    for mod in modifications:
        rows = mod.remaining
        below.append(effective[:, :rows].clone())
        if mod.weight == 0:  # D(c) = 0: the factor (1 - 0)^K leaves T as it is
            continue
        base = effective[:, :rows]  # [K, rows, V]
        t_joint = _path_joint(base, tokens)[:, :rows]  # [K, rows]  T(u_j) along each draft
        d_joint = _path_joint(draft[:, :rows], tokens)[:, :rows]
        d_next = d_joint[..., None] * draft[:, :rows]  # D(u_j x)
        scaled = torch.where(d_next > 0, mod.weight * d_next, 0)  # D(c u x) / T(c); ratio may be inf
        weights = base * _miss(t_joint[..., None] * base, scaled, num_drafts)  # T(u_j x) (1 - min(.))^K
        mass = weights.sum(-1, keepdim=True)
        # zero mass: the path is impossible under the modified law; keep the row (never sampled)
        effective[:, :rows] = torch.where(mass > 0, weights / torch.where(mass > 0, mass, 1), base)
    return effective, below


@register
@dataclass(frozen=True)
class SpecTrGBV(Verifier):
    """``spectr-gbv``: seed 004 (SpecTr-GBV, "multi-draft block verification"), Algorithms 1-3, as
    published, in target/draft notation. NOT exact for K >= 2.

    Algorithm 1: for drafts k = 1..K in order and sub-blocks x_k^i, i = tau + 1..L, accept x_k^i with
    probability h_ik (eq. 2 for i < L, eq. 3 for i = L) unless x_k^i is in the set H of rejected
    sub-blocks (then no coin is drawn); a rejected sub-block joins H; accepting sets tau = i, f = k;
    accepting a whole draft draws the bonus token from T(. | x_k^L) and stops. Otherwise the
    correction token comes from eq. 4, p_res(x | x_f^tau) ~ T(x_f^tau x)(1 - min(D/T, 1))^K.
    Algorithm 2 (the next L - tau - 1 target conditionals modified) travels in ``state``
    (:class:`SpecTrGBVState`; pass it back on every call). Where the seed is silent we follow
    ``gbv``: eq. 2 with a zero denominator counts as h = 1, h outside [0, 1] acts as the test
    eta < h does, and a modification that outlives the next call is stacked.

    What is wrong (docs/spectr-gbv.md, tests/verify/test_spectr_gbv.py): Lemma A.1 sets
    P(X^L has x^i, accepted) = P(X^L has x^i) h_i as if every drafted sub-block got its test, but
    Algorithm 1 stops at the first accepted whole draft and never revisits positions <= tau, so
    blocks of later drafts are tested less often than counted, and eq. 4's residual, built on that
    count, does not give the mass back. Theorem 4.2 fails: with V = 2, K = 2, L = 1, D = (1/2, 1/2),
    T = (0.9, 0.1) the first token is a with probability 151/162, and E[tau] = 307/405 against the
    0.822 of Theorem 5.3. The claimed optimum (Lemma 5.1) is optimal only among "conditionally independent
    couplings": at L = 1 it lies below alpha* (Hu et al. 2025) and can lie below K-SEQ. At K = 1 it
    is ``gbv`` with its modification, and exact, for a draft whose law is a function of the prefix
    (``prefix_draft_only``, as ``gbv``).
    """

    name = "spectr-gbv"
    description = "SpecTr-GBV as published (seed 004, Algorithms 1-3, modification in state); NOT exact for K >= 2"
    exact = False
    multi_draft = True
    prefix_draft_only = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        tokens = draft_tokens
        num_drafts, length = tokens.shape
        modifications = SpecTrGBVState.pending(state, length)
        draft = draft_probs.to(torch.float64)  # [K, L, V]
        target, below = _apply_modifications(tokens, draft, target_probs.to(torch.float64), modifications, num_drafts)
        t_joint = _path_joint(target[:, :length], tokens)  # [K, L+1]  T(x_k^i), i = 0..L
        d_joint = _path_joint(draft, tokens)  # [K, L+1]
        t_next = t_joint[:, :length, None] * target[:, :length]  # [K, L, V]  T(x_k^i x)
        residual = t_next * _miss(t_next, d_joint[:, :length, None] * draft, num_drafts)  # eq. 4 numerators
        cover = any_accepted(d_joint, num_drafts)  # P(X^L has x^i)
        claimed = t_joint * (1 - _miss(t_joint, d_joint, num_drafts))  # T(x^i)[1 - (1 - min(D/T, 1))^K]
        missed_after = residual[:, 1:].sum(-1)  # [K, L-1]  sum_x T(x^i x)(1 - min(.))^K, i = 1..L-1
        numerator = missed_after - (t_joint[:, 1:length] - claimed[:, 1:length])  # eq. 2
        denominator = cover[:, 1:length] - t_joint[:, 1:length] + missed_after
        h_inner = torch.where(denominator != 0, numerator / torch.where(denominator != 0, denominator, 1), 1.0)
        h_last = claimed[:, length] / cover[:, length]  # eq. 3
        h = torch.cat([h_inner, h_last[:, None]], 1).clamp(0, 1)  # [K, L]  h_ik for i = 1..L

        tau, chosen, rejected = 0, 0, set()
        for k in range(num_drafts):  # Algorithm 1, lines 4-19
            for i in range(tau + 1, length + 1):
                block = tuple(tokens[k, :i].tolist())
                if block in rejected:
                    continue
                if bool(rng.bernoulli(h[k, i - 1 : i], generator)[0]):
                    tau, chosen = i, k
                else:
                    rejected.add(block)
            if tau == length:
                break
        accepted = tokens[chosen, :tau].tolist()
        if tau == length:
            last = rng.categorical(target[chosen, length], generator)  # bonus token
        else:  # eq. 4; where T = D at this node eq. 4 is 0/0 and the token comes from the target
            last = rng.categorical(residual[chosen, tau], generator, fallback=target[chosen, tau])
        new_state = _next_state(tokens[chosen], draft[chosen], target[chosen], [b[chosen] for b in below], modifications, tau, last)
        return VerifyResult(tokens=accepted + [last], num_accepted=tau, draft_index=chosen, state=new_state)


def _next_state(x, draft, target, below, modifications, tau, last) -> SpecTrGBVState | None:
    """Carry the surviving modifications past the committed x^tau, y; push Algorithm 2's new one."""
    length = x.shape[0]
    committed = tau + 1
    path = x[:tau].tolist() + [last]

    def draft_over(rows) -> float:  # D(x^tau y) / rows(x^tau y), joints from this call's start
        d = float(torch.prod(draft[torch.arange(committed), path]))
        t = float(torch.prod(rows[torch.arange(committed), path]))
        if d == 0:  # (1 - 0)^K: the modification is the identity
            return 0.0
        return d / t if t > 0 else float("inf")

    def times(a: float, b: float) -> float:  # a zero draft joint wins over an infinite ratio
        return 0.0 if a == 0 or b == 0 else a * b

    return SpecTrGBVState.after_call(  # Algorithm 2's new one covers the next L - tau - 1 conditionals
        modifications, below, tau, length, lambda mod, rows: times(mod.weight, draft_over(rows)), lambda: draft_over(target)
    )

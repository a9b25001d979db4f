"""Block verifiers for one draft: ``bv`` (Sun et al., ICLR 2025) and ``gbv`` (its greedy variant).

Both accept the longest sub-block whose test succeeds: they draw one coin per position, with
success probabilities h_1..h_L, and keep x^tau for tau = the LAST success (0 if none). Stopping at
the first failure instead is a known bug: it is not exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import rng
from .base import Verifier, VerifyResult, register

__all__ = ["BlockVerification", "GreedyBlockVerification", "GBVState", "TargetModification"]


def last_success(success_probs: torch.Tensor, generator) -> int:
    """tau = max{i in 1..L : eta_i <= h_i}, 0 if none (one independent coin per position)."""
    successes = rng.bernoulli(success_probs, generator)  # [L] bool
    hits = torch.nonzero(successes)
    return int(hits[-1]) + 1 if hits.numel() else 0


def _draw_tail(tokens, tau, length, bonus_row, residual, fallback_row, generator) -> list[int]:
    """Accepted x^tau, then the bonus token (tau = L) or the correction token from ``residual``."""
    out = tokens[:tau].tolist()
    if tau == length:
        out.append(rng.categorical(bonus_row, generator))
    elif bool(residual.sum() > 0):
        out.append(rng.categorical(residual, generator))
    else:  # zero residual mass: this branch had probability 0 and was reached by float rounding
        out.append(rng.categorical(fallback_row, generator))
    return out


@register
@dataclass(frozen=True)
class BlockVerification(Verifier):
    """``bv``: block verification, Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro & Suresh,
    "Block Verification Accelerates Speculative Decoding" (ICLR 2025, arXiv 2403.10444), Algorithm 2.

    p_0 = 1, p_i = min(1, p_{i-1} T(x_i | x^{i-1}) / D(x_i | x^{i-1})) (clipped running ratio);
    for i < L: h_i = Z_i / (Z_i + 1 - p_i) with Z_i = sum_x (p_i T(x | x^i) - D(x | x^i))_+
    (h_i = 1 when the denominator is 0); h_L = p_L. tau = last success; then a bonus token from
    T(. | x^L) if tau = L, else a correction token from norm((p_tau T(. | x^tau) - D(. | x^tau))_+).
    Exact in the ordinary decoding loop, stateless; E[tau] = sum_i E_{X^i ~ D}[p_i] (their Thm 2),
    the largest among verifiers that keep the ordinary loop.

    The clipped product is computed in log space: log p_i = S_i - max_{j <= i} S_j with S the
    cumulative log ratio and S_0 = 0 (a reflected random walk), so no loop over positions.
    """

    name = "bv"
    description = "block verification (Sun et al. 2025): clipped running ratio, last success, exact"
    exact = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        x, draft, target = draft_tokens[0], draft_probs[0], target_probs[0]  # [L], [L, V], [L+1, V]
        length = x.shape[0]
        at = x.unsqueeze(-1)
        log_ratio = torch.log(target[:length].gather(-1, at).squeeze(-1)) - torch.log(
            draft.gather(-1, at).squeeze(-1)
        )  # [L]
        walk = torch.cat([log_ratio.new_zeros(1), torch.cumsum(log_ratio, 0)])  # [L+1]  S_0..S_L
        p = torch.exp(walk - torch.cummax(walk, 0).values)  # [L+1]  p_0..p_L
        inner = torch.clamp(p[1:length, None] * target[1:length] - draft[1:length], min=0).sum(-1)  # [L-1]
        denom = inner + 1 - p[1:length]
        h_inner = torch.where(denom > 0, inner / torch.where(denom > 0, denom, 1), torch.ones_like(inner))
        h = torch.cat([h_inner, p[length:]])  # [L]  h_1..h_L
        tau = last_success(h, generator)
        residual = torch.clamp(p[tau] * target[tau] - draft[tau], min=0) if tau < length else None
        tokens = _draw_tail(x, tau, length, target[length], residual, target[min(tau, length)], generator)
        return VerifyResult(tokens=tokens, num_accepted=tau, draft_index=0, state=None)


@dataclass(frozen=True)
class TargetModification:
    """One pending GBV distribution modification.

    The next ``remaining`` target conditionals are replaced by
    norm((nu T_below(. | w) - D(. | w))_+), nu = ``ratio`` * T_below(w) / D(w), where w is the
    path drafted since the start of the current call and T_below is the target as modified by the
    older pending modifications (seed 004 eq. in section 3.3; Sun et al. arXiv 2403.10444v1).
    """

    remaining: int
    ratio: float


@dataclass(frozen=True)
class GBVState:
    """The modifications still pending, oldest first. At most L - 1 are active at once."""

    modifications: tuple[TargetModification, ...]


def _modified_target(x, draft, target, modifications):
    """Apply the pending modifications in order; return the effective target [L+1, V] (float64)
    and, per modification, the target rows below it (needed to carry its ratio forward)."""
    length = x.shape[0]
    effective = target.clone()
    below = []
    for mod in modifications:
        rows = mod.remaining
        if rows > length:
            raise ValueError(
                f"gbv: the state modifies {rows} positions but this draft has only L = {length}; "
                "keep the draft length >= the previous one within a decoding"
            )
        below.append(effective[:rows].clone())
        if mod.ratio == float("inf"):  # (inf * T - D)_+ normalised is T itself
            continue
        at = x[:rows].unsqueeze(-1)
        step = effective[:rows].gather(-1, at).squeeze(-1) / draft[:rows].gather(-1, at).squeeze(-1)
        nu = mod.ratio * torch.cat([step.new_ones(1), torch.cumprod(step, 0)[:-1]])  # [rows]
        weights = torch.clamp(nu[:, None] * effective[:rows] - draft[:rows], min=0)  # [rows, V]
        mass = weights.sum(-1, keepdim=True)
        # a zero mass means the path has probability 0 under the modified law: any row will do
        effective[:rows] = torch.where(mass > 0, weights / torch.where(mass > 0, mass, 1), effective[:rows])
    return effective, below


@register
@dataclass(frozen=True)
class GreedyBlockVerification(Verifier):
    """``gbv``: greedy block verification (Sun et al., arXiv 2403.10444v1; seed 004 section 3.3).

    Unclipped nu_i = T(x^i) / D(x^i) (joints since the start of the call, nu_0 = 1); for i < L:
    h_i = (min(nu_i, 1) - S_i) / (1 - S_i) with S_i = sum_x min(D(x | x^i), nu_i T(x | x^i))
    (h_i = 1 when S_i = 1); h_L = min(nu_L, 1); tau = last success; correction token from
    norm((nu_tau T(. | x^tau) - D(. | x^tau))_+). Seed 004 writes h_i = (nu_i - S_i) / (1 - S_i),
    which exceeds 1 when nu_i > 1; as a probability it is the same as ours.

    It reaches E[tau] = sum_i sum_{x^i} min(D(x^i), T(x^i)) per call but is exact only if the next
    L - tau - 1 target conditionals are modified (returned in ``state``). Our correction to the
    seed: a modification can outlive the next call (the next call may commit fewer tokens than it
    covers), so pending modifications form a stack; each is applied over the target as modified by
    the older ones, with joints of that target. Pass ``state`` back on every call.
    """

    name = "gbv"
    description = "greedy block verification: max per-call E[tau]; exact only with the target modification in state"
    exact = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        if state is not None and not isinstance(state, GBVState):
            raise ValueError(f"gbv: state must be None or the GBVState of the previous call, got {type(state).__name__}")
        modifications = state.modifications if state is not None else ()
        x = draft_tokens[0]
        draft = draft_probs[0].to(torch.float64)  # [L, V]
        length = x.shape[0]
        target, below = _modified_target(x, draft, target_probs[0].to(torch.float64), modifications)
        at = x.unsqueeze(-1)
        step = target[:length].gather(-1, at).squeeze(-1) / draft.gather(-1, at).squeeze(-1)  # [L]
        nu = torch.cat([step.new_ones(1), torch.cumprod(step, 0)])  # [L+1]  nu_0..nu_L
        overlap = torch.minimum(draft[1:length], nu[1:length, None] * target[1:length]).sum(-1)  # [L-1]
        free = 1 - overlap
        h_inner = torch.where(
            free > 0, (torch.clamp(nu[1:length], max=1) - overlap) / torch.where(free > 0, free, 1), torch.ones_like(free)
        )
        h = torch.cat([h_inner.clamp(min=0), torch.clamp(nu[length:], max=1)])  # [L]
        tau = last_success(h, generator)
        residual = torch.clamp(nu[tau] * target[tau] - draft[tau], min=0) if tau < length else None
        tokens = _draw_tail(x, tau, length, target[length], residual, target[min(tau, length)], generator)
        return VerifyResult(
            tokens=tokens, num_accepted=tau, draft_index=0,
            state=_next_state(x, draft, target, below, modifications, nu, tau, tokens[-1]),
        )


def _next_state(x, draft, target, below, modifications, nu, tau, last_token) -> GBVState | None:
    """Carry surviving modifications past the committed tokens x^tau, Y; push the new one."""
    length = x.shape[0]
    committed = tau + 1
    carried = []
    for mod, rows in zip(modifications, below):
        if mod.remaining > committed:  # then tau < remaining <= L, so rows tau and D row tau exist
            path = rows[:tau].gather(-1, x[:tau].unsqueeze(-1)).squeeze(-1) / draft[:tau].gather(
                -1, x[:tau].unsqueeze(-1)
            ).squeeze(-1)
            factor = torch.prod(path) * rows[tau, last_token] / draft[tau, last_token]
            carried.append(TargetModification(mod.remaining - committed, float(mod.ratio * factor)))
    if tau < length - 1:  # a new modification covers the next L - tau - 1 positions
        ratio = nu[tau] * target[tau, last_token] / draft[tau, last_token]  # D may be 0: ratio inf
        carried.append(TargetModification(length - tau - 1, float(ratio)))
    return GBVState(tuple(carried)) if carried else None

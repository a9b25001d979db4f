"""Block verifiers for one draft: ``bv`` (Sun et al., ICLR 2025) and ``gbv`` (its greedy variant).

Both keep the longest sub-block whose test succeeds: one coin per position with success
probabilities h_1..h_L, and x^tau is kept for tau = the LAST success (0 if none). Stopping at the
first failure instead is a known bug: it is not exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .. import rng
from ..formulas import correction_weights
from .base import Verifier, VerifyResult, register
from .batched import BatchedVerifyResult, assemble, excess_mass, final_tokens, last_true, ragged
from .modifications import ModificationStack

__all__ = ["BlockVerification", "GreedyBlockVerification", "GBVState", "last_success"]


def last_success(success_prob: Callable[[int], float], length: int, generator,
                 bound: Callable[[int], float] | None = None) -> int:
    """tau = max{i in 1..L : eta_i <= h_i}, 0 if none, with independent coins per position.

    The coins are tossed from i = L downwards and the first success is tau, so h_i (a pass over
    the vocabulary) is computed only for the positions from L down to tau: when the draft is mostly
    accepted almost no row is read. ``bound(i)``, when given, is a cheap upper bound of h_i: a coin
    whose uniform lies above it fails without h_i being computed (the coin tests min(bound, h_i) =
    h_i). The law is that of tossing all L coins.
    """
    coins = rng.Coins(length, generator)
    for i in range(length, 0, -1):
        if bound is None:
            success = coins.toss(i - 1, success_prob(i))
        else:
            success = coins.toss_below(i - 1, bound(i), lambda: success_prob(i))
        if success:
            return i
    return 0


def _final_token(tau, length, bonus_row, residual: Callable[[int], torch.Tensor], target_row, generator) -> int:
    """The bonus token (tau = L) or the correction token drawn from ``residual(tau)`` (the target's
    row at tau when that residual has no mass)."""
    if tau == length:
        return rng.categorical(bonus_row, generator)
    return rng.categorical(residual(tau), generator, fallback=target_row)


@register
@dataclass(frozen=True)
class BlockVerification(Verifier):
    """``bv``: block verification, Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro & Suresh,
    "Block Verification Accelerates Speculative Decoding" (ICLR 2025, arXiv 2403.10444), Algorithm 2.

    p_0 = 1, p_i = min(1, p_{i-1} T(x_i | x^{i-1}) / D(x_i | x^{i-1})) (clipped running ratio);
    for i < L: h_i = Z_i / (Z_i + 1 - p_i) with Z_i = sum_x (p_i T(x | x^i) - D(x | x^i))_+
    (h_i = 1 when the denominator is 0); h_L = p_L. tau = last success; then a bonus token from
    T(. | x^L) if tau = L, else a correction token from norm((p_tau T(. | x^tau) - D(. | x^tau))_+).
    Exact in the ordinary decoding loop, stateless; E[tau] = sum_i E_{X^i ~ D}[p_i] (their
    Theorem 2), the largest among verifiers that keep the ordinary loop.

    The clipped product runs in float64 on the host, one multiplication and one min per position,
    from the L ratios T/D (in the probabilities' dtype): four tensor ops in all, where the log-space
    walk S_i - max_{j <= i} S_j took eleven, each a fixed cost in the decoding loop. Clipping at 1
    at every step keeps each partial product in [0, 1] (no overflow), and float64 keeps more
    digits than the float32 walk did.
    """

    name = "bv"
    description = "block verification (Sun et al. 2025): clipped running ratio, last success, exact"
    exact = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        x, draft, target = draft_tokens[0], draft_probs[0], target_probs[0]  # [L], [L, V], [L+1, V]
        length = x.shape[0]
        at = x.unsqueeze(-1)  # [L, 1]  (gather reads target rows 0..L-1)
        p = [1.0]  # p_0..p_L
        for (ratio,) in (target.gather(-1, at) / draft.gather(-1, at)).tolist():  # T(x_i | x^{i-1}) / D(x_i | x^{i-1})
            p.append(min(1.0, p[-1] * ratio))
        # rows are formed only for the coins that need them (most coins are settled by p_i alone;
        # forming all L - 1 rows at once was slower at the V measured, 1000 and 8192, L = 4 and 8)
        rows: dict[int, torch.Tensor] = {}
        excess: dict[int, float] = {}

        def residual(i: int) -> torch.Tensor:  # (p_i T(. | x^i) - D(. | x^i))_+   [V]
            if i not in rows:
                rows[i] = correction_weights(p[i] * target[i], draft[i], 0.0)
            return rows[i]

        def success_prob(i: int) -> float:
            if i == length:
                return p[length]
            if i not in excess:
                excess[i] = float(residual(i).sum())
            z = excess[i]
            return z / (z + 1 - p[i]) if z + 1 - p[i] > 0 else 1.0

        tau = last_success(success_prob, length, generator, bound=p.__getitem__)  # h_i <= p_i (Z_i <= p_i)
        last = _final_token(tau, length, target[length], residual, target[tau], generator)
        return VerifyResult(tokens=x.tolist()[:tau] + [last], num_accepted=tau, draft_index=0, state=None)

    def kernel(self, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms,
               max_draft_len: int) -> BatchedVerifyResult:
        """Every row of a batch on the layout of :mod:`.batched`: the same p_i (the float64
        product, and p_i T in the probabilities' dtype as the scalar product above), h_i and final
        token; coin i succeeds when u_{i-1} < h_i. Unlike :meth:`_verify`, which tosses from L down
        and stops at the first success, every Z_i (i = 1..L_b - 1) of every row is computed; the
        law is the same."""
        num_tokens = draft_probs.shape[0]
        layout = ragged(cu_num_draft_tokens, num_tokens, max_draft_len)
        x = draft_token_ids[layout.draft_index]  # [B, max_L]
        draft_at = draft_probs[layout.draft_index, x]  # [B, max_L]
        target_at = target_probs[layout.target_index, x]  # [B, max_L]
        ratio = torch.where(layout.valid, target_at / draft_at, 1.0).to(torch.float64)  # [B, max_L]
        p = torch.ones(ratio.shape[0], max_draft_len + 1, dtype=torch.float64, device=ratio.device)  # p_0..p_L
        for i in range(max_draft_len):
            p[:, i + 1] = torch.clamp(p[:, i] * ratio[:, i], max=1.0)
        scale = p.to(target_probs.dtype)  # p_i as the per-row products p_i T see it (a float scalar)

        # Z_i at the positions i = 1..max_L - 1 that coins test below L_b (padding is masked below)
        inner = p[:, 1:max_draft_len]  # [B, max_L - 1]  p_i
        z = excess_mass(
            target_probs, draft_probs, layout.target_index[:, 1:].flatten(), layout.draft_index[:, 1:].flatten(),
            scale[:, 1:max_draft_len].flatten(),
        ).view_as(inner).to(torch.float64)  # [B, max_L - 1]
        denominator = (z + 1.0) - inner
        h = torch.where(denominator > 0, z / denominator, 1.0)  # [B, max_L - 1]  h_i, i < L_b
        # h_i <= p_i (Z_i <= p_i); the per-row form fails a coin whose uniform is >= p_i without
        # computing Z_i: testing min(p_i, h_i) here draws the same tokens bit for bit
        h = torch.minimum(h, inner)

        # coin c = i - 1 tests position i: h_i for i < L_b, p_L for i = L_b
        is_last = torch.arange(1, max_draft_len + 1, device=p.device) == layout.lengths[:, None]  # [B, max_L]
        coin_prob = torch.where(is_last, p[:, 1:], F.pad(h, (0, 1), value=1.0))  # [B, max_L]
        tau = last_true((uniforms[layout.target_index] < coin_prob) & layout.valid)  # [B]  the last success
        final = final_tokens(
            target_probs, draft_probs, layout.block_starts + tau, layout.draft_entry(tau, num_tokens),
            tau == layout.lengths, uniforms[layout.bonus_index], 0.0, scale=scale.gather(1, tau[:, None]).squeeze(1),
        )  # [B]  correction (from (p_tau T - D)_+) or bonus token
        return assemble(x, tau, final)


@dataclass(frozen=True)
class GBVState(ModificationStack):
    """``gbv``'s pending modifications. Each replaces the next ``remaining`` target conditionals by
    norm((nu T_below(. | w) - D(. | w))_+), nu = ``weight`` * T_below(w) / D(w), where w is the path
    drafted since the start of the current call and T_below is the target as modified by the older
    pending modifications (seed 004 section 3.3; Sun et al. arXiv 2403.10444v1)."""

    verifier = "gbv"


def _modified_rows(x, draft, rows: list[torch.Tensor], modifications) -> list[list[torch.Tensor]]:
    """Apply the pending modifications in order to the target ``rows`` (in place, float64 where
    modified); return, per modification, the rows below it (needed to carry its ratio forward)."""
    below = []
    for mod in modifications:
        below.append(rows[: mod.remaining])
        if mod.weight == math.inf:  # (inf * T - D)_+ normalised is T itself
            continue
        nu = mod.weight
        for j in range(mod.remaining):
            row, draft_row = rows[j].double(), draft[j].double()
            weights = torch.clamp(nu * row - draft_row, min=0)
            mass = weights.sum()
            # a zero mass means the path has probability 0 under the modified law: any row will do
            rows[j] = weights / mass if bool(mass > 0) else row
            nu *= float(row[x[j]]) / float(draft_row[x[j]])
    return below


@register
@dataclass(frozen=True)
class GreedyBlockVerification(Verifier):
    """``gbv``: greedy block verification (Sun et al., arXiv 2403.10444v1; seed 004 section 3.3).

    Unclipped nu_i = T(x^i) / D(x^i) (joints since the start of the call, nu_0 = 1); for i < L:
    h_i = min(1, sum_x (nu_i T - D)_+ / sum_x (D - nu_i T)_+) at x^i (seed 004's alpha, capped;
    equal to (min(nu_i, 1) - S_i) / (1 - S_i) with S_i = sum_x min(D, nu_i T); 1 when the
    denominator is 0); h_L = min(nu_L, 1); tau = last success; correction token from
    norm((nu_tau T(. | x^tau) - D(. | x^tau))_+).

    It reaches E[tau] = sum_i sum_{x^i} min(D(x^i), T(x^i)) per call but is exact only if the next
    L - tau - 1 target conditionals are modified (returned in ``state``). Our correction to the
    seed: a modification can outlive the next call (the next call may commit fewer tokens than it
    covers), so pending modifications form a stack; each is applied over the target as modified by
    the older ones, with joints of that target. Pass ``state`` back on every call.

    The modification norm((nu T(. | w) - D(. | w))_+) takes D(. | w) from the next call's draft rows
    as the law the modifying call's draft had at w: the seeds' drafts are autoregressive models whose
    law is a function of the prefix. A draft whose law depends on its depth within a call (a feature
    draft: EAGLE, Li et al. 2024) breaks that, and ``gbv`` is then not exact (TV 0.095 from the
    target's law of three tokens on an enumerated pair, tests/verify/test_exactness.py):
    ``prefix_draft_only``, and the engine refuses such a pair.
    """

    name = "gbv"
    description = "greedy block verification: max per-call E[tau]; exact only with the target modification in state"
    exact = True
    prefix_draft_only = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        x, draft = draft_tokens[0], draft_probs[0]  # [L], [L, V]
        length = x.shape[0]
        modifications = GBVState.pending(state, length)
        rows = list(target_probs[0].unbind(0))  # effective target conditionals, rows 0..L
        below = _modified_rows(x, draft, rows, modifications)
        xs = x.tolist()
        nu = [1.0]  # nu_0..nu_L
        for j in range(length):
            nu.append(nu[-1] * float(rows[j][xs[j]]) / float(draft[j, xs[j]]))
        diffs: dict[int, torch.Tensor] = {}

        def diff(i: int) -> torch.Tensor:  # nu_i T(. | x^i) - D(. | x^i)   [V] float64
            if i not in diffs:
                diffs[i] = nu[i] * rows[i].double() - draft[i].double()
            return diffs[i]

        def success_prob(i: int) -> float:
            if i == length:
                return min(nu[length], 1.0)
            d = diff(i)
            excess, deficit = float(torch.clamp(d, min=0).sum()), float(torch.clamp(-d, min=0).sum())
            return 1.0 if deficit <= 0 else min(1.0, excess / deficit)

        tau = last_success(success_prob, length, generator)
        last = _final_token(
            tau, length, rows[length], lambda i: torch.clamp(diff(i), min=0), rows[min(tau, length)], generator
        )
        tokens = xs[:tau] + [last]
        return VerifyResult(
            tokens=tokens, num_accepted=tau, draft_index=0,
            state=_next_state(xs, draft, rows, below, modifications, nu, tau, last),
        )


def _next_state(xs, draft, rows, below, modifications, nu, tau, last) -> GBVState | None:
    """Carry surviving modifications past the committed tokens x^tau, Y; push the new one."""

    def ratio(numerator: float, denominator: float) -> float:
        return numerator / denominator if denominator > 0 else math.inf

    def carried(mod, below_rows) -> float:  # nu of mod along x^tau, Y under the rows below it
        factor = 1.0
        for j in range(tau):
            factor *= float(below_rows[j][xs[j]]) / float(draft[j, xs[j]])
        factor *= ratio(float(below_rows[tau][last]), float(draft[tau, last]))
        return mod.weight * factor

    return GBVState.after_call(
        modifications, below, tau, len(xs), carried,
        lambda: nu[tau] * ratio(float(rows[tau][last]), float(draft[tau, last])),
    )

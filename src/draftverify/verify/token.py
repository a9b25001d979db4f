"""Token-level verifiers for one draft: ``sd``, ``greedy`` and ``submaximal``.

Each position i is tested on its own, left to right; the first rejection emits a correction token
from a residual and ends the call; when all L drafted tokens pass, a bonus token is drawn from the
target's conditional after the draft (row L).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import rng
from ..formulas import acceptance_probability, correction_weights
from .base import Verifier, VerifyResult, register
from .batched import BatchedVerifyResult, assemble, final_tokens, leading_true, ragged

__all__ = ["SpeculativeSampling", "GreedyMatch", "SubmaximalCoupling", "token_chain", "token_chain_kernel", "correction_token", "speculative_step"]


def correction_token(target_row: torch.Tensor, draft_row: torch.Tensor, withheld: float, generator) -> int:
    """The correction token after a rejection: z ~ (r + sigma) / (TV + eps), the normalised
    :func:`correction_weights`. Rows ``[V]``."""
    return rng.categorical(correction_weights(target_row, draft_row, withheld), generator, fallback=target_row)


def speculative_step(token: int, draft_row: torch.Tensor, target_row: torch.Tensor, generator) -> tuple[int, bool]:
    """The speculative-sampling test at one position (Leviathan et al. 2023, Algorithm 1): keep the
    drafted ``token`` with probability min(1, T/D), else a :func:`correction_token`. Rows ``[V]``.
    Returns (emitted token, whether the drafted one was kept). SPRINTER checks its "no" tokens
    with it (seed 003, Algorithm 2)."""
    accept = acceptance_probability(target_row[token], draft_row[token], 0.0)
    if bool(rng.bernoulli(accept.reshape(1), generator)[0]):
        return token, True
    return correction_token(target_row, draft_row, 0.0, generator), False


def token_chain(
    draft_tokens: torch.Tensor,  # [L]
    draft_probs: torch.Tensor,  # [L, V]
    target_probs: torch.Tensor,  # [L + 1, V]
    withheld: float,
    generator,
) -> tuple[list[int], int]:
    """Token-level speculative sampling with a share ``withheld`` = lambda of the overlap withheld.

    Seed 000, Proposition 3.2 (in target/draft notation): with c = min(D, T), r = (T - D)_+ and
    sigma = lambda c, accept the drafted x with probability (1 - lambda) c(x) / D(x), otherwise emit
    z ~ (r + sigma) / (TV + eps), eps = sum sigma. lambda = 0 is Leviathan et al. (2023),
    Algorithm 1 (seed 002): accept with min(1, T/D), correct from norm((T - D)_+).

    Every position's emitted token has law c - sigma + r + sigma = T, so the chain is exact; the
    rejection probability is TV + eps: the extra rejections over lambda = 0 are exactly eps.
    Returns (tokens, number accepted).
    """
    length = draft_tokens.shape[0]
    at = draft_tokens.unsqueeze(-1)  # [L, 1]
    draft_at = draft_probs.gather(-1, at)  # [L, 1]  D(x_i | x^{i-1}) > 0
    target_at = target_probs.gather(-1, at)  # [L, 1]  T(x_i | x^{i-1}) (gather reads rows 0..L-1)
    accept_prob = acceptance_probability(target_at, draft_at, withheld).squeeze(-1)  # [L]
    accepted = rng.bernoulli(accept_prob, generator).tolist()  # [L] bool
    n = accepted.index(False) if False in accepted else length  # first rejection
    tokens = draft_tokens.tolist()[:n]
    if n == length:
        tokens.append(rng.categorical(target_probs[length], generator))  # bonus token
        return tokens, n
    tokens.append(correction_token(target_probs[n], draft_probs[n], withheld, generator))
    return tokens, n


def token_chain_kernel(
    draft_token_ids: torch.Tensor,  # [num_tokens] int64
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    cu_num_draft_tokens: torch.Tensor,  # [B] int64
    uniforms: torch.Tensor,  # [num_tokens + B] float64
    max_draft_len: int,
    withheld: float,
) -> BatchedVerifyResult:
    """:func:`token_chain` for every row of a batch on the layout of :mod:`.batched`, on the same
    uniforms: position i is accepted when u_i < (1 - lambda) min(1, T(x_i) / D(x_i)); at the first
    rejection n a correction token from (T - D)_+ + lambda min(T, D) at x^n, after L_b acceptances a
    bonus token from T(. | x^{L_b}). Cost: O(num_tokens) for the tests, O(B V) for the final rows."""
    num_tokens = draft_probs.shape[0]
    layout = ragged(cu_num_draft_tokens, num_tokens, max_draft_len)
    x = draft_token_ids[layout.draft_index]  # [B, max_L]
    draft_at = draft_probs[layout.draft_index, x]  # [B, max_L]  D(x_i | x^{i-1})
    target_at = target_probs[layout.target_index, x]  # [B, max_L]  T(x_i | x^{i-1})
    accept_prob = acceptance_probability(target_at, draft_at, withheld)  # (1 - lambda) min(1, T/D)
    # u < accept_prob compares in float64, as rng.bernoulli
    accepted = (uniforms[layout.target_index] < accept_prob) & layout.valid  # [B, max_L]
    n = leading_true(accepted)  # [B]  first rejection, or L_b
    final = final_tokens(
        target_probs, draft_probs, layout.block_starts + n, layout.draft_entry(n, num_tokens),
        n == layout.lengths, uniforms[layout.bonus_index], withheld,
    )  # [B]  correction or bonus token
    return assemble(x, n, final)


@register
@dataclass(frozen=True)
class SpeculativeSampling(Verifier):
    """``sd``: token-level speculative sampling with residual and bonus token.

    Leviathan, Kalman & Matias (2023) Algorithm 1; Chen et al. (2023); seed 002 (its p is our
    target, q our draft); seed 000 Algorithm 1 (its p is our draft, q our target; line 5 there must
    sample X_i given the already drafted tokens). Exact.
    """

    name = "sd"
    description = "token-level speculative sampling: accept min(1, T/D), residual (T - D)+, bonus token"
    exact = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        tokens, n = token_chain(draft_tokens[0], draft_probs[0], target_probs[0], 0.0, generator)
        return VerifyResult(tokens=tokens, num_accepted=n, draft_index=0, state=None)

    def kernel(self, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len):
        return token_chain_kernel(draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len, 0.0)


@register
@dataclass(frozen=True)
class SubmaximalCoupling(Verifier):
    """``submaximal``: a sub-maximal coupling with rejection-correction (seed 000, Proposition 3.2).

    Option ``fraction`` = lambda in [0, 1], the share of the overlap min(T, D) withheld from
    acceptance and returned through the correction distribution. Exact for every lambda; the
    rejection probability per position is TV(T, D) + eps with eps = lambda (1 - TV), i.e. the extra
    (algorithmic) rejections over ``sd`` equal the sum of the epsilons. lambda = 0 is ``sd``;
    lambda = 1 never accepts and samples every token from the target.
    """

    name = "submaximal"
    description = "sub-maximal coupling: withhold a fraction of the overlap, correct exactly (seed 000 Prop. 3.2)"
    exact = True
    fraction: float = 0.5

    def __post_init__(self) -> None:
        if not (0.0 <= float(self.fraction) <= 1.0):
            raise ValueError(f"submaximal: fraction must lie in [0, 1], got {self.fraction}")

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        tokens, n = token_chain(
            draft_tokens[0], draft_probs[0], target_probs[0], float(self.fraction), generator
        )
        return VerifyResult(tokens=tokens, num_accepted=n, draft_index=0, state=None)

    def kernel(self, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len):
        return token_chain_kernel(
            draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len, float(self.fraction)
        )


@register
@dataclass(frozen=True)
class GreedyMatch(Verifier):
    """``greedy``: verification for temperature 0.

    Accept while the drafted token is the target's argmax; the extra token is the argmax at the
    first mismatch (or after the draft). The output is identical to greedy decoding of the target
    (ties go to the lowest token id, as ``torch.argmax``). Deterministic: ``generator`` is unused.
    """

    name = "greedy"
    description = "temperature 0: accept while the draft matches the target argmax; output = greedy target"
    exact = True
    deterministic = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        """The algorithm box on one row (the :meth:`kernel` does the same on a batch; the batched
        tests hold them equal bit for bit): accept x_i while it is argmax T(. | x^{i-1}), then the
        argmax at the first mismatch or after the draft. It reads the target's rows only up to the
        first mismatch: a mismatch at the first token costs one argmax, not L + 1."""
        tokens = []
        for i, drafted in enumerate(draft_tokens[0].tolist() + [None]):
            best = int(target_probs[0, i].argmax())
            tokens.append(best)
            if best != drafted:
                break
        return VerifyResult(tokens=tokens, num_accepted=len(tokens) - 1, draft_index=0, state=None)

    def kernel(self, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len):
        """Every row of a batch: accept while x_i = argmax T(. | x^{i-1}); the extra token is the
        argmax at the first mismatch or after the draft. ``draft_probs`` and ``uniforms`` are unread."""
        layout = ragged(cu_num_draft_tokens, draft_token_ids.shape[0], max_draft_len)
        best = target_probs.argmax(dim=-1)  # [num_tokens + B]
        x = draft_token_ids[layout.draft_index]  # [B, max_L]
        n = leading_true((x == best[layout.target_index]) & layout.valid)  # [B]
        return assemble(x, n, best[layout.block_starts + n])

"""Batched verification kernels: ``sd``, ``submaximal``, ``greedy`` and ``bv`` for a whole batch of
drafts in one pass over the flattened ragged layout that serving engines use.

The terms are those of :mod:`draftverify.verify.base` (accepted, correction and bonus tokens). The
layout, for B rows (requests) with L_b >= 0 drafted tokens each and num_tokens = sum_b L_b:

- ``draft_token_ids`` [num_tokens]: the drafts of rows 0..B-1, one after the other;
- ``cu_num_draft_tokens`` [B]: cumulative L_b (row b owns draft entries cu[b] - L_b .. cu[b] - 1);
- ``draft_probs`` [num_tokens, V]: D(. | x^i) for each drafted position, same order;
- ``target_probs`` [num_tokens + B, V]: T(. | x^i) for i = 0..L_b, row b's block starting at
  cu[b] - L_b + b (its last row, at cu[b] + b, is the bonus row T(. | x^{L_b}));
- ``uniforms`` [num_tokens + B] float64 in [0, 1), laid out like the target rows: row b's L_b
  coins, then the uniform of its correction or bonus token (at cu[b] + b). This is the order in
  which the per-row verifiers draw (``rng.bernoulli`` / ``rng.Coins``, then ``rng.categorical``), so
  a batched call is bit for bit the per-row verifiers called in row order on the same uniforms.

Output: :class:`BatchedVerifyResult`, accepted counts [B] and output tokens [B, max_draft_len + 1]
(accepted tokens, then the correction or bonus token, then :data:`PAD_TOKEN_ID`).

The kernels trust their inputs (validate at the public boundary, :func:`draftverify.verify.batched
.verify_batch`). They are device-agnostic torch: no ``.item()``, no host copy, no Python loop over
positions or the vocabulary, and over rows only in blocks of bounded size (:data:`_BLOCK_BYTES`);
``max_draft_len`` is a Python int the caller already knows.
Every operation that decides an outcome is the same float operation, in the same dtype, as in the
per-row verifier (:mod:`.token`, :mod:`.block`); that is what makes the results identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..rng import inverse_cdf
from .token import acceptance_probability, correction_weights

__all__ = [
    "PAD_TOKEN_ID",
    "BatchedVerifyResult",
    "sd_kernel",
    "submaximal_kernel",
    "greedy_kernel",
    "bv_kernel",
    "last_success",
]

PAD_TOKEN_ID: int = -1
"""Fills ``output_tokens`` after each row's last committed token (vLLM v1 uses -1 as well)."""

_BLOCK_BYTES = 3 << 20
"""On CPU, work over [rows, V] is done in blocks of rows whose temporaries take at most about this
many bytes: they stay in cache and are reused by the allocator, where [B, V] temporaries at B = 64,
V = 32000 were mapped afresh on every call and cost more in page faults than in arithmetic."""


@dataclass(frozen=True)
class BatchedVerifyResult:
    """What one batched call commits, per row b: ``output_tokens[b, :num_accepted[b] + 1]`` (the
    accepted draft prefix, then one correction or bonus token); the rest is ``PAD_TOKEN_ID``."""

    num_accepted: torch.Tensor  # [B] int64
    output_tokens: torch.Tensor  # [B, max_draft_len + 1] int64

    def token_lists(self) -> list[list[int]]:
        """The committed tokens of every row as Python lists (one host copy; off the hot path)."""
        counts = self.num_accepted.tolist()
        return [row[: n + 1] for row, n in zip(self.output_tokens.tolist(), counts)]


@dataclass(frozen=True)
class _Ragged:
    """Index tensors of the ragged layout, padded to [B, max_draft_len] (padding is clamped to a
    valid row and masked by ``valid``)."""

    lengths: torch.Tensor  # [B] L_b
    starts: torch.Tensor  # [B] first draft entry of row b
    block_starts: torch.Tensor  # [B] first target row (and uniform) of row b: starts + b
    draft_index: torch.Tensor  # [B, max_L] draft entry of position i
    target_index: torch.Tensor  # [B, max_L] target row (= uniform) of position i
    valid: torch.Tensor  # [B, max_L] bool, i < L_b

    @property
    def bonus_index(self) -> torch.Tensor:  # [B] target row T(. | x^{L_b}) = uniform of the final token
        return self.block_starts + self.lengths

    def draft_entry(self, position: torch.Tensor, num_tokens: int) -> torch.Tensor:
        """[B] draft entry of each row's ``position`` [B] (clamped into range where it is L_b)."""
        return (self.starts + position).clamp_(max=max(num_tokens - 1, 0))


def _ragged(cu_num_draft_tokens: torch.Tensor, num_tokens: int, max_len: int) -> _Ragged:
    ends = cu_num_draft_tokens.to(torch.int64)  # [B]
    starts = F.pad(ends[:-1], (1, 0))  # [B]
    lengths = ends - starts  # [B]
    rows = torch.arange(ends.shape[0], device=ends.device)  # [B]
    positions = torch.arange(max_len, device=ends.device)  # [max_L]
    draft_index = (starts[:, None] + positions).clamp_(max=max(num_tokens - 1, 0))  # [B, max_L]
    return _Ragged(
        lengths=lengths,
        starts=starts,
        block_starts=starts + rows,
        draft_index=draft_index,
        target_index=draft_index + rows[:, None],  # padding: a clamped entry + b, still a target row
        valid=positions < lengths[:, None],
    )


def _leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the number of True entries before the first False: [B, L] -> [B]."""
    return mask.cumprod(dim=1).sum(dim=1)


def last_success(success: torch.Tensor) -> torch.Tensor:
    """tau = max{i in 1..L : coin i succeeded}, 0 if none: [B, L] bool -> [B] int64.

    Block verification keeps the LAST success (Sun et al. 2025, Algorithm 2); stopping at the first
    failure is the known bug (:mod:`.block`)."""
    if success.shape[1] == 0:
        return success.new_zeros(success.shape[0], dtype=torch.int64)
    positions = torch.arange(1, success.shape[1] + 1, device=success.device)  # [L]
    return (success * positions).amax(dim=1)


def _row_blocks(count: int, vocab: int, device: torch.device, bytes_per_entry: int) -> list[slice]:
    """Consecutive slices of ``count`` rows of ``vocab`` entries whose temporaries, at
    ``bytes_per_entry``, fit in :data:`_BLOCK_BYTES` on CPU (one slice on other devices)."""
    step = max(1, _BLOCK_BYTES // (bytes_per_entry * max(vocab, 1))) if device.type == "cpu" else max(count, 1)
    return [slice(start, start + step) for start in range(0, max(count, 1), step)]


def _replace_rows(rows: torch.Tensor, replace: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``rows`` [n, V] with row r replaced by ``other[r]`` where ``replace[r]``, in place: what
    ``torch.where(replace[:, None], other, rows)`` gives for finite entries, by lerp with weights 0
    and 1 (a + 0 (b - a) = a and b - (b - a) 0 = b exactly). torch.where's CPU kernel is not
    vectorised: it took longer than the subtraction that made the residual."""
    return rows.lerp_(other, replace[:, None].to(rows.dtype))


def _joined(blocks: list[torch.Tensor]) -> torch.Tensor:
    """The per-block results of :func:`_row_blocks` as one tensor (no copy for a single block)."""
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks)


def _excess_mass(
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_row: torch.Tensor,  # [N] rows of T(. | x^i)
    draft_row: torch.Tensor,  # [N] rows of D(. | x^i)
    scale: torch.Tensor,  # [N] p_i
) -> torch.Tensor:
    """Z_i = sum_x (p_i T(x | x^i) - D(x | x^i))_+ for N positions [N] (float32, summed as the
    per-row ``bv`` sums it): the mass of :func:`.token.correction_weights` of p_i T against D."""
    sums = []
    # temporaries per entry: p_i T, D and the weights in float32
    for rows in _row_blocks(target_row.shape[0], target_probs.shape[1], target_probs.device, 12):
        scaled = target_probs.index_select(0, target_row[rows]).mul_(scale[rows, None])  # [n, V]  p_i T
        sums.append(correction_weights(scaled, draft_probs.index_select(0, draft_row[rows]), 0.0).sum(dim=-1))
    return _joined(sums)  # [N]


def _final_tokens(
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_row: torch.Tensor,  # [B] row of T(. | x^n), n = the row's final position
    draft_row: torch.Tensor,  # [B] row of D(. | x^n) (any row where bonus)
    bonus: torch.Tensor,  # [B] bool, n = L_b
    uniform: torch.Tensor,  # [B] float64
    withheld: float,
    scale: torch.Tensor | None = None,  # [B] bv's p_n, None for 1
) -> torch.Tensor:
    """The correction or bonus token of every row [B], drawn by :func:`draftverify.rng.inverse_cdf`
    on ``uniform`` as the per-row verifiers draw it: from :func:`.token.correction_weights` of
    ``scale`` x T against D, or from T itself where ``bonus`` or where those weights have no mass (a
    rejection of probability 0 reached by rounding: ``rng.categorical``'s fallback in the per-row verifiers)."""
    tokens = []
    # temporaries per entry: T, (p T,) D and the weights in float32, the cdf in float64
    for rows in _row_blocks(target_row.shape[0], target_probs.shape[1], target_probs.device, 24):
        target_rows = target_probs.index_select(0, target_row[rows])  # [n, V]  T(. | x^n)
        if draft_probs.shape[0]:
            scaled = target_rows if scale is None else target_rows * scale[rows, None]
            weights = correction_weights(scaled, draft_probs.index_select(0, draft_row[rows]), withheld)
            has_mass = weights.amax(dim=-1) > 0  # [n]  same test as sum > 0 (weights >= 0)
            weights = _replace_rows(weights, ~has_mass | bonus[rows], target_rows)
        else:  # no drafts: every row takes its bonus token
            weights = target_rows
        tokens.append(inverse_cdf(weights, uniform[rows]))
    return _joined(tokens)  # [B]


def _assemble(tokens: torch.Tensor, num_accepted: torch.Tensor, final: torch.Tensor) -> BatchedVerifyResult:
    """Accepted prefix of ``tokens`` [B, max_L], then ``final`` [B] at position num_accepted, then PAD."""
    padded = F.pad(tokens, (0, 1), value=PAD_TOKEN_ID)  # [B, max_L + 1]
    positions = torch.arange(padded.shape[1], device=padded.device)  # [max_L + 1]
    out = torch.where(positions < num_accepted[:, None], padded, PAD_TOKEN_ID)
    out.scatter_(1, num_accepted[:, None], final[:, None])
    return BatchedVerifyResult(num_accepted=num_accepted, output_tokens=out)


def _token_chain(
    draft_token_ids: torch.Tensor,  # [num_tokens] int
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    cu_num_draft_tokens: torch.Tensor,  # [B] int
    uniforms: torch.Tensor,  # [num_tokens + B] float64
    max_draft_len: int,
    withheld: float,
) -> BatchedVerifyResult:
    """Token-level verification of every row (``sd`` for ``withheld`` = 0, else ``submaximal``)."""
    num_tokens = draft_probs.shape[0]
    ragged = _ragged(cu_num_draft_tokens, num_tokens, max_draft_len)
    x = draft_token_ids.to(torch.int64)[ragged.draft_index]  # [B, max_L]
    draft_at = draft_probs[ragged.draft_index, x]  # [B, max_L]  D(x_i | x^{i-1})
    target_at = target_probs[ragged.target_index, x]  # [B, max_L]  T(x_i | x^{i-1})
    accept_prob = acceptance_probability(target_at, draft_at, withheld)  # (1 - lambda) min(1, T/D)
    # u < accept_prob compares in float64, as rng.bernoulli
    accepted = (uniforms[ragged.target_index] < accept_prob) & ragged.valid  # [B, max_L]
    n = _leading_true(accepted)  # [B]  first rejection, or L_b
    final = _final_tokens(
        target_probs, draft_probs, ragged.block_starts + n, ragged.draft_entry(n, num_tokens),
        n == ragged.lengths, uniforms[ragged.bonus_index], withheld,
    )  # [B]  correction (from (T - D)_+ + lambda min(T, D)) or bonus token
    return _assemble(x, n, final)


def sd_kernel(
    draft_token_ids: torch.Tensor,  # [num_tokens] int
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    cu_num_draft_tokens: torch.Tensor,  # [B] int
    uniforms: torch.Tensor,  # [num_tokens + B] float64
    max_draft_len: int,
) -> BatchedVerifyResult:
    """``sd`` for a batch: Leviathan, Kalman & Matias (2023) Algorithm 1 (seed 002; its p is our
    target, q our draft). Position i is accepted when u_i < min(1, T(x_i) / D(x_i)); at the first
    rejection n a correction token is drawn from norm((T - D)_+) at x^n, after L_b acceptances a
    bonus token from T(. | x^{L_b}). Cost: O(num_tokens) for the tests, O(B V) for the final rows."""
    return _token_chain(draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len, 0.0)


def submaximal_kernel(
    draft_token_ids: torch.Tensor,  # [num_tokens] int
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    cu_num_draft_tokens: torch.Tensor,  # [B] int
    uniforms: torch.Tensor,  # [num_tokens + B] float64
    max_draft_len: int,
    fraction: float,
) -> BatchedVerifyResult:
    """``submaximal`` for a batch (seed 000, Proposition 3.2): accept with (1 - lambda) min(1, T/D),
    correct from (T - D)_+ + lambda min(T, D), lambda = ``fraction`` in [0, 1]. Exact for every
    lambda; lambda = 0 is :func:`sd_kernel`."""
    return _token_chain(
        draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len, float(fraction)
    )


def greedy_kernel(
    draft_token_ids: torch.Tensor,  # [num_tokens] int
    draft_probs: torch.Tensor | None,  # [num_tokens, V], unused
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    cu_num_draft_tokens: torch.Tensor,  # [B] int
    uniforms: torch.Tensor | None,  # unused: deterministic
    max_draft_len: int,
) -> BatchedVerifyResult:
    """``greedy`` for a batch (temperature 0): accept while the drafted token is the target's argmax
    (ties to the lowest id, as ``torch.argmax``); the extra token is the argmax at the first
    mismatch or after the draft. ``draft_probs`` and ``uniforms`` are not read."""
    num_tokens = draft_token_ids.shape[0]
    ragged = _ragged(cu_num_draft_tokens, num_tokens, max_draft_len)
    best = target_probs.argmax(dim=-1)  # [num_tokens + B]
    x = draft_token_ids.to(torch.int64)[ragged.draft_index]  # [B, max_L]
    n = _leading_true((x == best[ragged.target_index]) & ragged.valid)  # [B]
    final = best[ragged.block_starts + n]  # [B]
    return _assemble(x, n, final)


def bv_kernel(
    draft_token_ids: torch.Tensor,  # [num_tokens] int
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    cu_num_draft_tokens: torch.Tensor,  # [B] int
    uniforms: torch.Tensor,  # [num_tokens + B] float64
    max_draft_len: int,
) -> BatchedVerifyResult:
    """``bv`` for a batch: block verification, Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro &
    Suresh, "Block Verification Accelerates Speculative Decoding" (ICLR 2025, arXiv 2403.10444),
    Algorithm 2 (seed 004 swaps p and q: we say target and draft).

    p_0 = 1, p_i = min(1, p_{i-1} T(x_i | x^{i-1}) / D(x_i | x^{i-1})), the clipped product in
    float64 as the per-row verifier forms it (and p_i T in the probabilities' dtype, as its scalar
    product does); h_i = Z_i / (Z_i + 1 - p_i) for i < L with Z_i = sum_x (p_i T(x | x^i) - D(x | x^i))_+ (1 when the denominator is 0), h_L = p_L; coin i
    succeeds when u_{i-1} < h_i; tau = the last success; then the bonus token from T(. | x^L) if
    tau = L, else a correction token from norm((p_tau T(. | x^tau) - D(. | x^tau))_+).

    Unlike the per-row verifier, which tosses from L down and stops at the first success, every
    Z_i (i = 1..L_b - 1) of every row is computed; the law is the same.
    """
    num_tokens = draft_probs.shape[0]
    ragged = _ragged(cu_num_draft_tokens, num_tokens, max_draft_len)
    x = draft_token_ids.to(torch.int64)[ragged.draft_index]  # [B, max_L]
    draft_at = draft_probs[ragged.draft_index, x]  # [B, max_L]
    target_at = target_probs[ragged.target_index, x]  # [B, max_L]
    ratio = torch.where(ragged.valid, target_at / draft_at, 1.0).to(torch.float64)  # [B, max_L]
    p = torch.ones(ratio.shape[0], max_draft_len + 1, dtype=torch.float64, device=ratio.device)  # p_0..p_L
    for i in range(max_draft_len):
        p[:, i + 1] = torch.clamp(p[:, i] * ratio[:, i], max=1.0)
    scale = p.to(target_probs.dtype)  # p_i as the per-row verifier's products p_i T see it (a float scalar)

    # Z_i at the positions i = 1..max_L - 1 that coins test below L_b (padding is masked below)
    inner = p[:, 1:max_draft_len]  # [B, max_L - 1]  p_i
    z = _excess_mass(
        target_probs, draft_probs, ragged.target_index[:, 1:].flatten(), ragged.draft_index[:, 1:].flatten(),
        scale[:, 1:max_draft_len].flatten(),
    ).view_as(inner).to(torch.float64)  # [B, max_L - 1]
    denominator = (z + 1.0) - inner
    h = torch.where(denominator > 0, z / denominator, 1.0)  # [B, max_L - 1]  h_i, i < L_b
    # h_i <= p_i (Z_i <= p_i); the per-row verifier fails a coin whose uniform is >= p_i without
    # computing Z_i: testing min(p_i, h_i) here draws the same tokens bit for bit
    h = torch.minimum(h, inner)

    # coin c = i - 1 tests position i: h_i for i < L_b, p_L for i = L_b
    is_last = torch.arange(1, max_draft_len + 1, device=p.device) == ragged.lengths[:, None]  # [B, max_L]
    coin_prob = torch.where(is_last, p[:, 1:], F.pad(h, (0, 1), value=1.0))  # [B, max_L]
    success = (uniforms[ragged.target_index] < coin_prob) & ragged.valid
    tau = last_success(success)  # [B]

    final = _final_tokens(
        target_probs, draft_probs, ragged.block_starts + tau, ragged.draft_entry(tau, num_tokens),
        tau == ragged.lengths, uniforms[ragged.bonus_index], 0.0, scale=scale.gather(1, tau[:, None]).squeeze(1),
    )  # [B]  correction (from (p_tau T - D)_+) or bonus token
    return _assemble(x, tau, final)

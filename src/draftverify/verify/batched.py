"""Batched verification: the drafts of a whole batch of requests verified in one pass, on the
flattened ragged layout of serving engines (docs/serving.md maps it onto vLLM v1's rejection
sampler). A verifier with a batched kernel (``sd``, ``submaximal``, ``greedy``, ``bv``) implements
``Verifier.kernel`` with the helpers here; :meth:`draftverify.verify.Verifier.verify_batch` is the
public boundary that validates the arrays and draws the uniforms.

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
  a batched call is bit for bit the per-row verifiers called in row order on the same uniforms:
  with a CPU ``torch.Generator``, the same generator passed to the per-row verifiers called in row
  order (rows with L_b >= 1) leaves the same tokens and the same generator state.

Output: :class:`BatchedVerifyResult`, accepted counts [B] and output tokens [B, max_draft_len + 1]
(accepted tokens, then the correction or bonus token, then :data:`PAD_TOKEN_ID`).

Kernels trust their inputs. They are device-agnostic torch: no ``.item()``, no host copy, no
Python loop over positions or the vocabulary, and over rows only in blocks of bounded size
(:data:`_BLOCK_BYTES`); ``max_draft_len`` is a Python int the caller already knows. Every
operation that decides an outcome is the same float operation, in the same dtype, as in the
per-row verifier; that is what makes the results identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..formulas import correction_weights
from ..rng import check_generator, inverse_cdf

__all__ = ["PAD_TOKEN_ID", "BatchedVerifyResult", "draw_uniforms"]

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
class Ragged:
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


def ragged(cu_num_draft_tokens: torch.Tensor, num_tokens: int, max_len: int) -> Ragged:
    ends = cu_num_draft_tokens.to(torch.int64)  # [B]
    starts = F.pad(ends[:-1], (1, 0))  # [B]
    lengths = ends - starts  # [B]
    rows = torch.arange(ends.shape[0], device=ends.device)  # [B]
    positions = torch.arange(max_len, device=ends.device)  # [max_L]
    draft_index = (starts[:, None] + positions).clamp_(max=max(num_tokens - 1, 0))  # [B, max_L]
    return Ragged(
        lengths=lengths,
        starts=starts,
        block_starts=starts + rows,
        draft_index=draft_index,
        target_index=draft_index + rows[:, None],  # padding: a clamped entry + b, still a target row
        valid=positions < lengths[:, None],
    )


def leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the number of True entries before the first False: [B, L] -> [B]."""
    return mask.cumprod(dim=1).sum(dim=1)


def last_true(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the 1-based position of the last True entry, 0 if none: [B, L] -> [B] (the
    tensor form of :func:`draftverify.verify.block.last_success` over coins already tossed)."""
    if mask.shape[1] == 0:
        return mask.new_zeros(mask.shape[0], dtype=torch.int64)
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)  # [L]
    return (mask * positions).amax(dim=1)


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


def excess_mass(
    target_probs: torch.Tensor,  # [num_tokens + B, V]
    draft_probs: torch.Tensor,  # [num_tokens, V]
    target_row: torch.Tensor,  # [N] rows of T(. | x^i)
    draft_row: torch.Tensor,  # [N] rows of D(. | x^i)
    scale: torch.Tensor,  # [N] p_i
) -> torch.Tensor:
    """Z_i = sum_x (p_i T(x | x^i) - D(x | x^i))_+ for N positions [N] (float32, summed as the
    per-row ``bv`` sums it): the mass of :func:`draftverify.formulas.correction_weights` of p_i T against D."""
    sums = []
    # temporaries per entry: p_i T, D and the weights in float32
    for rows in _row_blocks(target_row.shape[0], target_probs.shape[1], target_probs.device, 12):
        scaled = target_probs.index_select(0, target_row[rows]).mul_(scale[rows, None])  # [n, V]  p_i T
        sums.append(correction_weights(scaled, draft_probs.index_select(0, draft_row[rows]), 0.0).sum(dim=-1))
    return _joined(sums)  # [N]


def final_tokens(
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
    on ``uniform`` as the per-row verifiers draw it: from :func:`draftverify.formulas.correction_weights` of
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


def assemble(tokens: torch.Tensor, num_accepted: torch.Tensor, final: torch.Tensor) -> BatchedVerifyResult:
    """Accepted prefix of ``tokens`` [B, max_L], then ``final`` [B] at position num_accepted, then PAD."""
    padded = F.pad(tokens, (0, 1), value=PAD_TOKEN_ID)  # [B, max_L + 1]
    positions = torch.arange(padded.shape[1], device=padded.device)  # [max_L + 1]
    out = torch.where(positions < num_accepted[:, None], padded, PAD_TOKEN_ID)
    out.scatter_(1, num_accepted[:, None], final[:, None])
    return BatchedVerifyResult(num_accepted=num_accepted, output_tokens=out)


def draw_uniforms(
    num_tokens: int, batch_size: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The uniforms of one batched call, drawn in one call: [num_tokens + B] float64 in [0, 1).

    Float64 because a float32 uniform can be exactly 0 and accept a zero-probability event. On a
    CPU generator one draw of n values equals consecutive draws of their parts, so this is the
    stream the per-row verifiers would consume row after row. A generator must live on ``device``
    (``torch.Generator("cuda")`` for CUDA probabilities): another is a ``ValueError``.
    """
    check_generator(generator, branching=False)
    if generator is not None and generator.device.type != torch.device(device).type:
        raise ValueError(f"generator: on {generator.device}, the probabilities on {device}; "
                         f"make it there (torch.Generator({str(torch.device(device).type)!r}))")
    return torch.rand(num_tokens + batch_size, generator=generator, dtype=torch.float64, device=device)

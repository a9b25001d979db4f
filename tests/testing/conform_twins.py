"""Implementations of the pinned flattened layout that conform must fail: a plain per-row ``sd``
(Leviathan et al. 2023, Algorithm 1), each step a method, and broken twins that override one step
with a defect found in a real engine (the issue cites each), or a defect a probe exists for."""

from __future__ import annotations

import torch

from draftverify.rng import inverse_cdf
from draftverify.verify.batched import PAD_TOKEN_ID


class FlatSD:
    """``sd`` on ``fn(draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms,
    max_draft_len)``, one row at a time (row b's target rows and uniforms start at cu[b] - L_b + b)."""

    def __call__(self, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len):
        self.check(draft_probs, target_probs)
        uniforms = self.uniforms(uniforms, cu_num_draft_tokens)
        out = torch.full((cu_num_draft_tokens.shape[0], max_draft_len + 1), PAD_TOKEN_ID, dtype=torch.int64)
        start, cursor = 0, 0
        for b, end in enumerate(cu_num_draft_tokens.tolist()):
            length, base = end - start, self.target_base(start, b)
            cursor = self.uniform_base(start, b, cursor, length)
            coins = [
                self.accept(float(uniforms[cursor + i]), *self.probabilities(
                    draft_probs[start + i], target_probs[base + i], int(draft_token_ids[start + i])))
                for i in range(length)
            ]
            n = self.accepted(coins)
            target = target_probs[base + n]
            weights = self.residual(target, draft_probs[start + n]) if n < length else target
            out[b, :n] = draft_token_ids[start:start + n]
            out[b, n] = self.draw(weights, target, float(uniforms[cursor + length]))
            start, cursor = end, cursor + length + 1
        return out

    def check(self, draft_probs, target_probs):
        if not (torch.isfinite(draft_probs).all() and torch.isfinite(target_probs).all()):
            raise ValueError("draft_probs / target_probs: NaN or inf")

    def uniforms(self, uniforms, cu):
        return uniforms

    def target_base(self, start, b):
        return start + b

    def uniform_base(self, start, b, cursor, length):
        return start + b

    def probabilities(self, draft_row, target_row, x):
        return float(target_row[x]), float(draft_row[x])

    def accept(self, u, target_at, draft_at):
        return u < target_at / draft_at  # u < min(1, T/D), as u < 1

    def accepted(self, coins):
        """The accepted count: the coins before the first failure."""
        return coins.index(False) if False in coins else len(coins)

    def residual(self, target_row, draft_row):
        return (target_row - draft_row).clamp(min=0)

    def draw(self, weights, target_row, u):
        if not float(weights.sum()) > 0:
            weights = target_row  # a rejection of probability 0, reached by rounding
        return int(inverse_cdf(weights[None], torch.tensor([u], dtype=torch.float64))[0])


# the nine defect classes of issue 25 -----------------------------------------------------------

class LessOrEqualCoin(FlatSD):
    """sglang#35771: `coin <= ratio`, so u = 0 accepts a drafted token of target probability 0."""

    def accept(self, u, target_at, draft_at):
        return u <= target_at / draft_at


class TargetWarpedOnly(FlatSD):
    """vllm#9834: top-k (k = 2) applied to the target side only."""

    def probabilities(self, draft_row, target_row, x):
        return float(_top2(target_row)[x]), float(draft_row[x])

    def residual(self, target_row, draft_row):
        return (_top2(target_row) - draft_row).clamp(min=0)

    def draw(self, weights, target_row, u):
        return super().draw(weights, _top2(target_row), u)


def _top2(row):
    kept = torch.zeros_like(row).scatter_(0, torch.topk(row, 2).indices, 1.0) * row
    return kept / kept.sum()


class NaNLeaksTokenZero(FlatSD):
    """vllm#41834: no check; a NaN draft row rejects, its residual is NaN, zeroed, and the draw of an
    all-zero row returns token 0."""

    def check(self, draft_probs, target_probs):
        pass

    def draw(self, weights, target_row, u):
        return int(inverse_cdf(weights.nan_to_num(0.0)[None], torch.tensor([u], dtype=torch.float64))[0])


class SeedWithoutEffect(FlatSD):
    """vllm#13196: the uniforms passed in are ignored; its own generator is seeded with a constant."""

    def uniforms(self, uniforms, cu):
        return torch.rand(uniforms.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


class BlockWithTokenCriterion(FlatSD):
    """vllm-ascend#7807: block verification (Sun et al. 2025, Algorithm 2) run with the token-level
    criterion: coin i succeeds with min(1, T/D) instead of h_i, and, as in block verification, the
    last success decides tau and the correction comes from (p_tau T - D)_+ (p the clipped running ratio)."""

    def target_base(self, start, b):
        self.running = [1.0]  # called once at the start of each row: p_0 = 1
        return super().target_base(start, b)

    def accept(self, u, target_at, draft_at):
        self.running.append(min(1.0, self.running[-1] * target_at / draft_at))
        return super().accept(u, target_at, draft_at)

    def accepted(self, coins):
        self.tau = max((i + 1 for i, coin in enumerate(coins) if coin), default=0)
        return self.tau

    def residual(self, target_row, draft_row):
        return (self.running[self.tau] * target_row - draft_row).clamp(min=0)


class UniformZero(FlatSD):
    """vllm-ascend#13730: the coins' uniform hard-coded to 0, so every draft of positive target probability is accepted."""

    def accept(self, u, target_at, draft_at):
        return super().accept(0.0, target_at, draft_at)


class AdvancedForEmptyRows(FlatSD):
    """vllm-ascend#13608: a coin drawn (and thrown away) for each row without drafts, so that row and
    every later row read the next row's uniforms; the stream gets B extra draws at its end."""

    def uniforms(self, uniforms, cu):
        return torch.cat([uniforms, torch.rand(cu.shape[0], dtype=torch.float64)])

    def uniform_base(self, start, b, cursor, length):
        return cursor + (length == 0)


class GreedyDraftAssumed(FlatSD):
    """transformers#32867: drafts decoded greedily while the target samples; the verifier's side of it
    treats each drafted token as certain (D = one-hot): accept with T(x), correct from (T - e_x)_+."""

    def probabilities(self, draft_row, target_row, x):
        return float(target_row[x]), 1.0

    def residual(self, target_row, draft_row):
        return target_row.clone().scatter_(0, torch.argmax(draft_row)[None], 0.0)


class DraftLawNotSampled(FlatSD):
    """transformers#47932: the draft law used for verification is not the one the drafts were sampled
    from (here the reported law is the sampled one mixed half and half with the uniform law)."""

    def probabilities(self, draft_row, target_row, x):
        return float(target_row[x]), float(_reported(draft_row)[x])

    def residual(self, target_row, draft_row):
        return (target_row - _reported(draft_row)).clamp(min=0)


def _reported(draft_row):
    return 0.5 * draft_row + 0.5 / draft_row.shape[0]


# defects the other probes exist for --------------------------------------------------------------

class FlooredRatio(FlatSD):
    """The ratio floored at 1e-12 (to keep a log finite): a smallest uniform accepts a zero-target token."""

    def accept(self, u, target_at, draft_at):
        return u < max(target_at / draft_at, 1e-12)


class UnnormalisedDraw(FlatSD):
    """The correction drawn by comparing u with the cumulative residual without scaling u by its mass."""

    def draw(self, weights, target_row, u):
        cdf = torch.cumsum(weights, 0, dtype=torch.float64)
        return min(int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)[0]), weights.shape[0] - 1)


class NoFallback(FlatSD):
    """An empty residual normalised anyway: 0 / 0, zeroed, and token 0 drawn."""

    def draw(self, weights, target_row, u):
        return NaNLeaksTokenZero.draw(self, weights / weights.sum(), target_row, u)


class SmoothedResidual(FlatSD):
    """1e-9 added to every residual entry to keep it from being empty."""

    def residual(self, target_row, draft_row):
        return super().residual(target_row, draft_row) + 1e-9


class AbsoluteResidual(FlatSD):
    """|T - D| for the residual instead of (T - D)_+."""

    def residual(self, target_row, draft_row):
        return (target_row - draft_row).abs()


class TargetOffsetWithoutRow(FlatSD):
    """Row b's target rows read from cu[b] - L_b, forgetting the b bonus rows before it."""

    def target_base(self, start, b):
        return start


class GlobalRandom(FlatSD):
    """The uniforms passed in are ignored for torch's global generator: one seed twice differs."""

    def uniforms(self, uniforms, cu):
        return torch.rand(uniforms.shape, dtype=torch.float64)

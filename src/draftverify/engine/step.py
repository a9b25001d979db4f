"""One decoding step: ``ar`` (the target alone) and the speculative step of the ``parallel``
verifiers, read top to bottom: draft, score, verify, commit.

The terms are those of :mod:`draftverify.verify.base`: each of R active prompts gets K drafts of L
tokens (*drafted*); the target scores the K (L + 1) positions in one forward (*verified*); the
verifier keeps an accepted prefix of one draft and adds one correction or bonus token; the
decoder's :meth:`~draftverify.engine.decoder.Decoder.commit` cuts at EOS / stop / the length
limit, appends, and crops both caches.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from ..rng import sample
from .draft_length import StepSeconds
from .stats import StepStats

if TYPE_CHECKING:
    from .decoder import Decoder, RowStep

__all__ = ["ar_step", "speculative_step"]


def ar_step(dec: Decoder, draft_length: int | None = None) -> list[RowStep]:
    """Sample one token per prompt from the target: the baseline every method is compared with,
    and a speculative decoding's step at L = 0 (``draft_length`` 0: a draft-length policy chose it
    and sees it; the draft catches up on the tokens it missed at the next step that drafts)."""
    start = time.perf_counter()
    tokens, valid = dec.pending(dec.target_cache)  # [R, m]
    logits = dec.target.forward(dec.target_cache, tokens, valid, 1)[:, 0]  # [R, V]
    sampled = sample(dec.warp(logits), dec.generator).tolist()  # [R]
    seconds = time.perf_counter() - start
    if draft_length is not None:
        dec.observe([0] * len(sampled), [0] * len(sampled), StepSeconds(0.0, 0, seconds))
    stats = StepStats(drafted=0, verified=0, accepted=0, committed=1, draft_index=0, draft_calls=0, target_calls=1,
                      draft_seconds=0.0, target_seconds=seconds, verify_seconds=0.0, draft_length=draft_length)
    return dec.commit([[t] for t in sampled], None, [stats] * len(dec.active))


def speculative_step(dec: Decoder, length: int) -> list[RowStep]:
    """One step of K drafts of ``length`` = L tokens for every active prompt (R of them); with a
    draft-length policy prompt r verifies its own L_r <= L, chosen from the past (``auto``: one L
    for the batch), and when every prompt has L_r = 0 the step is the target's alone."""
    k, rows = dec.config.drafts, len(dec.active)
    lengths = dec.row_lengths(length)  # [R]
    length = max(lengths)  # every row drafts L = max L_r
    if length == 0:
        return ar_step(dec, 0)
    start = time.perf_counter()

    # 1. draft: the tokens the draft has not seen, then L - 1 drafted ones, K rows per prompt
    chunk, valid = dec.pending(dec.draft_cache)  # [R, m]: 1 token, or 2 after a fully accepted draft (more after ar steps)
    if k > 1:
        expand = torch.arange(rows).repeat_interleave(k)  # [R K]: the prompt of each draft row
        dec.draft.reindex(dec.draft_cache, expand)
        chunk, valid = chunk[expand], None if valid is None else valid[expand]
    draft_tokens, draft_probs = dec.draft_block(chunk, valid, length)  # [R K, L], [R K, L, V]
    draft_done = time.perf_counter()

    # 2. score: the target's pending token plus all K drafts in one forward
    pending, pending_valid = dec.pending(dec.target_cache)  # [R, m]
    logits = dec.target.score_drafts(dec.target_cache, pending, pending_valid, draft_tokens.reshape(rows, k, length))
    target_probs = dec.warp(logits).flatten(0, 1)  # [R K, L + 1, V]: T(. | prefix, x^i), i = 0..L
    if draft_probs.dtype != target_probs.dtype:
        draft_probs, target_probs = draft_probs.double(), target_probs.double()
    target_done = time.perf_counter()

    # 3. verify: each prompt's K drafts (one batched kernel call where the verifier has one)
    results = dec.verifier.verify_rows(draft_tokens, draft_probs, target_probs, dec.generator,
                                       [dec.states[p] for p in dec.active], lengths)
    for p, result in zip(dec.active, results):
        dec.states[p] = result.state
    verify_done = time.perf_counter()
    seconds = StepSeconds(draft_done - start, length, verify_done - draft_done)
    dec.observe(lengths, [res.num_accepted for res in results], seconds)

    # 4. commit: the target keeps the chosen draft's accepted prefix, the draft cache its row
    dec.target.keep_draft(dec.target_cache, [res.draft_index for res in results], [res.num_accepted for res in results])
    stats = [
        StepStats(drafted=k * n, verified=k * (n + 1), accepted=res.num_accepted, committed=0,
                  draft_index=res.draft_index, draft_calls=length, target_calls=1,
                  draft_seconds=draft_done - start, target_seconds=target_done - draft_done,
                  verify_seconds=verify_done - target_done, draft_length=n)
        for res, n in zip(results, lengths)
    ]
    draft_rows = [r * k + res.draft_index for r, res in enumerate(results)]  # [R]
    return dec.commit([res.tokens for res in results], draft_rows, stats)

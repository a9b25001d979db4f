"""The engine's ``sprinter`` step: sequential approximate verification (seed 003, Algorithm 2).

One step for R active prompts (lockstep; a row whose run has ended idles until the others end):

1. draft: feed the tokens the draft has not seen, then one drafted token per forward; after each
   forward sample x ~ D and ask the classifier (features: the draft's last hidden state, read by a
   hook on its output layer, log D(x), entropy of D). "Yes" keeps x and drafts on; "no" ends the
   run. At most L = ``draft_length`` tokens are kept per run;
2. target: ONE forward over the target's pending tokens plus the run, logits at the last position
   only: T(. | committed + run);
3. at a "no", the speculative-sampling step on the checked token (keep with min(1, T/D), else a
   correction from norm((T - D)_+)); after a full run, a bonus token from T;
4. commit and crop as the ordinary step does.

Per prompt, ``decoder.states[p]`` holds a :class:`SprinterLog` of every classifier decision, so the
false/true-positive rates can be measured afterwards against the true ratio
(:func:`draftverify.approx.audit.audit`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .. import rng
from ..approx.features import HiddenStateTap, draft_fingerprint
from ..approx.sprinter import checked_token
from ..probs import warp
from .decoder import _pending, sample
from .stats import StepStats

if TYPE_CHECKING:
    from .decoder import Decoder, RowStep

__all__ = ["SprinterLog", "sprinter_step"]


@dataclass
class SprinterLog:
    """Every drafted token the classifier decided on, for one prompt: ``positions[i]`` is its index
    among the generated tokens (the prefix it was drafted after is the prompt plus the generated
    tokens before it), ``tokens[i]`` the drafted token, ``yes[i]`` the decision."""

    positions: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    yes: list[bool] = field(default_factory=list)


def sprinter_step(dec: Decoder) -> list[RowStep]:
    """One SPRINTER step for every active prompt of ``dec`` (see the module doc)."""
    cfg, verifier, cap = dec.config, dec.verifier, dec.config.length
    rows = len(dec.active)
    spec = getattr(verifier.classifier, "spec", None)
    tap = HiddenStateTap(dec.draft) if spec is not None and spec.hidden else None
    if any(dec.states[p] is None for p in dec.active):  # the decoder's first step
        _check_draft(verifier.classifier, dec.draft)
        for p in dec.active:
            dec.states[p] = SprinterLog()
    start = time.perf_counter()
    chunk, valid = _pending(dec.committed, dec.draft_held, dec.active)
    first_fed = [dec.draft_held[p] + (chunk.shape[1] if valid is None else int(valid[r].sum())) for r, p in enumerate(dec.active)]
    running = torch.ones(rows, dtype=torch.bool)
    runs: list[list[int]] = [[] for _ in range(rows)]
    checked: list[tuple[int, torch.Tensor] | None] = [None] * rows  # (token, D row) at each row's "no"
    forwards = 0
    while True:
        if tap is not None:
            with tap:
                logits = dec.draft.forward(dec.draft_cache, chunk, valid, 1)[:, 0]  # [R, V]
            hidden = tap.last[:, -1]  # [R, H]
        else:
            logits, hidden = dec.draft.forward(dec.draft_cache, chunk, valid, 1)[:, 0], None
        forwards += 1
        probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # [R, V]
        x = sample(probs, dec.generator)  # [R]
        yes = rng.bernoulli(verifier.yes_probability(x, probs, hidden=hidden), dec.generator)  # [R]
        for r in torch.nonzero(running).flatten().tolist():
            log = dec.states[dec.active[r]]
            log.positions.append(len(dec.generated(dec.active[r])) + len(runs[r]))
            log.tokens.append(int(x[r]))
            log.yes.append(bool(yes[r]))
            if yes[r]:
                runs[r].append(int(x[r]))
            else:
                checked[r] = (int(x[r]), probs[r])
        running &= yes & torch.tensor([len(run) < cap for run in runs])
        if not bool(running.any()):
            break
        chunk, valid = x[:, None], None  # idle rows are fed too; their extra tokens are cropped
    draft_done = time.perf_counter()

    extended = [dec.committed[p] + runs[r] for r, p in enumerate(dec.active)]
    pending, pending_valid = _pending(extended, [dec.target_held[p] for p in dec.active], list(range(rows)))
    logits = dec.target.forward(dec.target_cache, pending, pending_valid, 1)[:, 0]  # [R, V]: T(. | committed + run)
    target_probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    target_done = time.perf_counter()

    new_tokens, stats = [], []
    for r, p in enumerate(dec.active):
        target_row = target_probs[r]
        if checked[r] is None:  # a full run: bonus token from the target
            token, kept = rng.categorical(target_row, dec.generator), False
        else:
            drafted, draft_row = checked[r]
            token, kept = checked_token(drafted, draft_row.to(target_row.dtype), target_row, dec.generator)
        new_tokens.append(runs[r] + [token])
        drafted_count = len(runs[r]) + (checked[r] is not None)
        stats.append((drafted_count, len(runs[r]) + kept))
    verify_done = time.perf_counter()

    times = (draft_done - start, target_done - draft_done, verify_done - target_done)
    step_stats = [
        StepStats(drafted=d, verified=1, accepted=a, committed=0, draft_index=0, draft_calls=forwards, target_calls=1,
                  draft_seconds=times[0], target_seconds=times[1], verify_seconds=times[2])
        for d, a in stats
    ]
    for r, p in enumerate(dec.active):
        dec.draft_held[p] = first_fed[r] + min(len(runs[r]), forwards - 1)  # tokens fed and kept
        dec.target_held[p] = len(dec.committed[p]) + len(runs[r])
    return dec._commit(new_tokens, list(range(rows)), step_stats)


def _check_draft(classifier, draft) -> None:
    """A classifier saved with a draft fingerprint only runs with that draft."""
    expected = getattr(classifier, "info", {}).get("draft_fingerprint")
    if expected is not None and expected != draft_fingerprint(draft):
        raise ValueError("the SPRINTER classifier was trained for another draft model; "
                         "train one for this pair with `draftverify sprinter train`")

"""The engine's ``gated`` step, for verifiers whose classifier gates the target (SPRINTER, seed 003,
Algorithm 2; the verifier is :class:`draftverify.verify.sprinter.Sprinter`).

One step for R active prompts (lockstep; a row whose run has ended idles until the others end):

1. draft: feed the tokens the draft has not seen, then one drafted token per forward; after each
   forward sample x ~ D and ask the verifier's classifier (features: the draft's last hidden state,
   read by :class:`draftverify.models.hidden.HiddenStateTap`, log D(x), entropy of D). "Yes" keeps
   x and drafts on; "no" ends the run. At most L = ``draft_length`` tokens are kept per run;
2. target: ONE forward over the target's pending tokens plus the run, logits at the last position
   only: T(. | committed + run);
3. at a "no", the speculative-sampling step on the checked token
   (:func:`draftverify.verify.token.speculative_step`); after a full run, a bonus token from T.

The decoder commits and crops as after any step. Per prompt, ``decoder.states[p]`` holds a
:class:`SprinterLog` of every classifier decision, so the false/true-positive rates can be measured
afterwards against the true ratio (:func:`draftverify.approx.audit.audit_positions`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import rng
from ..models.hidden import HiddenStateTap, draft_fingerprint
from ..probs import warp
from ..verify.token import speculative_step
from .pending import pending_count, pending_tokens
from .stats import StepStats

__all__ = ["SprinterLog", "GatedStep", "gated_step"]


@dataclass
class SprinterLog:
    """Every drafted token the classifier decided on, for one prompt: ``positions[i]`` is its index
    among the generated tokens (the prefix it was drafted after is the prompt plus the generated
    tokens before it), ``tokens[i]`` the drafted token, ``yes[i]`` the decision."""

    positions: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    yes: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class GatedStep:
    """What one gated step produced, per active row: the tokens to commit, the statistics, and how
    many committed tokens each cache holds afterwards (before the commit's crop)."""

    tokens: list[list[int]]
    stats: list[StepStats]
    draft_held: list[int]
    target_held: list[int]


def gated_step(dec: Any) -> GatedStep:
    """One gated step for every active prompt of the :class:`~draftverify.engine.decoder.Decoder`
    ``dec`` (see the module doc). Runs its models and caches, appends to the logs in
    ``dec.states``; committing is the decoder's."""
    cfg, verifier, cap = dec.config, dec.verifier, dec.config.length
    rows = len(dec.active)
    spec = getattr(verifier.classifier, "spec", None)
    tap = HiddenStateTap(dec.draft) if spec is not None and spec.hidden else None
    if any(dec.states[p] is None for p in dec.active):  # the decoder's first step
        _check_draft(verifier.classifier, dec.draft)
        for p in dec.active:
            dec.states[p] = SprinterLog()
    start = time.perf_counter()
    chunk, valid = pending_tokens(dec.committed, dec.draft_held, dec.active)
    first_fed = [dec.draft_held[p] + pending_count(chunk, valid, r) for r, p in enumerate(dec.active)]
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
        x = rng.sample(probs, dec.generator)  # [R]
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
    pending, pending_valid = pending_tokens(extended, [dec.target_held[p] for p in dec.active], list(range(rows)))
    logits = dec.target.forward(dec.target_cache, pending, pending_valid, 1)[:, 0]  # [R, V]: T(. | committed + run)
    target_probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    target_done = time.perf_counter()

    new_tokens, counts = [], []
    for r in range(rows):
        target_row = target_probs[r]
        if checked[r] is None:  # a full run: bonus token from the target
            token, kept = rng.categorical(target_row, dec.generator), False
        else:
            drafted, draft_row = checked[r]
            token, kept = speculative_step(drafted, draft_row.to(target_row.dtype), target_row, dec.generator)
        new_tokens.append(runs[r] + [token])
        counts.append((len(runs[r]) + (checked[r] is not None), len(runs[r]) + kept))  # (drafted, accepted)
    verify_done = time.perf_counter()

    times = (draft_done - start, target_done - draft_done, verify_done - target_done)
    stats = [
        StepStats(drafted=d, verified=1, accepted=a, committed=0, draft_index=0, draft_calls=forwards, target_calls=1,
                  draft_seconds=times[0], target_seconds=times[1], verify_seconds=times[2])
        for d, a in counts
    ]
    return GatedStep(
        tokens=new_tokens,
        stats=stats,
        draft_held=[first_fed[r] + min(len(runs[r]), forwards - 1) for r in range(rows)],  # tokens fed and kept
        target_held=[len(dec.committed[p]) + len(runs[r]) for r, p in enumerate(dec.active)],
    )


def _check_draft(classifier, draft) -> None:
    """A classifier saved with a draft fingerprint only runs with that draft."""
    expected = getattr(classifier, "info", {}).get("draft_fingerprint")
    if expected is not None and expected != draft_fingerprint(draft):
        raise ValueError("the SPRINTER classifier was trained for another draft model; "
                         "train one for this pair with `draftverify sprinter train`")

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

The decoder commits and crops as after any step (:meth:`~draftverify.engine.decoder.Decoder.commit`);
the draft loop is the decoder's (:meth:`~draftverify.engine.decoder.Decoder.draft_positions`), shared
with the parallel step. Per prompt, ``decoder.states[p]`` holds a
:class:`SprinterLog` of every classifier decision, so the false/true-positive rates can be measured
afterwards against the true ratio (:func:`draftverify.approx.audit.audit_positions`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from .. import rng
from ..models.hidden import HiddenStateTap, draft_fingerprint
from ..verify.token import speculative_step
from .pending import pending_tokens
from .stats import StepStats

if TYPE_CHECKING:
    from ..verify.sprinter import Sprinter
    from .decoder import Decoder, RowStep

__all__ = ["SprinterLog", "gated_step"]


@dataclass
class SprinterLog:
    """Every drafted token the classifier decided on, for one prompt: ``positions[i]`` is its index
    among the generated tokens (the prefix it was drafted after is the prompt plus the generated
    tokens before it), ``tokens[i]`` the drafted token, ``yes[i]`` the decision, ``depths[i]`` its
    place in its step's run (1: the step's first drafted token)."""

    positions: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    yes: list[bool] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)


def gated_step(dec: Decoder, cap: int) -> list[RowStep]:
    """One gated step for every active prompt (see the module doc): runs of at most ``cap`` = L
    drafted tokens while the classifier says "yes", one target call, then the commit."""
    first = any(dec.states[p] is None for p in dec.active)  # the decoder's first step
    if first and hasattr(dec.verifier.classifier, "for_draft"):  # the shipped classifiers: this draft's
        dec.verifier = replace(dec.verifier, classifier=dec.verifier.classifier.for_draft(dec.draft))
    verifier: Sprinter = dec.verifier
    rows = len(dec.active)
    spec = getattr(verifier.classifier, "spec", None)
    tap = HiddenStateTap(dec.draft) if spec is not None and spec.hidden else None
    if first:
        _check_draft(verifier.classifier, dec.draft)
        for p in dec.active:
            dec.states[p] = SprinterLog()
    logs: list[SprinterLog] = [dec.states[p] for p in dec.active]
    start = time.perf_counter()

    # 1. draft one token at a time while the classifier says yes (idle rows are fed too; cropped later)
    running = torch.ones(rows, dtype=torch.bool)  # [R]
    runs: list[list[int]] = [[] for _ in range(rows)]
    checked: list[tuple[int, torch.Tensor] | None] = [None] * rows  # (token, D row) at each row's "no"
    forwards = 0
    for probs, x, hidden in dec.draft_positions(*dec.pending(dec.draft_cache), tap):  # [R, V], [R], [R, H]
        forwards += 1
        yes = rng.bernoulli(verifier.yes_probability(x, probs, hidden=hidden), dec.generator)  # [R]
        for r in torch.nonzero(running).flatten().tolist():
            logs[r].positions.append(len(dec.generated(dec.active[r])) + len(runs[r]))
            logs[r].tokens.append(int(x[r]))
            logs[r].yes.append(bool(yes[r]))
            logs[r].depths.append(len(runs[r]) + 1)
            if yes[r]:
                runs[r].append(int(x[r]))
            else:
                checked[r] = (int(x[r]), probs[r])
        running &= yes & torch.tensor([len(run) < cap for run in runs])
        if not bool(running.any()):
            break
    draft_done = time.perf_counter()

    # 2. score: one target forward over the pending tokens and the run, T(. | committed + run)
    extended = [dec.committed[p] + runs[r] for r, p in enumerate(dec.active)]
    logits = dec.target.forward(dec.target_cache, *pending_tokens(extended, dec.target_cache.held), 1)[:, 0]  # [R, V]
    target_probs = dec.warp(logits)
    target_done = time.perf_counter()

    # 3. verify: the speculative-sampling step at each "no", a bonus token after a full run
    new_tokens, counts = [], []
    for r in range(rows):
        if checked[r] is None:
            token, kept = rng.categorical(target_probs[r], dec.generator), False
        else:
            drafted, draft_row = checked[r]
            token, kept = speculative_step(drafted, draft_row.to(target_probs.dtype), target_probs[r], dec.generator)
        new_tokens.append(runs[r] + [token])
        counts.append((len(runs[r]) + (checked[r] is not None), len(runs[r]) + kept))  # (drafted, accepted)
    verify_done = time.perf_counter()

    # 4. commit
    stats = [StepStats(drafted=d, verified=1, accepted=a, committed=0, draft_index=0, draft_calls=forwards, target_calls=1,
                       draft_seconds=draft_done - start, target_seconds=target_done - draft_done,
                       verify_seconds=verify_done - target_done) for d, a in counts]
    return dec.commit(new_tokens, None, stats)


def _check_draft(classifier, draft) -> None:
    """A classifier saved with a draft fingerprint only runs with that draft."""
    expected = getattr(classifier, "info", {}).get("draft_fingerprint")
    if expected is not None and expected != draft_fingerprint(draft):
        raise ValueError("the SPRINTER classifier was trained for another draft model; "
                         "train one for this pair with `draftverify sprinter train`")

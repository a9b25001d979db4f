"""The decoder: the state of a batch of prompts between steps, and the commit that ends each step.

A :class:`Decoder` holds, for R active prompts, the committed tokens, one cache per model (row r
of each cache is active prompt r) and each prompt's verifier state. A step (:mod:`.step` for
``ar`` and the ``parallel`` verifiers, :mod:`.gated` for SPRINTER, chosen by the verifier's
``strategy`` trait) drafts, scores and verifies through the decoder's helpers and ends in
:meth:`Decoder.commit`, the one place that cuts (EOS, stop strings, the length limit), appends,
drops finished prompts and crops both caches.

Cache lengths have one account, ``Cache.held``: a cache holds a prefix of its prompt's committed
tokens, the target's all of them but the last (checked by :meth:`Decoder.check_caches`). The
tokens a cache has not seen are ``committed[len(held):]`` (:meth:`Decoder.pending`).

Near the end of the context the draft is shortened so that the target's forward fits
(:meth:`Decoder.draft_length`); a prompt that still has no room finishes with reason
``"context"``, keeping what it committed. A draft that reads the target's hidden states
(``LanguageModel.reads_target``) has none before the target's first call: that step is ``ar``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..models.base import Cache, LanguageModel
from ..models.hidden import HiddenStateTap
from ..probs import warp
from ..rng import sample
from ..verify.modifications import ModificationStack
from .config import PREFIX_DRAFT_ONLY, DecodeConfig, refuses_draft
from .draft_length import StepSeconds
from .gated import gated_step
from .pending import pending_tokens
from .stats import StepStats
from .step import ar_step, speculative_step
from .stopping import Stopper

__all__ = ["Decoder", "RowStep", "context_length"]


@dataclass(frozen=True)
class RowStep:
    """What one step committed for prompt ``index``; ``finish_reason`` is None while it goes on."""

    index: int
    tokens: list[int]
    stats: StepStats
    finish_reason: str | None


def context_length(*models: LanguageModel | None) -> int | None:
    """The longest sequence every one of ``models`` can take (None: no limit)."""
    limits = [m.max_length for m in models if m is not None and m.max_length is not None]
    return min(limits) if limits else None


class Decoder:
    """Decodes a batch of prompts step by step (see the module doc); ``step()`` until ``done``."""

    def __init__(
        self,
        target: LanguageModel,
        draft: LanguageModel | None,
        prompts: list[list[int]],
        config: DecodeConfig,
        *,
        tokenizer: Any = None,
        eos_token_id: int | None = None,
    ):
        if not prompts:
            raise ValueError("no prompts given")
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError(f"prompt {i} is empty: give at least one token")
            if min(prompt) < 0 or max(prompt) >= target.vocab_size:
                raise ValueError(f"prompt {i} has token ids outside [0, {target.vocab_size})")
        if config.speculative:
            if draft is None:
                raise ValueError(f"method {config.name!r} needs a draft model")
            if draft.vocab_size != target.vocab_size:
                raise ValueError(
                    f"the draft's vocabulary ({draft.vocab_size} tokens) differs from the target's "
                    f"({target.vocab_size}); draft and target must share one tokenizer"
                )
        self.context = context_length(target, draft if config.speculative else None)
        longest = max(len(p) for p in prompts)
        if self.context is not None and longest + config.max_new_tokens > self.context:
            raise ValueError(
                f"max_new_tokens: a prompt of {longest} tokens + max_new_tokens = {config.max_new_tokens} "
                f"exceeds the model's context of {self.context} tokens; give at most {self.context - longest}"
            )
        self.target, self.draft, self.config = target, draft, config
        self.verifier = config.verifier() if config.speculative else None
        if self.verifier is not None and refuses_draft(self.verifier, draft):
            raise ValueError(f"method {config.name!r} is {PREFIX_DRAFT_ONLY}: use bv, sd or a multi-draft method")
        eos = target.eos_token_id if eos_token_id is None else eos_token_id
        self.stopper = Stopper(config.max_new_tokens, None if config.ignore_eos else eos, config.stop, tokenizer)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.prompt_lengths = [len(p) for p in prompts]
        self.committed = [list(p) for p in prompts]
        self.states: list[Any] = [None] * len(prompts)
        self.active = list(range(len(prompts)))  # the prompt of each cache row
        reads = config.speculative and draft.reads_target  # only a feature draft's decoding keeps the target's states
        self.target_cache = target.new_cache(len(prompts), features=reads)
        self.draft_cache = draft.new_cache(len(prompts), self.target_cache) if config.speculative else None
        policy = config.length_policy if config.speculative else None  # each prompt's state: its own past
        self.length_states = [policy.initial() for _ in prompts] if policy is not None else None

    @property
    def done(self) -> bool:
        return not self.active

    def generated(self, index: int) -> list[int]:
        return self.committed[index][self.prompt_lengths[index] :]

    def step(self) -> list[RowStep]:
        """One decoding step for every active prompt."""
        if self.done:
            raise ValueError("decoding is finished")
        full = [self.context is not None and len(self.committed[p]) >= self.context for p in self.active]
        if any(full):  # no room for one more token: those prompts end, keeping what they committed
            return self.commit([[] for _ in self.active], None, [_NOTHING] * len(self.active), full)
        length = self.draft_length()
        if not self.config.speculative:
            return ar_step(self)
        if self.draft.reads_target and not any(self.target_cache.held):  # no target features to draft from yet
            return ar_step(self, 0)
        return STEPS[self.verifier.strategy](self, length)

    # --- helpers of the steps ----------------------------------------------------------------------
    def draft_length(self) -> int:
        """L for this step: the configured one, shortened so that the target's forward over the
        committed tokens and L drafted ones stays within the context (every active row has room)."""
        length = self.config.length if self.config.speculative else 1
        if self.context is None:
            return length
        return min(length, self.context - max(len(self.committed[p]) for p in self.active))

    def row_lengths(self, length: int) -> list[int]:
        """Each active prompt's L this step: ``length`` (the step's L, see :meth:`draft_length`), or
        with a draft-length policy its choice from the batch's past (``choose_rows``: ``auto`` one L
        for the batch, ``heuristic`` each prompt's own), at least a gbv state's pending
        modification and at most ``length``. L = 0 (an ``ar`` step) holds only when every prompt
        has it: where another prompt drafts, the batch's draft forwards run and its target call
        scores L + 1 positions of every row anyway, so a prompt given 0 verifies one token."""
        policy = self.config.length_policy
        if policy is None:
            return [length] * len(self.active)
        chosen = policy.choose_rows([self.length_states[p] for p in self.active])
        lengths = [min(length, max(n, ModificationStack.min_draft_length(self.states[p])))
                   for n, p in zip(chosen, self.active)]
        return [max(n, 1) for n in lengths] if any(lengths) else lengths

    def observe(self, lengths: list[int], accepted: list[int], seconds: StepSeconds) -> None:
        """A draft-length policy sees what each active prompt's step accepted (after verification)."""
        policy = self.config.length_policy
        if policy is not None:
            for r, p in enumerate(self.active):
                self.length_states[p] = policy.update(self.length_states[p], lengths[r], accepted[r], seconds)

    def pending(self, cache: Cache) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The committed tokens each row of ``cache`` has not seen, left-padded: ``[R, m]`` and the
        valid mask (None when no row is padded)."""
        return pending_tokens([self.committed[p] for p in self.active], cache.held)

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """The configured temperature, top-k and top-p, the same for draft and target: ``[..., V]``."""
        return warp(logits, self.config.temperature, self.config.top_k, self.config.top_p)

    def draft_positions(
        self, chunk: torch.Tensor, valid: torch.Tensor | None, tap: HiddenStateTap | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        """The draft loop: feed ``chunk`` [N, m], then each drafted token; per position yield the
        warped draft law [N, V], the sampled tokens [N] and (with ``tap``) the last hidden state
        [N, H]. A token is fed only when the caller asks for the next position."""
        support = self.draft.support  # [N'] or None: warp and sample over the draft's support only
        while True:
            if tap is None:
                logits, hidden = self.draft.forward(self.draft_cache, chunk, valid, 1, on_support=True)[:, 0], None
            else:
                with tap:
                    logits = self.draft.forward(self.draft_cache, chunk, valid, 1, on_support=True)[:, 0]
                hidden = tap.last[:, -1]
            probs = self.warp(logits)  # [N, V] or [N, N']
            tokens = sample(probs, self.generator)
            if support is not None:  # the same law over the vocabulary: zero outside the support
                tokens = support[tokens]
                probs = probs.new_zeros((len(tokens), self.draft.vocab_size)).index_copy_(1, support, probs)
            yield probs, tokens, hidden
            chunk, valid = tokens[:, None], None

    def draft_block(self, chunk: torch.Tensor, valid: torch.Tensor | None, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``length`` drafted tokens per row of ``chunk`` [N, m]: tokens [N, L] and their warped
        draft laws [N, L, V] (x_L itself is never fed to the draft). A draft with a compiled block
        (:meth:`~draftverify.models.base.LanguageModel.sample_block`) draws the same in one call where
        the temperature is above 0."""
        config = self.config
        if config.temperature > 0:
            block = self.draft.sample_block(self.draft_cache, chunk, length, config.temperature, self.generator,
                                            config.top_k, config.top_p, valid)
            if block is not None:
                return block
        positions = list(itertools.islice(self.draft_positions(chunk, valid), length))
        return torch.stack([x for _, x, _ in positions], 1), torch.stack([probs for probs, _, _ in positions], 1)

    # --- the end of every step -------------------------------------------------------------------
    def commit(
        self, new_tokens: list[list[int]], draft_rows: list[int] | None, stats: list[StepStats],
        full: list[bool] | None = None,
    ) -> list[RowStep]:
        """Cut and append each active prompt's ``new_tokens``; drop finished prompts; keep row
        ``draft_rows[r]`` of the draft cache for prompt r (None: the rows as they are); crop both
        caches to what they may hold: the target every committed token but the last, the draft at
        most that many. Prompts marked ``full`` end with reason "context"."""
        steps, survivors = [], []
        for r, p in enumerate(self.active):
            tokens, reason = self.stopper.cut(self.generated(p), new_tokens[r])
            reason = "context" if full is not None and full[r] else reason
            self.committed[p].extend(tokens)
            steps.append(RowStep(p, tokens, replace(stats[r], committed=len(tokens)), reason))
            if reason is None:
                survivors.append(r)
        self.active = [self.active[r] for r in survivors]
        if self.active:
            limits = [len(self.committed[p]) - 1 for p in self.active]  # a cache never holds the last token
            caches = [(self.target, self.target_cache, survivors)]
            if self.draft_cache is not None:
                caches.append((self.draft, self.draft_cache, survivors if draft_rows is None else [draft_rows[r] for r in survivors]))
            for model, cache, rows in caches:
                model.reindex(cache, rows)
                model.crop(cache, [min(held, limit) for held, limit in zip(cache.held, limits)])
        return steps

    def check_caches(self) -> None:
        """Raise ``AssertionError`` unless every cache row holds the committed prefix it should:
        the target all committed tokens but the last, the draft at most that many."""
        caches = [(self.target, self.target_cache, True)]
        if self.draft_cache is not None:
            caches.append((self.draft, self.draft_cache, False))
        for model, cache, exact in caches:
            if not self.active:
                continue
            assert cache.batch_size == len(self.active), (cache.batch_size, len(self.active))
            assert model.backend_length(cache) == cache.tokens.shape[1]
            for r, p in enumerate(self.active):
                row = cache.row(r)
                assert len(row) == cache.held[r], (p, len(row), cache.held[r])
                assert row == self.committed[p][: len(row)], p
                if exact:
                    assert len(row) == len(self.committed[p]) - 1, (p, len(row), len(self.committed[p]))
                else:
                    assert len(row) <= len(self.committed[p]) - 1


STEPS = {"parallel": speculative_step, "gated": gated_step}  # a verifier's strategy -> its step (STRATEGIES)
_NOTHING = StepStats(drafted=0, verified=0, accepted=0, committed=0, draft_index=0, draft_calls=0, target_calls=0,
                     draft_seconds=0.0, target_seconds=0.0, verify_seconds=0.0)

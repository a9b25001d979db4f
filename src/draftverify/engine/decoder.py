"""The decoding loop: draft -> score -> verify -> commit -> crop, for a batch of prompts.

One speculative step for R active prompts, K drafts of length L:

1. draft: replicate each prompt's draft cache K times; feed the tokens it has not seen (1, or 2
   after a fully accepted draft), then L - 1 drafted tokens, one batched forward per position for
   all R K rows; sample each row's next token from the warped draft distribution;
2. target: score the pending token plus the L drafted tokens of all K drafts in one forward
   (``score_drafts``: K replicated rows, or one row with a tree mask on transformers):
   warped target conditionals ``[R K, L + 1, V]``;
3. verify each prompt's K rows (``state`` passed from step to step), cut at EOS / stop / limit,
   commit; with one draft, several prompts and a verifier that has a batched kernel (``sd``,
   ``submaximal``, ``greedy``, ``bv``: :data:`draftverify.verify.batched.BATCHED_KERNELS`), all
   rows in one :func:`~draftverify.verify.batched.verify_batch` call instead, which commits
   exactly what the per-row calls would (same uniforms, same float operations);
4. keep the chosen draft of each unfinished prompt (``keep_draft`` for the target) and crop both
   caches to the committed length: the target holds every committed token but the last, the
   draft as many as it saw.

That is the ``parallel`` step; a verifier declares which step it needs in its ``strategy`` trait
(:data:`draftverify.verify.STRATEGIES`): ``gated`` verifiers (SPRINTER) draft until their classifier
says "no" and call the target once (:mod:`.gated`). ``ar`` samples the target alone.

Invariant (checked by :meth:`Decoder.check_caches`): each cache row holds a prefix of its
prompt's committed tokens; the target's is all but the last one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..models.base import Cache, LanguageModel
from ..probs import warp
from ..rng import sample
from ..verify.batched import BATCHED_KERNELS, verify_batch
from ..verify.modifications import ModificationStack
from .config import DecodeConfig
from .draft_length import StepSeconds
from .gated import gated_step
from .pending import pending_count, pending_tokens
from .stats import StepStats
from .stopping import Stopper

__all__ = ["Decoder", "RowStep"]


@dataclass(frozen=True)
class _Verified:
    """What verification decided for one prompt: its committed tokens (accepted draft prefix, then
    the correction or bonus token), how many were accepted, and which of its K drafts they came from."""

    tokens: list[int]
    num_accepted: int
    draft_index: int


@dataclass(frozen=True)
class RowStep:
    """What one step committed for prompt ``index``; ``finish_reason`` is None while it goes on."""

    index: int
    tokens: list[int]
    stats: StepStats
    finish_reason: str | None


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
        self.target, self.draft, self.config = target, draft, config
        self.verifier = config.verifier() if config.speculative else None
        # a registered verifier named in the grammar (not an instance under test) with one draft
        self.batched = config.drafts == 1 and isinstance(config.method, str) and config.name in BATCHED_KERNELS
        eos = target.eos_token_id if eos_token_id is None else eos_token_id
        self.stopper = Stopper(config.max_new_tokens, None if config.ignore_eos else eos, config.stop, tokenizer)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.prompt_lengths = [len(p) for p in prompts]
        self.committed = [list(p) for p in prompts]
        self.states: list[Any] = [None] * len(prompts)
        self.active = list(range(len(prompts)))  # the prompt of each cache row
        self.target_cache = target.new_cache(len(prompts))
        self.target_held = [0] * len(prompts)
        self.draft_cache = draft.new_cache(len(prompts)) if config.speculative else None
        self.draft_held = [0] * len(prompts)
        policy = config.length_policy if config.speculative else None  # each prompt's L from its own past
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
        if not self.config.speculative:
            return self._ar_step()
        return self._gated_step() if self.verifier.strategy == "gated" else self._parallel_step()

    # --- the kinds of step ----------------------------------------------------------------------
    def _ar_step(self) -> list[RowStep]:
        cfg = self.config
        start = time.perf_counter()
        tokens, valid = pending_tokens(self.committed, self.target_held, self.active)
        logits = self.target.forward(self.target_cache, tokens, valid, 1)[:, 0]  # [R, V]
        probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)
        sampled = sample(probs, self.generator).tolist()  # [R]
        seconds = time.perf_counter() - start
        stats = StepStats(drafted=0, verified=0, accepted=0, committed=1, draft_index=0, draft_calls=0,
                          target_calls=1, draft_seconds=0.0, target_seconds=seconds, verify_seconds=0.0)
        for p in self.active:
            self.target_held[p] = len(self.committed[p])
        return self._commit([[t] for t in sampled], [], [stats] * len(self.active))

    def _gated_step(self) -> list[RowStep]:
        step = gated_step(self)
        for r, p in enumerate(self.active):
            self.draft_held[p], self.target_held[p] = step.draft_held[r], step.target_held[r]
        return self._commit(step.tokens, list(range(len(self.active))), step.stats)

    def _parallel_step(self) -> list[RowStep]:
        cfg, k, policy = self.config, self.config.drafts, self.config.length_policy
        # L per row; a gbv state pending over the next m positions needs L >= m
        lengths = [max(policy.choose(self.length_states[p]), ModificationStack.min_draft_length(self.states[p]))
                   if policy else cfg.length for p in self.active]
        length, rows = max(lengths), len(self.active)  # every row drafts L = max; row r verifies lengths[r]
        start = time.perf_counter()
        chunk, valid = pending_tokens(self.committed, self.draft_held, self.active)
        seen = [self.draft_held[p] + pending_count(chunk, valid, r) + lengths[r] - 1 for r, p in enumerate(self.active)]
        if k > 1:
            expand = torch.arange(rows).repeat_interleave(k)  # [R K]: prompt row of each draft row
            self.draft.reindex(self.draft_cache, expand)
            chunk, valid = chunk[expand], None if valid is None else valid[expand]
        draft_tokens = torch.empty(rows * k, length, dtype=torch.int64)  # [R K, L]
        draft_probs = []
        for i in range(length):
            logits = self.draft.forward(self.draft_cache, chunk, valid, 1)[:, 0]  # [R K, V]
            probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)
            draft_probs.append(probs)
            draft_tokens[:, i] = sample(probs, self.generator)
            chunk, valid = draft_tokens[:, i : i + 1], None  # x_L itself is never fed to the draft
        draft_done = time.perf_counter()

        pending, pending_valid = pending_tokens(self.committed, self.target_held, self.active)
        logits = self.target.score_drafts(
            self.target_cache, pending, pending_valid, draft_tokens.reshape(rows, k, length)
        )  # [R, K, L + 1, V]
        target_probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p).flatten(0, 1)  # [R K, L + 1, V]
        draft_stack = torch.stack(draft_probs, 1)  # [R K, L, V]
        if draft_stack.dtype != target_probs.dtype:
            draft_stack, target_probs = draft_stack.double(), target_probs.double()
        target_done = time.perf_counter()

        if self.batched and rows > 1:
            results = self._verify_batch(draft_tokens, draft_stack, target_probs, lengths)
        else:
            results = self._verify_rows(draft_tokens, draft_stack, target_probs, lengths)
        verify_done = time.perf_counter()

        stats = [
            StepStats(drafted=k * n, verified=k * (n + 1), accepted=res.num_accepted, committed=0,
                      draft_index=res.draft_index, draft_calls=length, target_calls=1,
                      draft_seconds=draft_done - start, target_seconds=target_done - draft_done,
                      verify_seconds=verify_done - target_done, draft_length=n)
            for res, n in zip(results, lengths)
        ]
        if policy is not None:
            seconds = StepSeconds(draft_done - start, length, verify_done - draft_done)
            for r, p in enumerate(self.active):
                self.length_states[p] = policy.update(self.length_states[p], lengths[r], results[r].num_accepted, seconds)
        self.target.keep_draft(self.target_cache, [res.draft_index for res in results],
                               [res.num_accepted for res in results])
        for r, p in enumerate(self.active):
            self.draft_held[p] = seen[r]
            self.target_held[p] = len(self.committed[p]) + results[r].num_accepted
        draft_rows = [r * k + res.draft_index for r, res in enumerate(results)]
        return self._commit([res.tokens for res in results], draft_rows, stats)

    def _verify_rows(self, draft_tokens, draft_probs, target_probs, lengths: list[int]) -> list[_Verified]:
        """Each prompt's K rows through the verifier (``[R K, L]``, ``[R K, L, V]``, ``[R K, L + 1, V]``),
        prompt r's first ``lengths[r]`` drafted tokens."""
        k, results = self.config.drafts, []
        drafted = draft_tokens.tolist()  # [R K][L]
        arrays = (draft_tokens, draft_probs, target_probs)
        for r, p in enumerate(self.active):
            # one prompt: the arrays are its own, no slicing (each view is a tensor op in the loop)
            rows = arrays if len(self.active) == 1 else [a[r * k : (r + 1) * k] for a in arrays]
            if lengths[r] < draft_tokens.shape[1]:
                n, (tokens, draft_rows, target_rows) = lengths[r], rows
                rows = (tokens[:, :n], draft_rows[:, :n], target_rows[:, : n + 1])
            result = self.verifier.verify_trusted(*rows, self.generator, self.states[p])
            accepted = result.tokens[: result.num_accepted]
            if accepted != drafted[r * k + result.draft_index][: result.num_accepted]:
                raise ValueError(f"{self.config.name}: accepted tokens are not a prefix of draft {result.draft_index}")
            self.states[p] = result.state
            results.append(_Verified(result.tokens, result.num_accepted, result.draft_index))
        return results

    def _verify_batch(self, draft_tokens, draft_probs, target_probs, lengths: list[int]) -> list[_Verified]:
        """All rows (K = 1) in one batched call: ``[R, L]``, ``[R, L, V]``, ``[R, L + 1, V]``, row r's
        first ``lengths[r]`` drafted tokens (the flattened ragged layout of :func:`verify_batch`)."""
        rows, length = draft_tokens.shape
        vocab = target_probs.shape[-1]
        if min(lengths) < length:
            ragged = [(draft_tokens[r, :n], draft_probs[r, :n], target_probs[r, : n + 1]) for r, n in enumerate(lengths)]
            draft_tokens, draft_probs, target_probs = (torch.cat(parts) for parts in zip(*ragged))
        out = verify_batch(
            self.config.name, draft_tokens.reshape(-1),
            None if self.config.name == "greedy" else draft_probs.reshape(-1, vocab),
            target_probs.reshape(-1, vocab), torch.tensor(lengths).cumsum(0), generator=self.generator,
            max_draft_len=length, fraction=getattr(self.verifier, "fraction", None), validate=self.verifier.validate,
        )
        return [_Verified(tokens[: n + 1], n, 0)
                for tokens, n in zip(out.output_tokens.tolist(), out.num_accepted.tolist())]

    # --- commit, drop finished rows, crop -------------------------------------------------------
    def _commit(self, new_tokens: list[list[int]], draft_rows: list[int], stats: list[StepStats]) -> list[RowStep]:
        """Cut and commit each row's tokens; drop finished prompts; keep draft row ``draft_rows[r]``
        of active prompt r (the target cache has one row per active prompt); crop to the committed
        lengths."""
        steps, survivors = [], []
        for r, p in enumerate(self.active):
            tokens, reason = self.stopper.cut(self.generated(p), new_tokens[r])
            self.committed[p].extend(tokens)
            steps.append(RowStep(p, tokens, replace(stats[r], committed=len(tokens)), reason))
            if reason is None:
                survivors.append(r)
        self.active = [self.active[r] for r in survivors]
        self._keep(self.target, self.target_cache, self.target_held, survivors)
        if self.draft_cache is not None:
            self._keep(self.draft, self.draft_cache, self.draft_held, [draft_rows[r] for r in survivors])
        return steps

    def _keep(self, model: LanguageModel, cache: Cache, held: list[int], rows: list[int]) -> None:
        if not self.active:
            return
        model.reindex(cache, rows)
        for p in self.active:  # a cache never holds the last committed token
            held[p] = min(held[p], len(self.committed[p]) - 1)
        model.crop(cache, [held[p] for p in self.active])

    def check_caches(self) -> None:
        """Raise ``AssertionError`` unless every cache row holds the committed prefix it should:
        the target all committed tokens but the last, the draft at most that many."""
        caches = [(self.target, self.target_cache, self.target_held, True)]
        if self.draft_cache is not None:
            caches.append((self.draft, self.draft_cache, self.draft_held, False))
        for model, cache, held, exact in caches:
            if not self.active:
                continue
            assert cache.batch_size == len(self.active), (cache.batch_size, len(self.active))
            assert model.backend_length(cache) == cache.tokens.shape[1]
            for r, p in enumerate(self.active):
                row = cache.row(r)
                assert len(row) == held[p], (p, len(row), held[p])
                assert row == self.committed[p][: held[p]], p
                if exact:
                    assert held[p] == len(self.committed[p]) - 1, (p, held[p], len(self.committed[p]))
                else:
                    assert held[p] <= len(self.committed[p]) - 1

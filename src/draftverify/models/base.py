"""The ``LanguageModel`` protocol: next-token logits for a batch of sequences, with a cache.

A cache holds, row by row, the tokens a model has already processed (a KV cache for transformers,
only the token history for models that recompute from it). The decoding engine needs four things:

- ``forward(cache, tokens)``: append ``tokens`` [B, S] to every row and return the logits after the
  last ``num_logits`` of them (the draft needs 1, the target L + 1);
- ``reindex(cache, rows)``: keep rows in a new order, repeating some (K drafts sharing a prefix) or
  dropping some (keep the chosen draft, drop finished prompts);
- ``crop(cache, lengths)``: keep the first ``lengths[b]`` tokens of row b (after a rejection);
- ``lengths(cache)``: tokens held per row (the engine checks them against the committed tokens).

Rows of a batch may hold different numbers of tokens (ragged prompts, ragged acceptance). The cache
keeps a slot table: ``tokens`` [B, T] and ``valid`` [B, T]. A slot is invalid when it is padding
(a short row in a chunk) or was dropped by ``crop`` while a longer row keeps its column. Positions
count valid slots only, and attention skips invalid slots, so a row behaves exactly as if it were
alone. Columns invalid in every row are removed, so a batch of one never has holes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Cache", "LanguageModel", "HistoryModel"]


@dataclass
class Cache:
    """The slot table of a batch plus the backend's own state (a ``DynamicCache``, or None)."""

    tokens: torch.Tensor  # [B, T] int64, 0 in invalid slots
    valid: torch.Tensor  # [B, T] bool
    backend: Any = None
    scoring: tuple[int, int] | None = None  # (K, L) between score_drafts and keep_draft

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def row(self, b: int) -> list[int]:
        """The tokens row ``b`` holds, in order."""
        return self.tokens[b][self.valid[b]].tolist()


class LanguageModel(ABC):
    """A causal language model behind the interface the decoding engine uses (see module doc)."""

    vocab_size: int
    eos_token_id: int | None = None

    def new_cache(self, batch_size: int) -> Cache:
        """An empty cache of ``batch_size`` rows."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        empty = torch.zeros(batch_size, 0, dtype=torch.int64)
        return Cache(tokens=empty, valid=empty.bool(), backend=self._new_backend())

    def forward(
        self,
        cache: Cache,
        tokens: torch.Tensor,  # [B, S] int64
        valid: torch.Tensor | None = None,  # [B, S] bool, False = padding; None = all valid
        num_logits: int = 1,
    ) -> torch.Tensor:
        """Append ``tokens`` to every row; return logits ``[B, num_logits, V]`` predicting the token
        after each of the last ``num_logits`` positions. Those positions must be valid."""
        if tokens.dim() != 2 or tokens.shape[0] != cache.batch_size or tokens.shape[1] < 1:
            raise ValueError(f"tokens: expected shape [B={cache.batch_size}, S >= 1], got {tuple(tokens.shape)}")
        if not 1 <= num_logits <= tokens.shape[1]:
            raise ValueError(f"num_logits must be in [1, S={tokens.shape[1]}], got {num_logits}")
        if valid is not None and tuple(valid.shape) != tuple(tokens.shape):
            raise ValueError(f"valid: expected shape {tuple(tokens.shape)}, got {tuple(valid.shape)}")
        new_valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid
        old_valid = cache.valid
        positions = old_valid.sum(1, keepdim=True) + torch.cumsum(new_valid, 1) - 1  # [B, S]
        cache.tokens = torch.cat([cache.tokens, tokens.masked_fill(~new_valid, 0)], 1)
        cache.valid = torch.cat([old_valid, new_valid], 1)
        holes = valid is not None or not bool(old_valid.all())
        return self._forward(cache, tokens, positions.clamp(min=0), holes, num_logits)

    def score_drafts(
        self,
        cache: Cache,
        pending: torch.Tensor,  # [B, m] tokens the rows have not seen (left-padded)
        pending_valid: torch.Tensor | None,  # [B, m] bool, or None when nothing is padded
        drafts: torch.Tensor,  # [B, K, L]
    ) -> torch.Tensor:
        """Logits ``[B, K, L + 1, V]``: entry [b, k, i] predicts the token after row b + pending +
        ``drafts[b, k, :i]``. The cache is then in a scoring state until :meth:`keep_draft`.

        This default replicates each row K times (``reindex``) and scores the K rows in one
        forward; a backend may score the K drafts of a row in one sequence instead (a tree)."""
        rows, num_drafts, length = drafts.shape
        if num_drafts > 1:
            expand = torch.arange(rows).repeat_interleave(num_drafts)  # [B K]
            self.reindex(cache, expand)
            pending = pending[expand]
            pending_valid = None if pending_valid is None else pending_valid[expand]
        flat = drafts.reshape(rows * num_drafts, length)
        valid = None if pending_valid is None else torch.cat([pending_valid, torch.ones_like(flat, dtype=torch.bool)], 1)
        logits = self.forward(cache, torch.cat([pending, flat], 1), valid, length + 1)  # [B K, L + 1, V]
        cache.scoring = (num_drafts, length)
        return logits.reshape(rows, num_drafts, length + 1, -1)

    def keep_draft(self, cache: Cache, choice: torch.Tensor, accepted: torch.Tensor) -> None:
        """After :meth:`score_drafts`: row b keeps its pending tokens and the first ``accepted[b]``
        tokens of draft ``choice[b]``; the cache has B rows again."""
        if cache.scoring is None:
            raise ValueError("keep_draft without score_drafts")
        num_drafts, length = cache.scoring
        cache.scoring = None
        if num_drafts > 1:
            self.reindex(cache, torch.arange(choice.shape[0]) * num_drafts + choice)
        self.crop(cache, self.lengths(cache) - length + accepted)

    def reindex(self, cache: Cache, rows: torch.Tensor) -> None:
        """Keep rows ``rows`` [B'] of the cache, in that order (repeats allowed)."""
        rows = rows.to(torch.int64)
        if rows.numel() == cache.batch_size and torch.equal(rows, torch.arange(cache.batch_size)):
            return
        cache.tokens, cache.valid = cache.tokens[rows], cache.valid[rows]
        self._reindex(cache, rows)
        self._drop_empty_columns(cache)

    def crop(self, cache: Cache, lengths: torch.Tensor) -> None:
        """Keep the first ``lengths[b]`` tokens of row b (it must hold at least that many)."""
        lengths = torch.as_tensor(lengths, dtype=torch.int64)
        held = cache.valid.sum(1)
        if lengths.shape != held.shape or bool((lengths < 0).any()) or bool((lengths > held).any()):
            raise ValueError(f"crop: lengths {lengths.tolist()} not within the rows' lengths {held.tolist()}")
        cache.valid = cache.valid & (torch.cumsum(cache.valid, 1) <= lengths[:, None])
        cache.tokens = cache.tokens.masked_fill(~cache.valid, 0)
        self._drop_empty_columns(cache)

    def lengths(self, cache: Cache) -> torch.Tensor:
        """Tokens held per row ``[B]``."""
        return cache.valid.sum(1)

    def backend_length(self, cache: Cache) -> int:
        """Slots the backend state holds (it must equal the slot table's width between calls)."""
        return cache.tokens.shape[1]

    def _drop_empty_columns(self, cache: Cache) -> None:
        used = cache.valid.any(0)  # [T]
        keep = int(torch.nonzero(used)[-1]) + 1 if bool(used.any()) else 0
        removed = cache.tokens.shape[1] - keep
        if removed:
            cache.tokens, cache.valid = cache.tokens[:, :keep], cache.valid[:, :keep]
            self._truncate(cache, keep)

    # --- what a backend implements -------------------------------------------------------------
    def _new_backend(self) -> Any:
        return None

    @abstractmethod
    def _forward(
        self, cache: Cache, tokens: torch.Tensor, positions: torch.Tensor, holes: bool, num_logits: int
    ) -> torch.Tensor:
        """Logits [B, num_logits, V]; the slot table already includes ``tokens`` [B, S];
        ``positions`` [B, S] count valid slots; ``holes`` says whether any slot is invalid."""

    def _reindex(self, cache: Cache, rows: torch.Tensor) -> None:
        """Reorder the backend state like the slot table."""

    def _truncate(self, cache: Cache, num_slots: int) -> None:
        """Drop the backend state of every slot from ``num_slots`` on."""


class HistoryModel(LanguageModel):
    """A model without a KV cache: it computes each distribution from the row's token history."""

    @abstractmethod
    def next_token_logits(self, contexts: list[list[int]]) -> torch.Tensor:
        """Logits (log-probabilities are fine) ``[N, V]`` of the token after each context."""

    def _forward(self, cache, tokens, positions, holes, num_logits) -> torch.Tensor:
        if not bool(cache.valid[:, -num_logits:].all()):
            raise ValueError("forward: the positions that return logits must not be padding")
        contexts = []
        for b in range(cache.batch_size):
            history = cache.row(b)
            # the context of a slot is the history up to and including it
            contexts.extend(history[: len(history) - i] for i in reversed(range(num_logits)))
        logits = self.next_token_logits(contexts)  # [B * num_logits, V]
        return logits.reshape(cache.batch_size, num_logits, -1)

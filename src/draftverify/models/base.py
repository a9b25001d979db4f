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
from typing import Any

import torch

__all__ = ["Cache", "LanguageModel", "HistoryModel", "chunk_counts", "chunk_positions", "chunk_repeats"]


_COUNT = torch.arange(1024)  # 0, 1, 2, ...: positions are slices of it (no tensor made per call)


def _counting(stop: int) -> torch.Tensor:
    """``arange(n)`` for some n >= ``stop``, shared and never written (positions are read-only)."""
    global _COUNT
    count = _COUNT
    if stop > count.numel():
        count = _COUNT = torch.arange(max(stop, 2 * count.numel()))
    return count


def chunk_positions(cache: Cache, rows: int, size: int, valid: torch.Tensor | None) -> torch.Tensor:
    """The positions [B, S] of a chunk of ``size`` tokens (``valid`` [B, S] or None) appended next to
    ``cache``: each row counts its own valid slots; a padding slot takes its neighbour's position."""
    start = cache.width
    if valid is None and not cache.holes:  # every row holds `start` tokens
        return _counting(start + size).narrow(0, start, size).expand(rows, size)  # read-only
    held = torch.tensor(cache.held)[:, None]  # [B, 1]
    steps = torch.arange(1, size + 1) if valid is None else torch.cumsum(valid, 1)  # [B, S] or [S]
    return (held + steps - 1).clamp(min=0)


def chunk_repeats(tokens: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor | None:
    """For a chunk ``tokens`` [B, S] (padding ``valid`` [B, S], None: none) appended to empty rows,
    the positions that repeat an earlier row's: [B, S] int64, at the i-th valid slot of row b the
    flat index b' S + s' of the i-th valid slot of the first row b' < b whose first i + 1 valid
    tokens are row b's, else -1; None where no position repeats. Such a position has its source's
    token, position (both the i-th) and keys before it, so the same keys, values and states at every
    layer: a batch's prompts that open alike (a chat template's system prompt) need their opening
    once. One walk down a trie of the rows' openings, each node keeping the slot that made it: time
    linear in the chunk's tokens (a comparison of every pair of rows took 135 s for 2,500 samples of
    one prompt)."""
    rows, size = tokens.shape
    ids = tokens.tolist()
    slots = [range(size)] * rows if valid is None else [[s for s, v in enumerate(row) if v] for row in valid.tolist()]
    root: dict = {}  # token -> (children, flat index of the first slot that reached this opening)
    where, source = [], []
    for b in range(rows):
        node = root
        for s in slots[b]:
            flat = b * size + s
            child = node.get(ids[b][s])
            if child is None:
                child = node[ids[b][s]] = ({}, flat)
            else:
                where.append(flat)
                source.append(child[1])
            node = child[0]
    if not where:
        return None
    repeats = torch.full((rows * size,), -1, dtype=torch.int64)
    repeats[torch.tensor(where)] = torch.tensor(source)
    return repeats.view(rows, size)


class Cache:
    """The slot table of a batch plus the backend's own state (a KV cache, or None).

    The table is preallocated (``capacity`` columns, doubled when full) and ``width`` says how
    many columns are in use, so appending a chunk is a copy into place and a crop that keeps every
    row whole only moves ``width`` (the static-cache recipe of gpt-fast's ``KVCache``, applied to
    the token table). ``held`` mirrors ``valid.sum(1)`` on the host, so the common checks (length
    limits, whether there are holes) need no tensor operation.
    """

    def __init__(self, batch_size: int, capacity: int, backend: Any = None):
        with torch.inference_mode(False):  # normal tensors: writable inside and outside inference mode
            self._tokens = torch.zeros(batch_size, capacity, dtype=torch.int64)  # [B, capacity]
            self._valid = torch.zeros(batch_size, capacity, dtype=torch.bool)  # [B, capacity]
        self.width = 0
        self.held = [0] * batch_size  # valid slots per row
        self.backend = backend
        self.scoring: tuple[int, int] | None = None  # (K, L) between score_drafts and keep_draft

    @property
    def tokens(self) -> torch.Tensor:
        """[B, T] int64, 0 in invalid slots (a view: in-place edits reach the table)."""
        return self._tokens[:, : self.width]

    @property
    def valid(self) -> torch.Tensor:
        """[B, T] bool (a view)."""
        return self._valid[:, : self.width]

    @property
    def batch_size(self) -> int:
        return len(self.held)

    @property
    def holes(self) -> bool:
        """Whether some slot in use is invalid: a row holds fewer valid slots than the width."""
        return min(self.held, default=0) < self.width

    def row(self, b: int) -> list[int]:
        """The tokens row ``b`` holds, in order."""
        return self.tokens[b][self.valid[b]].tolist()

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more columns (doubling the capacity, copying the used part)."""
        capacity = self._tokens.shape[1]
        if self.width + extra <= capacity:
            return
        capacity = max(2 * capacity, self.width + extra)
        with torch.inference_mode(False):
            tokens = torch.zeros(self.batch_size, capacity, dtype=torch.int64)
            valid = torch.zeros(self.batch_size, capacity, dtype=torch.bool)
            tokens[:, : self.width], valid[:, : self.width] = self.tokens, self.valid
        self._tokens, self._valid = tokens, valid

    def append(self, tokens: torch.Tensor, valid: torch.Tensor | None, counts: list[int]) -> None:
        """Write ``tokens`` [B, S] (``valid`` [B, S] or None = all valid; ``counts`` its row sums)
        into the S columns after the width."""
        start, size = self.width, tokens.shape[1]
        self.reserve(size)
        self.width = start + size
        if valid is None:
            self._tokens.narrow(1, start, size).copy_(tokens)
            self._valid.narrow(1, start, size).fill_(True)
        else:
            self._tokens.narrow(1, start, size).copy_(tokens.masked_fill(~valid, 0))
            self._valid.narrow(1, start, size).copy_(valid)
        self.held = [h + n for h, n in zip(self.held, counts)]

    def select_rows(self, rows: torch.Tensor, order: list[int]) -> None:
        """Keep rows ``rows`` [B'] (``order`` is the same as a list) of the table."""
        with torch.inference_mode(False):
            self._tokens, self._valid = self._tokens.index_select(0, rows), self._valid.index_select(0, rows)
        self.held = [self.held[r] for r in order]


def chunk_counts(cache: Cache, tokens: torch.Tensor, valid: torch.Tensor | None) -> list[int]:
    """The new valid slots of each row when chunk ``tokens`` [B, S >= 1] (for the B rows of
    ``cache``) with padding ``valid`` [B, S] (None: all valid) is appended; ``ValueError`` for
    either of another shape."""
    if tokens.dim() != 2 or tokens.shape[0] != cache.batch_size or tokens.shape[1] < 1:
        raise ValueError(f"tokens: expected shape [B={cache.batch_size}, S >= 1], got {tuple(tokens.shape)}")
    if valid is not None and tuple(valid.shape) != tuple(tokens.shape):
        raise ValueError(f"valid: expected shape {tuple(tokens.shape)}, got {tuple(valid.shape)}")
    return [tokens.shape[1]] * tokens.shape[0] if valid is None else valid.sum(1).tolist()


class LanguageModel(ABC):
    """A causal language model behind the interface the decoding engine uses (see module doc)."""

    vocab_size: int
    eos_token_id: int | None = None
    max_length: int | None = None  # positions the model can take (its context), None = no limit
    initial_capacity = 64  # slot-table columns allocated by new_cache
    support: torch.Tensor | None = None
    """The token ids, sorted and distinct, outside which the model's law is zero (its logits -inf),
    or None for the whole vocabulary. A model with a support computes logits over it only
    (:meth:`_forward`); a decoding warps and samples over those columns (``forward(...,
    on_support=True)``), a law over fewer columns at less cost per drafted token."""
    depth_dependent: bool = False
    """Whether, as a draft, its law at a position depends on the depth within the drafted block and
    not only on the prefix (a feature draft reads its own features after the first position)."""
    reads_target: bool = False
    """Whether, as a draft, it drafts from the target's hidden states (a feature draft): before the
    target's first call of a decoding it has none to read, so that step is the target's alone."""

    def new_cache(self, batch_size: int, target_cache: Cache | None = None, *, features: bool = True) -> Cache:
        """An empty cache of ``batch_size`` rows. ``target_cache``: the target's cache of the same
        decoding, read by a draft that drafts from the target's hidden states
        (:class:`~.feature_draft.FeatureDraft`); other models ignore it. ``features``: for a target
        that keeps its hidden states for such a draft (:meth:`~.hf.TransformersModel.keep_features`),
        whether this cache keeps them; False for a decoding no such draft reads (``ar``, a token
        draft), whose calls then skip them. Other models ignore it."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        return Cache(batch_size, self.initial_capacity, self._new_backend(batch_size, features))

    def forward(
        self,
        cache: Cache,
        tokens: torch.Tensor,  # [B, S] int64
        valid: torch.Tensor | None = None,  # [B, S] bool, False = padding; None = all valid
        num_logits: int = 1,
        *,
        on_support: bool = False,
    ) -> torch.Tensor:
        """Append ``tokens`` to every row; return logits ``[B, num_logits, V]`` predicting the token
        after each of the last ``num_logits`` positions. Those positions must be valid.
        ``on_support``: for a model with a :attr:`support` of N tokens, the logits over it,
        ``[B, num_logits, N]`` (column i is token ``support[i]``), instead of -inf outside it."""
        counts = chunk_counts(cache, tokens, valid)  # new valid slots per row
        rows, size = tokens.shape
        if not 1 <= num_logits <= size:
            raise ValueError(f"num_logits must be in [1, S={size}], got {num_logits}")
        if self.max_length is not None and max(h + n for h, n in zip(cache.held, counts)) > self.max_length:
            raise ValueError(f"sequence longer than the model's context of {self.max_length} tokens")
        positions = chunk_positions(cache, rows, size, valid)  # [B, S]
        cache.append(tokens, valid, counts)
        logits = self._forward(cache, tokens, positions, cache.holes, num_logits)
        if self.support is None or on_support:
            return logits
        return logits.new_full((rows, num_logits, self.vocab_size), float("-inf")).index_copy_(2, self.support, logits)

    def sample_block(self, cache: Cache, tokens: torch.Tensor, length: int, temperature: float,
                     generator: torch.Generator | None, top_k: int | None = None, top_p: float | None = None,
                     valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Append ``tokens`` [B, m] (``valid`` as :meth:`forward`'s), then draft ``length`` tokens in
        one call: each drawn from the logits after the position before it, warped by ``temperature``
        (> 0), ``top_k`` and ``top_p`` as :func:`~draftverify.probs.warp` warps them, and fed, all but
        the last. Returns the drafted tokens [B, L] and their laws [B, L, V]: what the decoder's loop
        of forwards (:meth:`~draftverify.engine.decoder.Decoder.draft_positions`) draws from
        ``generator``, bit for bit, with the cache left as that loop leaves it. None (the default):
        this model has no such call, and the cache is untouched."""
        return None

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

    def keep_draft(self, cache: Cache, choice: torch.Tensor | list[int], accepted: torch.Tensor | list[int]) -> None:
        """After :meth:`score_drafts`: row b keeps its pending tokens and the first ``accepted[b]``
        tokens of draft ``choice[b]``; the cache has B rows again. ``choice`` and ``accepted`` are
        [B] tensors or lists (the engine passes lists: no tensor op when nothing moves)."""
        if cache.scoring is None:
            raise ValueError("keep_draft without score_drafts")
        num_drafts, length = cache.scoring
        cache.scoring = None
        if num_drafts > 1:
            self.reindex(cache, torch.arange(len(choice)) * num_drafts + torch.as_tensor(choice))
        accepted = accepted if isinstance(accepted, list) else accepted.tolist()
        self.crop(cache, [h - length + a for h, a in zip(cache.held, accepted)])

    def reindex(self, cache: Cache, rows: torch.Tensor | list[int]) -> None:
        """Keep rows ``rows`` [B'] of the cache, in that order (repeats allowed); a tensor or a list."""
        order = rows if isinstance(rows, list) else rows.tolist()
        if order == list(range(cache.batch_size)):
            return
        rows = torch.tensor(order, dtype=torch.int64)
        cache.select_rows(rows, order)
        self._reindex(cache, rows)
        self._drop_empty_columns(cache)

    def crop(self, cache: Cache, lengths: torch.Tensor | list[int]) -> None:
        """Keep the first ``lengths[b]`` tokens of row b (it must hold at least that many);
        ``lengths`` [B] is a tensor or a list."""
        if isinstance(lengths, list):
            lengths = list(lengths)  # the table keeps it as ``held``: never the caller's list
        else:
            lengths = torch.as_tensor(lengths, dtype=torch.int64)
            if lengths.dim() != 1:
                raise ValueError(f"crop: lengths must have shape [B], got {tuple(lengths.shape)}")
            lengths = lengths.tolist()
        if len(lengths) != cache.batch_size or not all(0 <= w <= h for w, h in zip(lengths, cache.held)):
            raise ValueError(f"crop: lengths {lengths} not within the rows' lengths {cache.held}")
        if lengths == cache.held:
            return
        if not cache.holes and min(lengths) == max(lengths):  # whole rows of one length: move the width
            cache.held = lengths
            self._set_width(cache, lengths[0])
            return
        valid = cache.valid
        valid &= torch.cumsum(valid, 1) <= torch.tensor(lengths)[:, None]  # in place: [B, T]
        cache.tokens.masked_fill_(~valid, 0)
        cache.held = lengths
        self._drop_empty_columns(cache)

    def lengths(self, cache: Cache) -> torch.Tensor:
        """Tokens held per row ``[B]``."""
        return torch.tensor(cache.held, dtype=torch.int64)

    def backend_length(self, cache: Cache) -> int:
        """Slots the backend state holds (it must equal the slot table's width between calls)."""
        return cache.width

    def _drop_empty_columns(self, cache: Cache) -> None:
        """Shrink the width to the last column some row uses (nothing to do without holes)."""
        if not cache.holes:
            return
        used = torch.nonzero(cache.valid.any(0))  # [n, 1]
        self._set_width(cache, int(used[-1]) + 1 if used.numel() else 0)

    def _set_width(self, cache: Cache, width: int) -> None:
        if width != cache.width:
            cache.width = width
            self._truncate(cache, width)

    # --- what a backend implements -------------------------------------------------------------
    def _new_backend(self, batch_size: int, features: bool = True) -> Any:
        return None

    @abstractmethod
    def _forward(
        self, cache: Cache, tokens: torch.Tensor, positions: torch.Tensor, holes: bool, num_logits: int
    ) -> torch.Tensor:
        """Logits [B, num_logits, V] (over the :attr:`support` where the model has one); the slot
        table already includes ``tokens`` [B, S];
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

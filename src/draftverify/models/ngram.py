"""An interpolated Kneser-Ney n-gram drafter over a tokenizer's token ids.

The estimate is interpolated Kneser-Ney (Kneser & Ney 1995; the interpolated form of Chen &
Goodman 1999, "An empirical study of smoothing techniques for language modeling", section 3.5)
with one absolute discount per order, ``D_n = n1 / (n1 + 2 n2)`` (Ney, Essen & Kneser 1994),
where ``n1``, ``n2`` count the n-grams of order n seen once and twice. With ``h`` the last
``n - 1`` tokens of the context and ``h'`` its last ``n - 2``::

    P_n(w | h) = max(c_n(h w) - D_n, 0) / c_n(h)  +  D_n N1+(h .) / c_n(h) * P_{n-1}(w | h')
    P_1(w)     = max(c_1(w) - D_1, 0) / c_1(.)    +  D_1 N1+(.) / c_1(.) / V

``c_N`` (top order) are raw counts; lower orders use continuation counts
``c_n(h w) = N1+(. h w)``, the number of distinct tokens seen before ``h w``. ``c_n(h) = sum_w
c_n(h w)`` and ``N1+(h .)`` is the number of distinct ``w`` after ``h``. A context unseen at order
n backs off entirely: ``P_n(w | h) = P_{n-1}(w | h')``. A context shorter than ``N - 1`` tokens
(the start of a prompt) is scored by the lower orders alone, whose counts are continuation counts:
a documented approximation, as sequences are not padded with a start symbol.

Only the top-order n-grams and their counts are stored (the lower orders are their suffixes);
a full next-token row is built from a dense unigram vector plus one sparse update per order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

_FILE = "ngram.npz"


def is_ngram_drafter(path: str | Path) -> bool:
    """Whether folder ``path`` holds an n-gram drafter (:meth:`NGramDrafter.save`)."""
    return (Path(path) / _FILE).is_file()


def _discount(counts: np.ndarray) -> float:
    """Ney's absolute discount n1 / (n1 + 2 n2) from the counts of one order."""
    n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
    return n1 / (n1 + 2 * n2) if n1 else 0.0


@dataclass(frozen=True)
class _Order:
    """Tables of one order n >= 2, grouped by context (sorted codes of the n - 1 context tokens)."""

    contexts: np.ndarray     # [C] int64, sorted context codes
    starts: np.ndarray       # [C + 1] int64, followers of context i are starts[i]:starts[i + 1]
    words: np.ndarray        # [M] int64 follower token ids
    numerators: np.ndarray   # [M] float64, max(c(h w) - D, 0) / c(h)
    gammas: np.ndarray       # [C] float64, D N1+(h .) / c(h)
    discount: float


def _build_order(keys: np.ndarray, counts: np.ndarray, vocab_size: int) -> _Order:
    """Group sorted n-gram codes ``keys`` (context code * V + word) with their counts."""
    discount = _discount(counts)
    context_codes, words = np.divmod(keys, vocab_size)
    contexts, first, followers = np.unique(context_codes, return_index=True, return_counts=True)
    totals = np.add.reduceat(counts.astype(np.float64), first)            # c(h)   [C]
    starts = np.append(first, len(keys)).astype(np.int64)
    numerators = np.maximum(counts - discount, 0.0) / np.repeat(totals, followers)
    return _Order(contexts, starts, words, numerators, discount * followers / totals, discount)


class NGramDrafter:
    """A smoothed n-gram model returning full next-token distributions (see the module doc)."""

    def __init__(self, top_keys: np.ndarray, top_counts: np.ndarray, vocab_size: int,
                 order: int) -> None:
        if order < 1 or vocab_size < 2:
            raise ValueError(f"order must be >= 1 and vocab_size >= 2, got {order}, {vocab_size}")
        if vocab_size ** order > 2 ** 63:  # codes lie in [0, V^N); every partial code is smaller
            raise ValueError(f"vocab_size ** order = {vocab_size}^{order} does not fit int64 codes")
        keys = np.asarray(top_keys, dtype=np.int64)
        counts = np.asarray(top_counts, dtype=np.int64)
        if keys.ndim != 1 or keys.shape != counts.shape or len(keys) == 0:
            raise ValueError("top_keys and top_counts must be equal-length non-empty 1-d arrays")
        if np.any(np.diff(keys) <= 0) or keys[0] < 0 or keys[-1] >= vocab_size ** order:
            raise ValueError("top_keys must be strictly increasing n-gram codes in range")
        if np.any(counts < 1):
            raise ValueError("top_counts must be >= 1")
        self.vocab_size, self.order = vocab_size, order
        self._top_keys, self._top_counts = keys, counts
        # orders N, N-1, ..., 1: continuation counts of order n = distinct order-(n+1) left contexts
        tables = {order: (keys, counts)}
        for n in range(order - 1, 0, -1):
            suffixes = tables[n + 1][0] % vocab_size ** n
            tables[n] = np.unique(suffixes, return_counts=True)
        self._orders = {n: _build_order(*tables[n], vocab_size) for n in range(2, order + 1)}
        unigram_words, unigram_counts = tables[1]
        discount = _discount(unigram_counts)
        total = float(unigram_counts.sum())
        unigram = np.full(vocab_size, discount * len(unigram_words) / total / vocab_size)
        unigram[unigram_words] += np.maximum(unigram_counts - discount, 0.0) / total
        self._unigram = unigram                                          # [V] float64
        self.discounts = (discount,) + tuple(self._orders[n].discount for n in range(2, order + 1))

    @property
    def num_ngrams(self) -> int:
        """How many distinct top-order n-grams the model stores."""
        return len(self._top_keys)

    @classmethod
    def train(cls, token_id_sequences: Iterable[Sequence[int] | np.ndarray], vocab_size: int,
              order: int = 4) -> "NGramDrafter":
        """Count the order-``order`` n-grams of each sequence (no padding) and build the model."""
        codes = []
        weights = vocab_size ** np.arange(order - 1, -1, -1, dtype=np.int64)  # [N]
        for sequence in token_id_sequences:
            ids = np.asarray(sequence, dtype=np.int64)
            if ids.ndim != 1:
                raise ValueError("each token id sequence must be 1-d")
            if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
                raise ValueError(f"token ids must lie in [0, {vocab_size})")
            if len(ids) >= order:
                windows = np.lib.stride_tricks.sliding_window_view(ids, order)    # [n, N]
                codes.append(windows @ weights)
        if not codes:
            raise ValueError(f"no sequence has the {order} tokens an order-{order} n-gram needs")
        keys, counts = np.unique(np.concatenate(codes), return_counts=True)
        return cls(keys, counts, vocab_size, order)

    def save(self, path: str | Path) -> None:
        """Write ``path/ngram.npz``: top-order n-grams as (context deltas, word, count), compressed."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        contexts, words = np.divmod(self._top_keys, self.vocab_size)
        word_dtype = np.uint16 if self.vocab_size <= 1 << 16 else np.uint32
        np.savez_compressed(path / _FILE, vocab_size=self.vocab_size, order=self.order,
                            context_deltas=np.diff(contexts, prepend=0),
                            words=words.astype(word_dtype),
                            counts=self._top_counts.astype(np.uint32))

    @classmethod
    def load(cls, path: str | Path) -> "NGramDrafter":
        """Load a drafter written by :meth:`save` (``path`` is its folder)."""
        file = Path(path) / _FILE
        if not file.exists():
            raise FileNotFoundError(f"no n-gram drafter at {path} (missing {_FILE})")
        with np.load(file) as data:
            vocab_size, order = int(data["vocab_size"]), int(data["order"])
            keys = np.cumsum(data["context_deltas"]) * vocab_size + data["words"].astype(np.int64)
            return cls(keys, data["counts"], vocab_size, order)

    def _fill(self, row: np.ndarray, context: tuple[int, ...]) -> None:
        """Write P_N(. | context) into ``row`` [V]. Unrolled recursion: with orders 2..m matched,
        P = (prod_n gamma_n) P_1 + sum_n (prod_{n' > n} gamma_n') numerators_n (sparse)."""
        matches = []
        for n in range(2, len(context) + 2):
            table = self._orders[n]
            code = 0
            for token in context[len(context) - (n - 1):]:
                code = code * self.vocab_size + token
            i = int(np.searchsorted(table.contexts, code))
            if i == len(table.contexts) or table.contexts[i] != code:
                break  # unseen context: this and every longer one back off entirely
            matches.append((table, i))
        scale = 1.0
        for table, i in matches:
            scale *= table.gammas[i]
        np.multiply(self._unigram, scale, out=row, casting="same_kind")
        scale = 1.0
        for table, i in reversed(matches):                   # highest order first
            lo, hi = table.starts[i], table.starts[i + 1]
            row[table.words[lo:hi]] += scale * table.numerators[lo:hi]
            scale *= table.gammas[i]

    def next_token_probs(self, contexts: list[list[int]] | torch.Tensor) -> torch.Tensor:
        """``[B, V]`` float32 next-token distributions for ``B`` contexts (lists of token ids or an
        int tensor ``[B, T]``); only the last ``order - 1`` tokens of each context matter."""
        if isinstance(contexts, torch.Tensor):
            if contexts.ndim != 2 or contexts.dtype.is_floating_point:
                raise ValueError(f"contexts tensor must be integer [B, T], got "
                                 f"{contexts.dtype} {tuple(contexts.shape)}")
            contexts = contexts.tolist()
        if len(contexts) == 0:
            raise ValueError("contexts must hold at least one context")
        keep = self.order - 1
        out = np.empty((len(contexts), self.vocab_size), dtype=np.float32)     # [B, V]
        for b, context in enumerate(contexts):
            tail = tuple(int(t) for t in context[-keep:]) if keep else ()
            if any(t < 0 or t >= self.vocab_size for t in tail):
                raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {tail}")
            self._fill(out[b], tail)
        return torch.from_numpy(out)

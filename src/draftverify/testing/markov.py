"""Known-law models: Markov chains of a fixed order over a small vocabulary.

The law of their first N tokens is enumerated exactly, so a decoder built on them can be checked
against it (see :mod:`draftverify.testing.checker`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MarkovModel", "KnownLawPair", "random_pair"]


@dataclass(frozen=True, eq=False)
class MarkovModel:
    """A Markov chain of order ``order`` over ``V`` tokens.

    ``table[c]`` is the next-token distribution after context c, contexts being numbered in base V
    (oldest token most significant). The chain starts from the context ``start``.
    """

    table: np.ndarray  # [V ** order, V]
    order: int
    start: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        table = np.asarray(self.table, dtype=np.float64)
        vocab = table.shape[-1]
        if table.ndim != 2 or table.shape[0] != vocab**self.order:
            raise ValueError(f"table must have shape [V**order, V], got {table.shape} for order {self.order}")
        if not np.all(np.isfinite(table)) or table.min() < 0 or np.abs(table.sum(-1) - 1).max() > 1e-9:
            raise ValueError("table rows must be probability vectors")
        start = tuple(self.start) or (0,) * self.order
        if len(start) != self.order or not all(0 <= t < vocab for t in start):
            raise ValueError(f"start must be {self.order} tokens in [0, {vocab})")
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "start", start)

    @property
    def vocab_size(self) -> int:
        return self.table.shape[-1]

    def context_index(self, tokens: np.ndarray) -> np.ndarray:
        """Context numbers of the last ``order`` tokens along the last axis of ``tokens``."""
        weights = self.vocab_size ** np.arange(self.order - 1, -1, -1)
        return tokens[..., -self.order :] @ weights

    def _context(self, history: list[int], end: int) -> int:
        index = 0
        for token in history[end - self.order : end]:
            index = index * self.vocab_size + token
        return index

    def conditional(self, prefix) -> np.ndarray:
        """Next-token distribution [V] after ``prefix`` (tokens emitted so far)."""
        history = list(self.start) + [int(t) for t in prefix]
        return self.table[self._context(history, len(history))]

    def conditionals(self, prefix, continuation) -> np.ndarray:
        """Distributions [n + 1, V] after prefix + continuation[:i] for i = 0..n."""
        history = list(self.start) + [int(t) for t in prefix] + [int(t) for t in continuation]
        first = len(self.start) + len(prefix)
        return self.table[[self._context(history, end) for end in range(first, len(history) + 1)]]

    def law(self, num_tokens: int) -> np.ndarray:
        """Exact probability of every sequence of ``num_tokens`` tokens: array of shape [V] * n."""
        vocab = self.vocab_size
        seqs = np.array(list(itertools.product(range(vocab), repeat=num_tokens)), dtype=np.int64)  # [V^n, n]
        history = np.concatenate([np.broadcast_to(np.asarray(self.start), (len(seqs), self.order)), seqs], axis=1)
        prob = np.ones(len(seqs))
        for t in range(num_tokens):
            prob *= self.table[self.context_index(history[:, t : t + self.order]), seqs[:, t]]
        return prob.reshape((vocab,) * num_tokens)


@dataclass(frozen=True, eq=False)
class KnownLawPair:
    """A target and a draft over the same vocabulary, both with enumerable laws.

    With ``deeper_draft`` the draft's law depends on its depth within a call, as a feature draft's
    (EAGLE: the first drafted token reads the target's state, the later ones the draft's own):
    ``draft`` gives the first drafted position of a call, ``deeper_draft`` every later one. A
    verifier whose state carries the draft's law from one call to the next (``gbv``'s target
    modification) is exact only when the draft's law is a function of the prefix.
    """

    target: MarkovModel
    draft: MarkovModel
    deeper_draft: MarkovModel | None = None

    def __post_init__(self) -> None:
        drafts = [self.draft] + ([self.deeper_draft] if self.deeper_draft is not None else [])
        if any(d.vocab_size != self.target.vocab_size for d in drafts):
            raise ValueError("target and draft must share the vocabulary")

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def depth_dependent(self) -> bool:
        return self.deeper_draft is not None

    def draft_conditional(self, prefix, drafted) -> np.ndarray:
        """The draft's law [V] at a call starting after ``prefix`` that has drafted ``drafted`` so
        far: at depth len(drafted) + 1."""
        model = self.deeper_draft if self.deeper_draft is not None and len(drafted) else self.draft
        return model.conditional(list(prefix) + [int(t) for t in drafted])


def random_pair(
    vocab_size: int = 4,
    order: int = 2,
    seed: int = 0,
    concentration: float = 0.7,
    draft_noise: float = 0.6,
    zero_share: float = 0.15,
    depth_dependent: bool = False,
) -> KnownLawPair:
    """A seeded random target/draft pair of Markov chains.

    Target rows are Dirichlet(``concentration``) with a share ``zero_share`` of entries set to zero
    (at least one token kept), so residuals and zero probabilities are exercised; draft rows mix the
    target with an independent Dirichlet draw: (1 - ``draft_noise``) T + ``draft_noise`` N, so the
    acceptance rate is moderate and a wrong verifier is visibly biased. ``depth_dependent`` adds a
    second draft table, drawn the same way, for the drafted positions after a call's first.
    """
    if vocab_size < 2 or order < 1:
        raise ValueError("need vocab_size >= 2 and order >= 1")
    if not 0 <= draft_noise <= 1 or not 0 <= zero_share < 1 or concentration <= 0:
        raise ValueError("need 0 <= draft_noise <= 1, 0 <= zero_share < 1, concentration > 0")
    rng = np.random.default_rng(seed)
    contexts = vocab_size**order
    target = rng.dirichlet(np.full(vocab_size, concentration), size=contexts)
    zeros = rng.random(target.shape) < zero_share
    zeros[np.arange(contexts), target.argmax(-1)] = False
    target = np.where(zeros, 0.0, target)
    target /= target.sum(-1, keepdims=True)

    def draft_table() -> np.ndarray:
        noise = rng.dirichlet(np.full(vocab_size, concentration), size=contexts)
        draft = (1 - draft_noise) * target + draft_noise * noise
        return draft / draft.sum(-1, keepdims=True)

    draft = draft_table()
    start = tuple(int(t) for t in rng.integers(0, vocab_size, size=order))
    deeper = MarkovModel(draft_table(), order, start) if depth_dependent else None
    return KnownLawPair(MarkovModel(target, order, start), MarkovModel(draft, order, start), deeper)

"""Shared factories for the theory tests: conditional tables (random, or from the project's known-law
Markov models), hypothesis strategies, and small vectorised simulations written independently of
the library's formulas."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import strategies as st

from draftverify.testing import MarkovModel
from tests.factories import random_distributions


def random_tables(rng: np.random.Generator, vocab: int, length: int, concentration: float = 1.0) -> list[np.ndarray]:
    """Conditional tables of a random autoregressive model: ``tables[i]`` of shape [V] * (i + 1)."""
    return [random_distributions(rng, *(vocab,) * (i + 1), concentration=concentration) for i in range(length)]


def markov_tables(model: MarkovModel, length: int) -> list[np.ndarray]:
    """The conditional tables of a :class:`MarkovModel` over its first ``length`` tokens."""
    vocab = model.vocab_size
    tables = []
    for i in range(length):
        prefixes = np.array(list(itertools.product(range(vocab), repeat=i)), dtype=np.int64).reshape(vocab**i, i)
        start = np.broadcast_to(np.asarray(model.start, dtype=np.int64), (len(prefixes), model.order))
        rows = model.table[model.context_index(np.concatenate([start, prefixes], axis=1))]  # [V^i, V]
        tables.append(rows.reshape((vocab,) * (i + 1)))
    return tables


def order_one_tables(rng: np.random.Generator, vocab: int, length: int, concentration: float = 1.0) -> list[np.ndarray]:
    """Tables of an order-1 Markov chain (next token depends on the last token only)."""
    first = random_distributions(rng, vocab, concentration=concentration)
    transition = random_distributions(rng, vocab, vocab, concentration=concentration)  # [V, V]
    return [first] + [np.broadcast_to(transition, (vocab,) * (i - 1) + (vocab, vocab)).copy() for i in range(1, length)]


@st.composite
def distribution_pairs(draw, min_vocab: int = 2, max_vocab: int = 6):
    """(target, draft) over V tokens, from seeded Dirichlet draws with varied concentration."""
    vocab = draw(st.integers(min_vocab, max_vocab))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    concentration = draw(st.sampled_from([0.2, 1.0, 5.0]))
    return random_distributions(rng, vocab, concentration=concentration), random_distributions(rng, vocab, concentration=concentration)


def categorical(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One draw per row of ``probs`` [N, V] (inverse CDF; zero-probability tokens never drawn)."""
    cdf = probs.cumsum(axis=-1)
    u = rng.random(len(probs)) * cdf[:, -1]
    return np.minimum((u[:, None] >= cdf).sum(axis=-1), probs.shape[-1] - 1)


def simulate_token_sd(target_tables, draft_tables, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted counts of token-level speculative sampling over one block, ``samples`` runs at once."""
    length = len(target_tables)
    prefix = np.zeros((samples, 0), dtype=np.int64)
    alive = np.ones(samples, dtype=bool)
    accepted = np.zeros(samples, dtype=np.int64)
    rows = np.arange(samples)
    for i in range(length):
        index = tuple(prefix[:, j] for j in range(i))
        draft = draft_tables[i][index] if i else np.broadcast_to(draft_tables[0], (samples, len(draft_tables[0])))
        target = target_tables[i][index] if i else np.broadcast_to(target_tables[0], draft.shape)
        token = categorical(rng, draft)
        ratio = target[rows, token] / draft[rows, token]
        alive &= rng.random(samples) < np.minimum(ratio, 1.0)
        accepted += alive
        prefix = np.concatenate([prefix, token[:, None]], axis=1)
    return accepted

"""Small vectorised simulations for the theory tests, written independently of the library's
formulas (their tables come from ``tests.factories``)."""

from __future__ import annotations

import numpy as np


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

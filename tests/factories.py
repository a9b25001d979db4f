"""The one factory of random distributions for the tests: seeded Dirichlet rows, and verifier
inputs built from them (draft tokens sampled from their draft rows); and any registered verifier."""

from __future__ import annotations

import numpy as np
import torch

from draftverify import get_verifier
from draftverify.verify.sprinter import RateClassifier


def random_distributions(rng: np.random.Generator | int, *shape: int, concentration: float = 1.0) -> np.ndarray:
    """Probability vectors of shape ``[*shape]`` (the last axis is V), Dirichlet(``concentration``)
    rows drawn from ``rng`` (a numpy Generator, or a seed): small concentrations give peaked rows
    with near-zero entries, large ones rows close to uniform."""
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    *rows, vocab = shape
    return rng.dirichlet(np.full(vocab, concentration), size=tuple(rows) or None)


def random_verify_inputs(
    seed: int, num_drafts: int = 1, length: int = 3, vocab: int = 5, dtype: torch.dtype = torch.float64,
    concentration: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Arrays of the verifier contract: draft tokens ``[K, L]`` sampled from draft rows
    ``[K, L, V]``, and target rows ``[K, L + 1, V]``, all from one seed."""
    rng = np.random.default_rng(seed)
    draft = random_distributions(rng, num_drafts, length, vocab, concentration=concentration)
    target = random_distributions(rng, num_drafts, length + 1, vocab, concentration=concentration)
    tokens = np.array([[rng.choice(vocab, p=draft[k, i]) for i in range(length)] for k in range(num_drafts)])
    return torch.from_numpy(tokens), torch.from_numpy(draft).to(dtype), torch.from_numpy(target).to(dtype)


def registered_verifier(name: str, **options):
    """Any registered verifier with ``options``; ``sprinter`` gets the rate classifier it requires
    (a test device that says "yes" by given rates)."""
    if name == "sprinter":
        options = {"classifier": RateClassifier(), **options}
    return get_verifier(name, **options)

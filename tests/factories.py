"""The one factory of random distributions for the tests: seeded Dirichlet rows, and verifier
inputs built from them (draft tokens sampled from their draft rows); any registered verifier; and
the synthetic SPRINTER classifier of given rates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from draftverify import get_verifier


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


@dataclass(frozen=True, eq=False)
class RateClassifier:
    """A synthetic classifier with given rates, for testing the theory: it looks at the truth and
    says "yes" with probability ``false_positive_rate`` when D(x) > T(x), ``true_positive_rate``
    otherwise. Each rate is a number or an array ``[V]`` indexed by the drafted token."""

    false_positive_rate: Any = 0.0
    true_positive_rate: Any = 1.0

    scored = False  # no score: the threshold does not apply

    def __post_init__(self) -> None:
        for name in ("false_positive_rate", "true_positive_rate"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.ndim > 1 or not np.all((value >= 0) & (value <= 1)):
                raise ValueError(f"{name}: expected a number or a [V] array in [0, 1], got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)

    def yes_probability(self, tokens, draft_probs, *, hidden=None, target_probs=None, threshold=0.5) -> torch.Tensor:
        if target_probs is None:
            raise ValueError("RateClassifier looks at the target's probabilities: it is a test device, not for the engine")
        at = tokens.long().unsqueeze(-1)  # [N, 1]
        unacceptable = (draft_probs.gather(-1, at) > target_probs.gather(-1, at))[:, 0]  # [N]
        rates = [torch.from_numpy(np.broadcast_to(r, (draft_probs.shape[-1],)).copy())[tokens.long()]
                 for r in (self.false_positive_rate, self.true_positive_rate)]
        return torch.where(unacceptable, rates[0], rates[1])  # [N] float64

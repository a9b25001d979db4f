"""Exact laws by enumeration: replay a randomised procedure over every branch of its draws.

Verifiers draw only through :mod:`draftverify.rng`; given a :class:`~draftverify.rng.BranchingSource`
instead of a generator, those draws follow a script of branch choices. Replaying the procedure for
every script (depth first) visits every outcome with its exact probability.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any, Callable, Hashable

import torch

from ..rng import BranchingSource

__all__ = ["enumerate_outcomes", "exact_output_law"]


class _Replay(BranchingSource):
    """Follows ``script`` (indices into each draw's positive-probability outcomes); past its end it
    takes each draw's first outcome and leaves the scripts of the others in ``pending``, so every
    replay runs to an outcome."""

    def __init__(self, script: list[int], pending: list[list[int]]):
        self.script, self.pending = script, pending
        self.position = 0
        self.weight = 1.0

    def _choose(self, outcomes: list[tuple[Any, float]]):
        if self.position == len(self.script):  # a draw no replay has reached: branch here
            self.pending.extend(self.script + [i] for i in range(1, len(outcomes)))
            self.script.append(0)
        value, prob = outcomes[self.script[self.position]]
        self.position += 1
        self.weight *= prob
        return value

    def bernoulli(self, probs: torch.Tensor) -> torch.Tensor:
        flat = probs.detach().to(torch.float64).clamp(0, 1).flatten().tolist()
        outcomes = []
        for pattern in itertools.product((False, True), repeat=len(flat)):
            prob = 1.0
            for hit, p in zip(pattern, flat):
                prob *= p if hit else 1 - p
            if prob > 0:
                outcomes.append((pattern, prob))
        pattern = self._choose(outcomes)
        return torch.tensor(pattern, dtype=torch.bool).reshape(probs.shape)

    def categorical(self, weights: torch.Tensor) -> int:
        w = weights.detach().to(torch.float64)
        support = torch.nonzero(w > 0).flatten()
        if support.numel() == 0:
            raise ValueError("categorical: all weights are zero (nothing to sample)")
        probs = (w[support] / w.sum()).tolist()
        return self._choose(list(zip(support.tolist(), probs)))


def enumerate_outcomes(procedure: Callable[[BranchingSource], Hashable]) -> dict[Hashable, float]:
    """Exact law of ``procedure(source)``'s return value over all branches of its draws.

    ``procedure`` must draw only through ``draftverify.rng`` with the source it is given and must be
    deterministic otherwise. Cost: one replay per outcome branch (each runs to its end), so keep
    the tree small.
    """
    law: dict[Hashable, float] = defaultdict(float)
    stack: list[list[int]] = [[]]
    while stack:
        script = stack.pop()
        source = _Replay(script, stack)
        outcome = procedure(source)
        if source.position != len(script):
            raise RuntimeError("procedure is not deterministic given its draws")
        law[outcome] += source.weight
    return dict(law)


def exact_output_law(verifier, draft_tokens, draft_probs, target_probs, state=None) -> dict[tuple[int, ...], float]:
    """Exact law of the tokens one ``verify`` call commits, for fixed drafts."""
    return enumerate_outcomes(
        lambda source: tuple(verifier.verify(draft_tokens, draft_probs, target_probs, generator=source, state=state).tokens)
    )

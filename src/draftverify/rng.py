"""Random draws for verifiers and decoding loops.

Every verifier draws its randomness through the two functions here, passing the caller's
``generator``. A generator is a ``torch.Generator`` (or ``None`` for torch's default), or a
:class:`BranchingSource`: an object that, instead of drawing, decides which branch to follow.
``draftverify.testing.exact_output_law`` uses one to replay a verifier over every branch and compute its
exact output law, so any verifier that draws only through this module can be checked by
enumeration as well as by sampling.

Uniforms are float64: float32 uniforms can be exactly 0 and would accept a zero-probability event.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["BranchingSource", "Coins", "bernoulli", "categorical", "check_generator", "inverse_cdf", "sample"]


class BranchingSource:
    """A source of choices rather than of random numbers (used for exact enumeration)."""

    def bernoulli(self, probs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def categorical(self, weights: torch.Tensor) -> int:  # pragma: no cover - interface
        raise NotImplementedError


def check_generator(generator: Any, *, branching: bool = True) -> None:
    """Raise ``ValueError`` unless ``generator`` is a ``torch.Generator``, None, or (when
    ``branching``) a :class:`BranchingSource`. Public entry points call it once; the draws below
    call it only when torch has already refused the generator, so a valid one costs nothing."""
    if generator is None or isinstance(generator, torch.Generator):
        return
    if branching and isinstance(generator, BranchingSource):
        return
    kind = type(generator)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    allowed = "a torch.Generator (e.g. torch.Generator().manual_seed(0))" + (
        ", a draftverify.rng.BranchingSource" if branching else ""
    )
    raise ValueError(f"generator: expected {allowed} or None, got {name}")


def bernoulli(probs: torch.Tensor, generator: torch.Generator | BranchingSource | None) -> torch.Tensor:
    """Independent coin flips: ``out[i]`` is True with probability ``probs[i]`` (clamped to [0, 1]
    only against float rounding of already valid probabilities)."""
    if isinstance(generator, BranchingSource):
        return generator.bernoulli(probs)
    return _uniforms(probs.shape, generator) < probs  # [n] compared in float64 (type promotion)


class Coins:
    """``count`` independent coins tossed one at a time, each with its own success probability.

    With a torch generator the uniforms are drawn in one call up front and each toss is a Python
    comparison (no tensor op per toss); with a :class:`BranchingSource` each toss is a branch.
    """

    def __init__(self, count: int, generator: torch.Generator | BranchingSource | None):
        self._source = generator if isinstance(generator, BranchingSource) else None
        self._uniforms = None if self._source else _uniforms(count, generator).tolist()

    def toss(self, index: int, prob: float) -> bool:
        """Coin ``index``: True with probability ``prob``."""
        if self._source is not None:
            return bool(self._source.bernoulli(torch.tensor([prob], dtype=torch.float64))[0])
        return self._uniforms[index] < prob

    def toss_below(self, index: int, bound: float, prob: Callable[[], float]) -> bool:
        """Coin ``index`` with success probability ``min(bound, prob())``; ``prob`` is called only
        when the coin's uniform falls below ``bound``, so a coin that cannot succeed costs nothing
        (a branching source, which needs the probability itself, always calls it)."""
        if self._source is not None:
            return self.toss(index, min(bound, prob()))
        uniform = self._uniforms[index]
        return uniform < bound and uniform < prob()


def inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The index of each row of the non-negative ``weights`` [N, V] (rows with positive mass) that
    the uniform ``uniforms[n]`` in [0, 1) selects, in float64: the first index whose cumulative
    weight exceeds u times the row's mass. An index of zero weight is never returned.

    No host synchronisation (the batched kernels call it on any device): when u * total rounds up
    to the total, the index is the first at which the cumulative weight reaches the total. In
    binary64 that rounding happens only for totals <= 2^-1022, where every partial sum is exact,
    so that index is the last one of positive weight."""
    cdf = torch.cumsum(weights, -1, dtype=torch.float64)  # [N, V]
    total = cdf[:, -1:].contiguous()  # [N, 1]
    index = torch.searchsorted(cdf, uniforms.to(torch.float64).reshape(-1, 1) * total, right=True)
    reached = torch.searchsorted(cdf, total, right=False)  # [N, 1]
    return torch.minimum(index, reached)[:, 0]  # [N]


def categorical(weights: torch.Tensor, generator: torch.Generator | BranchingSource | None,
                fallback: torch.Tensor | None = None) -> int:
    """One index drawn with probability proportional to the non-negative ``weights`` [V].

    The weights need not be normalised (residuals are passed as they are). Inverse CDF in float64,
    the arithmetic of :func:`inverse_cdf` (so a batched kernel draws the same index from the same
    uniform): an index with zero weight is never returned. When all weights are zero the draw is
    from ``fallback`` [V] if given, else ``ValueError`` is raised.

    The fallback is how every verifier draws its correction token: from a residual such as
    (T - D)_+, which has positive mass whenever a rejection has positive probability, or else from
    the target's row. A zero mass means T = D at this node to float precision: the rejection had
    probability 0 and was reached by rounding, and the target's row is the law the token must have.

    One row costs a prefix sum, one read of its last entry and one search (five tensor ops: on a
    CPU each op's fixed cost, not the pass over V, dominates up to V of a few thousand).
    """
    if isinstance(generator, BranchingSource):
        if fallback is not None and not bool(weights.sum() > 0):
            weights = fallback
        return generator.categorical(weights)
    cdf = torch.cumsum(weights, 0, dtype=torch.float64)  # [V]
    total = float(cdf[-1])
    if not total > 0:  # NaN fails too
        if fallback is None:
            raise ValueError("categorical: all weights are zero (nothing to sample)")
        return categorical(fallback, generator)
    point = _uniforms(1, generator).mul_(total)  # [1] u * total, float64 as in inverse_cdf
    index = int(torch.searchsorted(cdf, point, right=True))
    if index == cdf.numel():  # u * total rounded up to the total (see inverse_cdf)
        index = int(torch.searchsorted(cdf, cdf[-1:], right=False))
    return index


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row of ``probs`` [N, V] (the decoding loop's draws; ``torch.multinomial`` is
    several times slower on CPU at V in the thousands). Same inverse CDF as :func:`categorical`."""
    return inverse_cdf(probs, _uniforms(probs.shape[0], generator))


def _uniforms(shape: int | torch.Size, generator: torch.Generator | None) -> torch.Tensor:
    try:
        return torch.rand(shape, generator=generator, dtype=torch.float64)  # [*shape] in [0, 1)
    except TypeError:  # torch refused the generator: say why in our words
        check_generator(generator, branching=False)
        raise

"""Acceptance pooled over verified tokens (seed 002): accepted / (accepted + rejected tests).

A verify call tests drafted tokens left to right; one that kept fewer than L draft tokens made
exactly one rejected test, and the drafted tokens after it were never tested, so they count for
nothing. The engine's statistics, the exactness checker, ``generate``'s footer and
``bench speed`` all report this one number.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["rejected_tests", "pooled_acceptance"]


def rejected_tests(accepted_per_call: Iterable[int], draft_length: int) -> int:
    """Number of calls that kept fewer than ``draft_length`` (L) draft tokens: one rejected test each."""
    return sum(int(accepted) < draft_length for accepted in accepted_per_call)


def pooled_acceptance(accepted: int, rejections: int) -> float | None:
    """accepted / (accepted + rejections), pooled over calls (and prompts); None when nothing was tested."""
    tested = accepted + rejections
    return accepted / tested if tested else None

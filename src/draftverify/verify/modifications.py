"""The pending target modifications of the greedy block verifiers (``gbv``, ``spectr-gbv``).

A greedy block verifier keeps more per call than the ordinary loop can pay for, and is exact only
if the next calls replace the next L - tau - 1 target conditionals by a modified law (Sun et al.,
arXiv 2403.10444v1; seed 004 section 3.3 and Algorithm 2). The next call may commit fewer tokens
than a modification covers, so a modification can outlive it: the pending ones form a stack,
oldest first, each applied over the target as modified by the older ones (our correction to the
seeds). This module holds that stack; what a modification does to a row, and the scalar
``weight`` it carries, is each verifier's (``gbv``: the ratio nu, :mod:`.block`; ``spectr-gbv``:
D(c) / T(c), :mod:`.spectr_gbv`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

__all__ = ["PendingModification", "ModificationStack"]

Stack = TypeVar("Stack", bound="ModificationStack")


@dataclass(frozen=True)
class PendingModification:
    """The next ``remaining`` target conditionals (after the tokens committed so far) are modified;
    ``weight`` is the verifier's scalar for it."""

    remaining: int
    weight: float


@dataclass(frozen=True)
class ModificationStack:
    """The modifications still pending, oldest first (at most L - 1 are active at once). Each
    verifier subclasses it, so one verifier's state is never read by another."""

    modifications: tuple[PendingModification, ...]
    verifier: ClassVar[str] = ""

    @classmethod
    def pending(cls, state: Any, length: int) -> tuple[PendingModification, ...]:
        """The modifications of ``state`` (None: none) for a call with draft length ``length``;
        ``ValueError`` for another verifier's state or a modification longer than the draft."""
        if state is None:
            return ()
        if not isinstance(state, cls):
            raise ValueError(f"{cls.verifier}: state must be None or the {cls.__name__} of the previous call, got {type(state).__name__}")
        for mod in state.modifications:
            if mod.remaining > length:
                raise ValueError(
                    f"{cls.verifier}: the state modifies {mod.remaining} positions but this draft has only L = {length}; "
                    "keep the draft length >= the previous one within a decoding"
                )
        return state.modifications

    @staticmethod
    def min_draft_length(state: Any) -> int:
        """The shortest draft the next call may have: the longest pending modification when
        ``state`` is a stack holding one (a draft-length policy must not go below it: the modified
        target conditionals must be verified), else 0 (any L; 0 is a step of the target alone)."""
        if not isinstance(state, ModificationStack):
            return 0
        return max((mod.remaining for mod in state.modifications), default=0)

    @classmethod
    def after_call(
        cls: type[Stack],
        modifications: Sequence[PendingModification],
        below: Sequence[Any],
        tau: int,
        length: int,
        carried_weight: Callable[[PendingModification, Any], float],
        new_weight: Callable[[], float],
    ) -> Stack | None:
        """The state for the next call after committing x^tau and one more token: every pending
        modification that covers more than the tau + 1 committed positions survives, shortened,
        with weight ``carried_weight(mod, below[i])`` (``below[i]``: the rows under it); a new one
        of weight ``new_weight()`` covers the next L - tau - 1 positions when tau < L - 1."""
        committed = tau + 1
        carried = [
            PendingModification(mod.remaining - committed, carried_weight(mod, rows))
            for mod, rows in zip(modifications, below)
            if mod.remaining > committed  # then tau < remaining <= L: rows 0..tau exist below it
        ]
        if tau < length - 1:
            carried.append(PendingModification(length - tau - 1, new_weight()))
        return cls(tuple(carried)) if carried else None

"""Draft-length policies: each step's L chosen from the decoding's past only.

A policy is a frozen object with three pure methods over an immutable, hashable state (one per
prompt): ``initial()``, ``choose(state) -> L`` before the step drafts, and
``update(state, draft_length, accepted, seconds) -> state`` after it is verified. The choice depends
on past steps only, never on the draft it is about to verify, so every exact verifier stays exact:
given the past, a call with any fixed L commits a block whose law is the target's, and the next
call starts afresh from the committed prefix (``check --draft-length auto`` shows it by
enumeration; a twin that picks L after seeing the draft fails, tests/testing/test_draft_length.py).
A verifier whose state modifies the next m target conditionals (``gbv``) gets L >= m whatever the
policy says (:meth:`~draftverify.verify.modifications.ModificationStack.min_draft_length`): that floor
too comes from the past.

- :class:`AutoDraftLength` (``draft_length="auto"``): maximises predicted tokens per second,
  E(L) / t_step(L), with E(L) = 1 + sum_{l<=L} prod_{i<=l} beta_i (seed 002's expected
  tokens per step, written with per-position acceptance as :func:`draftverify.theory.acceptance_profile`
  does) and beta_i a running estimate of P(position i accepted | positions < i accepted). The costs
  are given (``draft_cost``, ``target_costs``: t_step(L) = L t_d + t_T(L), any one unit), or
  measured from the decoding's own steps: the whole wall time of a step (its draft phase, target
  call, verification, commit and the engine's bookkeeping, from one update to the next) as two
  least-squares lines in L, the draft phase's and the rest's (the terms of
  :class:`draftverify.theory.tuning.StepCosts`). Then the choice of L, though not the law, depends
  on the machine's timings, and :meth:`~AutoDraftLength.update` reads a clock.
- :class:`HeuristicDraftLength` (``draft_length="heuristic"``): transformers'
  ``num_assistant_tokens_schedule="heuristic"``, L + 2 after a fully accepted draft, L - 1 otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..theory.tuning import least_squares_line

__all__ = ["AUTO", "HEURISTIC", "AutoDraftLength", "AutoState", "DraftLengthPolicy", "HeuristicDraftLength",
           "StepSeconds", "draft_length_policy"]

AUTO, HEURISTIC = "auto", "heuristic"
MAX_LENGTH = 8  # the default upper bound on L of both policies


@dataclass(frozen=True)
class StepSeconds:
    """What one step cost: its draft forwards (``draft_calls`` of them), and its target call with
    the verification after it (the part of a step that does not grow with the draft's forwards)."""

    draft_seconds: float
    draft_calls: int
    target_seconds: float


class DraftLengthPolicy(Protocol):
    min_length: int
    max_length: int

    def initial(self) -> object: ...

    def choose(self, state: object) -> int: ...

    def update(self, state: object, draft_length: int, accepted: int, seconds: StepSeconds | None) -> object: ...


def _check_bounds(policy) -> None:
    if policy.min_length < 1:
        raise ValueError(f"min_length must be >= 1, got {policy.min_length}")
    if policy.max_length < policy.min_length:
        raise ValueError(f"the bounds on L exclude every length: min_length = {policy.min_length} > "
                         f"max_length = {policy.max_length}")


@dataclass(frozen=True)
class AutoState:
    """Per position i = 1..max_length: (decayed) counts of steps that tested and that accepted it;
    the steps seen; per L = 1..max_length the measured steps, their draft phases' seconds and the
    rest of their wall time (the first step is left out: it holds the prefill); the clock at the
    last update (None before it, or with given costs)."""

    tested: tuple[float, ...]
    accepted: tuple[float, ...]
    steps: int = 0
    measured: tuple[int, ...] = ()
    draft_seconds: tuple[float, ...] = ()
    rest_seconds: tuple[float, ...] = ()
    clock: float | None = None


def _line(measured: tuple[int, ...], seconds: tuple[float, ...], through_zero: bool) -> list[float]:
    """Mean seconds of a step at L = 1..max_length: the least-squares line over the L measured
    (slope >= 0: a step never gets cheaper with more tokens), flat where one L was measured (or
    proportional to L with ``through_zero``: the draft phase, made of L forwards)."""
    seen = [length for length, n in enumerate(measured, 1) if n]
    means = [seconds[length - 1] / measured[length - 1] for length in seen]
    if len(seen) == 1 and through_zero:
        return [means[0] * length / seen[0] for length in range(1, len(measured) + 1)]
    intercept, slope = least_squares_line(seen, means, [measured[length - 1] for length in seen])
    if slope < 0:
        intercept, slope = sum(seconds) / sum(measured), 0.0
    return [intercept + slope * length for length in range(1, len(measured) + 1)]


@dataclass(frozen=True)
class AutoDraftLength:
    """``draft_length="auto"`` (see the module doc). ``prior`` is the acceptance assumed before any
    observation, held with ``prior_weight`` pseudo-steps (as is each position's predecessor); ``decay`` < 1 forgets old steps
    geometrically. ``draft_cost`` t_d and ``target_costs`` (t_T(L) for L = 1..max_length) are
    both given or both measured (None; ``clock`` gives the time of each update)."""

    min_length: int = 1
    max_length: int = MAX_LENGTH
    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 1.0
    draft_cost: float | None = None
    target_costs: tuple[float, ...] | None = field(default=None)
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_bounds(self)
        if not 0 < self.prior < 1 or self.prior_weight <= 0:
            raise ValueError(f"prior must lie in (0, 1) and prior_weight be > 0, got {self.prior}, {self.prior_weight}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"decay must lie in (0, 1], got {self.decay}")
        if (self.draft_cost is None) != (self.target_costs is None):
            raise ValueError("draft_cost and target_costs are given together or not at all")
        if self.target_costs is not None:
            object.__setattr__(self, "target_costs", tuple(float(c) for c in self.target_costs))
            if len(self.target_costs) != self.max_length or self.draft_cost < 0 or min(self.target_costs) <= 0:
                raise ValueError(f"target_costs must hold max_length = {self.max_length} costs > 0 "
                                 f"(and draft_cost be >= 0), got {self.target_costs}, {self.draft_cost}")

    def initial(self) -> AutoState:
        zeros = (0.0,) * self.max_length
        return AutoState(tested=zeros, accepted=zeros, measured=(0,) * self.max_length, draft_seconds=zeros,
                         rest_seconds=zeros)

    def acceptance(self, state: AutoState) -> list[float]:
        """beta_i for i = 1..max_length: the running estimate at position i, shrunk towards beta_{i-1}
        (towards ``prior`` for i = 1), so a position never tested takes its predecessor's value."""
        betas, previous = [], self.prior
        for tested, accepted in zip(state.tested, state.accepted):
            previous = (accepted + previous * self.prior_weight) / (tested + self.prior_weight)
            betas.append(previous)
        return betas

    def step_seconds(self, state: AutoState) -> list[float] | None:
        """t_step(L) for L = 1..max_length: given, or measured (then None until a step after the
        first was measured): the draft phase's line plus the line of the rest of a step."""
        if self.draft_cost is not None:
            return [length * self.draft_cost + target for length, target in enumerate(self.target_costs, 1)]
        if not any(state.measured):
            return None
        draft = _line(state.measured, state.draft_seconds, through_zero=True)
        rest = _line(state.measured, state.rest_seconds, through_zero=False)
        return [max(d + r, 1e-9) for d, r in zip(draft, rest)]

    def choose(self, state: AutoState) -> int:
        seconds = self.step_seconds(state)
        if seconds is None:  # nothing measured yet: a middle length, to measure from
            return min(max(4, self.min_length), self.max_length)
        best, best_rate, expected, survive = self.min_length, -1.0, 1.0, 1.0
        for length, beta in enumerate(self.acceptance(state), 1):
            survive *= beta
            expected += survive
            if length >= self.min_length:
                rate = expected / seconds[length - 1]
                if rate > best_rate:
                    best, best_rate = length, rate
        return best

    def update(self, state: AutoState, draft_length: int, accepted: int, seconds: StepSeconds | None) -> AutoState:
        # positions 1..min(accepted + 1, L) were tested; the first `accepted` of them passed
        tested = [t * self.decay + (i < min(accepted + 1, draft_length)) for i, t in enumerate(state.tested)]
        passed = [a * self.decay + (i < accepted) for i, a in enumerate(state.accepted)]
        new = replace(state, tested=tuple(tested), accepted=tuple(passed), steps=state.steps + 1)
        if seconds is None or self.draft_cost is not None:
            return new
        now = self.clock()
        if state.clock is None:  # the first step holds the prefill: its end starts the clock
            return replace(new, clock=now)
        # from the last update to this one: the last step's commit, then this step's draft, target and verifier
        index = draft_length - 1
        measured, draft_seconds, rest_seconds = list(state.measured), list(state.draft_seconds), list(state.rest_seconds)
        measured[index] += 1
        draft_seconds[index] += seconds.draft_seconds
        rest_seconds[index] += now - state.clock - seconds.draft_seconds
        return replace(new, measured=tuple(measured), draft_seconds=tuple(draft_seconds),
                       rest_seconds=tuple(rest_seconds), clock=now)


@dataclass(frozen=True)
class HeuristicDraftLength:
    """transformers' heuristic schedule (``num_assistant_tokens_schedule="heuristic"``): start at
    ``initial_length``; L + 2 after a fully accepted draft, L - 1 otherwise; kept in the bounds."""

    min_length: int = 1
    max_length: int = MAX_LENGTH
    initial_length: int = 4

    def __post_init__(self) -> None:
        _check_bounds(self)
        if not self.min_length <= self.initial_length <= self.max_length:
            raise ValueError(f"initial_length = {self.initial_length} lies outside [{self.min_length}, {self.max_length}]")

    def initial(self) -> int:
        return self.initial_length

    def choose(self, state: int) -> int:
        return state

    def update(self, state: int, draft_length: int, accepted: int, seconds: StepSeconds | None) -> int:
        step = 2 if accepted == draft_length else -1
        return min(max(draft_length + step, self.min_length), self.max_length)


def draft_length_policy(name: str, *, min_length: int = 1, max_length: int = MAX_LENGTH) -> DraftLengthPolicy:
    """The policy called ``name`` (``"auto"`` or ``"heuristic"``) with bounds on L."""
    policies = {AUTO: AutoDraftLength, HEURISTIC: HeuristicDraftLength}
    if name not in policies:
        raise ValueError(f"draft_length: expected a number >= 1, {AUTO!r} or {HEURISTIC!r}, got {name!r}")
    if name == HEURISTIC:
        return HeuristicDraftLength(min_length, max_length, min(max(4, min_length), max_length))
    return AutoDraftLength(min_length, max_length)

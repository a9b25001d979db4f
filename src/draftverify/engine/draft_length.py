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
  E(L) / (L t_d + t_T(L)), with E(L) = 1 + sum_{l<=L} prod_{i<=l} beta_i (seed 002's expected
  tokens per step, written with per-position acceptance as :func:`draftverify.theory.acceptance_profile`
  does) and beta_i a running estimate of P(position i accepted | positions < i accepted). The costs
  are given (``draft_cost``, ``target_costs``: any one unit), or measured from the decoding's own
  step timings (then the choice of L, though not the law, depends on the machine's timings).
- :class:`HeuristicDraftLength` (``draft_length="heuristic"``): transformers'
  ``num_assistant_tokens_schedule="heuristic"``, L + 2 after a fully accepted draft, L - 1 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

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
    the steps seen; the measured costs: draft seconds and calls, and per L target seconds and calls
    (the first step's are left out: they hold the prompt's prefill)."""

    tested: tuple[float, ...]
    accepted: tuple[float, ...]
    steps: int = 0
    draft_seconds: float = 0.0
    draft_calls: int = 0
    target_seconds: tuple[float, ...] = ()
    target_calls: tuple[int, ...] = ()


@dataclass(frozen=True)
class AutoDraftLength:
    """``draft_length="auto"`` (see the module doc). ``prior`` is the acceptance assumed before any
    observation, held with ``prior_weight`` pseudo-steps (as is each position's predecessor); ``decay`` < 1 forgets old steps
    geometrically. ``draft_cost`` t_d and ``target_costs`` (t_T(L) for L = 1..max_length) are
    both given or both measured (None)."""

    min_length: int = 1
    max_length: int = MAX_LENGTH
    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 1.0
    draft_cost: float | None = None
    target_costs: tuple[float, ...] | None = field(default=None)

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
        return AutoState(tested=zeros, accepted=zeros, target_seconds=zeros, target_calls=(0,) * self.max_length)

    def acceptance(self, state: AutoState) -> list[float]:
        """beta_i for i = 1..max_length: the running estimate at position i, shrunk towards beta_{i-1}
        (towards ``prior`` for i = 1), so a position never tested takes its predecessor's value."""
        betas, previous = [], self.prior
        for tested, accepted in zip(state.tested, state.accepted):
            previous = (accepted + previous * self.prior_weight) / (tested + self.prior_weight)
            betas.append(previous)
        return betas

    def costs(self, state: AutoState) -> tuple[float, list[float]] | None:
        """(t_d, [t_T(L) for L = 1..max_length]); measured ones need a step first. t_T(L) is the
        least-squares line through the measured mean seconds per L (flat while one L was seen)."""
        if self.draft_cost is not None:
            return self.draft_cost, list(self.target_costs)
        seen = [(length, s / n) for length, (s, n) in enumerate(zip(state.target_seconds, state.target_calls), 1) if n]
        if not seen or not state.draft_calls:
            return None
        mean_length = sum(length for length, _ in seen) / len(seen)
        mean_seconds = sum(s for _, s in seen) / len(seen)
        spread = sum((length - mean_length) ** 2 for length, _ in seen)
        slope = sum((length - mean_length) * (s - mean_seconds) for length, s in seen) / spread if spread else 0.0
        slope = max(slope, 0.0)  # a target call never gets cheaper with more tokens
        lines = [mean_seconds + slope * (length - mean_length) for length in range(1, self.max_length + 1)]
        return state.draft_seconds / state.draft_calls, [max(s, 1e-9) for s in lines]

    def choose(self, state: AutoState) -> int:
        costs = self.costs(state)
        if costs is None:  # nothing measured yet: a middle length, to measure from
            return min(max(4, self.min_length), self.max_length)
        draft_seconds, target_seconds = costs
        best, best_rate, expected, survive = self.min_length, -1.0, 1.0, 1.0
        for length, beta in enumerate(self.acceptance(state), 1):
            survive *= beta
            expected += survive
            if length >= self.min_length:
                rate = expected / (length * draft_seconds + target_seconds[length - 1])
                if rate > best_rate:
                    best, best_rate = length, rate
        return best

    def update(self, state: AutoState, draft_length: int, accepted: int, seconds: StepSeconds | None) -> AutoState:
        # positions 1..min(accepted + 1, L) were tested; the first `accepted` of them passed
        tested = [t * self.decay + (i < min(accepted + 1, draft_length)) for i, t in enumerate(state.tested)]
        passed = [a * self.decay + (i < accepted) for i, a in enumerate(state.accepted)]
        new = replace(state, tested=tuple(tested), accepted=tuple(passed), steps=state.steps + 1)
        if seconds is None or self.draft_cost is not None or state.steps == 0:  # the first step holds the prefill
            return new
        target_seconds, target_calls = list(state.target_seconds), list(state.target_calls)
        target_seconds[draft_length - 1] += seconds.target_seconds
        target_calls[draft_length - 1] += 1
        return replace(new, draft_seconds=state.draft_seconds + seconds.draft_seconds,
                       draft_calls=state.draft_calls + seconds.draft_calls,
                       target_seconds=tuple(target_seconds), target_calls=tuple(target_calls))


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

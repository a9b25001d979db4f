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
  does) and beta_i a running estimate of P(position i accepted | positions < i accepted). L = 0 is
  one of its choices: a step of the target alone (``ar``: E(0) = 1 token, t_step(0) a one-token
  call), so where drafting cannot pay (a target whose multi-token call is dear, a draft that the
  target rarely agrees with) the decoding runs at the speed of ``ar`` instead of below it; the draft
  catches up on the tokens it missed at the next step that drafts. The costs are given
  (``draft_cost``, ``target_costs``: t_step(L) = L t_d + t_T(L), any one unit), or measured from
  the decoding's own steps: the whole wall time of a step (its draft phase, target call,
  verification, commit and the engine's bookkeeping, from one update to the next) as two
  least-squares lines in L, the draft phase's (L >= 1) and the rest's (L >= 0: an ``ar`` step's
  one-token call is its point at 0; the terms of :class:`draftverify.theory.tuning.StepCosts`),
  and at L = 0 the mean of the measured ``ar`` steps. Then the choice of L, though not the law,
  depends on the machine's timings, and :meth:`~AutoDraftLength.update` reads a clock. The draft
  phase of a step after ``ar`` steps catches up, on a prompt (a feature draft, at step 2) or on
  the tokens of the ``ar`` steps: it is left out of the draft's line, and its excess over the line
  is charged to the ar steps before it (what they cost beside the target's call). (A draft phase
  was once told by the tokens its first forward read, more than 2 when catching up; but a feature
  draft rereads a step's accepted tokens with the target's features, up to L + 1 of them, and a
  batch's widest row set the count: on eight prompts the auto policy never measured a draft phase
  and drafted L = 4 throughout, 0.7x ``ar``.) A step at L = 0 tests no position, so it leaves
  the acceptance estimates as they were: after ``probe`` of them in a row one step drafts (at the
  best L >= 1) to measure again, and with measured costs the first L = 0 step is taken once to
  measure it rather than trusting the lines' extrapolation to L = 0. Only ``ar`` steps measure
  t_step(0), so with measured costs a decoding that drafts takes one ``ar`` step after ``probe``
  drafting steps in a row, then after twice as many each time such a step does not turn it to
  ``ar`` (at most ``MAX_BACKOFF`` times ``probe``): a slow ``ar`` step (a busy host) could
  otherwise keep a decoding drafting at a loss to the end (sixteen samples of the real pair,
  2026-11-30: an ``ar`` step timed at 103 ms where other runs' took 65-99 made L = 1 look 1-5%
  faster, and the batch drafted L = 1 to the end, ~175 ms a step for ~1.7 tokens a row; such runs
  reached 0.72-0.78x ``ar``'s tokens/s. With its first ``ar`` step timed 40 ms slow on purpose, the
  batch drafted L = 1 to the end without this in two runs of two, and with it turned back to ``ar``
  at the step that measured ``ar`` again, or by itself before). Where drafting pays it costs 1.7
  ``ar`` steps a 128-token decoding (sixteen decodings of HumanEval prompts: 44.4 tokens/s
  against 43.8 without, within the noise).
- :class:`HeuristicDraftLength` (``draft_length="heuristic"``): transformers'
  ``num_assistant_tokens_schedule="heuristic"``, L + 2 after a fully accepted draft, L - 1 otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..theory.tuning import least_squares_line

__all__ = ["AUTO", "HEURISTIC", "AutoDraftLength", "AutoState", "DraftLengthPolicy", "HeuristicDraftLength",
           "StepSeconds", "draft_length_policy"]

AUTO, HEURISTIC = "auto", "heuristic"
MAX_LENGTH = 8  # the default upper bound on L of both policies
MAX_BACKOFF = 8  # auto's ar steps that measure t_step(0) again: at most every MAX_BACKOFF x probe drafting steps


@dataclass(frozen=True)
class StepSeconds:
    """What one step cost: its draft forwards (``draft_calls`` of them: the step's L, the longest
    row's in a batch, every row drafting that many), and its target call with the verification
    after it (the part of a step that does not grow with the draft's forwards)."""

    draft_seconds: float
    draft_calls: int
    target_seconds: float


class DraftLengthPolicy(Protocol):
    min_length: int
    max_length: int

    def initial(self) -> object: ...

    def choose(self, state: object) -> int: ...

    def choose_rows(self, states: Sequence[object]) -> list[int]: ...

    def update(self, state: object, draft_length: int, accepted: int, seconds: StepSeconds | None) -> object: ...


def _check_bounds(policy, lowest: int) -> None:
    if policy.min_length < lowest:
        raise ValueError(f"min_length must be >= {lowest}, got {policy.min_length}")
    if policy.max_length < max(policy.min_length, 1):
        raise ValueError(f"the bounds on L exclude every length: min_length = {policy.min_length} > "
                         f"max_length = {policy.max_length}")


@dataclass(frozen=True)
class AutoState:
    """Per position i = 1..max_length: (decayed) counts of steps that tested and that accepted it;
    the steps seen; per L = 0..max_length the measured steps and the rest of their wall time
    beside the draft phase (the first step is left out: it holds the prefill), and the measured
    draft phases that did not catch up with their seconds; the catch-up seconds charged to the
    ``ar`` steps; the clock at the last update (None before it, or with given costs); the L = 0
    steps since the last that drafted; the drafting steps since the last L = 0 step, and the ``ar``
    steps in a row taken to measure t_step(0) again that did not turn the decoding to ``ar``."""

    tested: tuple[float, ...]
    accepted: tuple[float, ...]
    steps: int = 0
    measured: tuple[int, ...] = ()
    rest_seconds: tuple[float, ...] = ()
    drafted: tuple[int, ...] = ()
    draft_seconds: tuple[float, ...] = ()
    catch_up: float = 0.0
    clock: float | None = None
    undrafted: int = 0
    drafting: int = 0
    remeasured: int = 0


def _line(measured: tuple[int, ...], seconds: tuple[float, ...], through_zero: bool) -> list[float]:
    """Mean seconds of a step's part at L = 0..max_length (``measured`` and ``seconds`` indexed by
    L): the least-squares line over the L measured (slope >= 0: a step never gets cheaper with more
    tokens), flat where one L was measured (or proportional to L with ``through_zero``: the draft
    phase, made of L forwards)."""
    seen = [length for length, n in enumerate(measured) if n]
    means = [seconds[length] / measured[length] for length in seen]
    if len(seen) == 1 and through_zero:
        return [means[0] * length / seen[0] for length in range(len(measured))]
    intercept, slope = least_squares_line(seen, means, [measured[length] for length in seen])
    if slope < 0:
        intercept, slope = sum(seconds) / sum(measured), 0.0
    return [intercept + slope * length for length in range(len(measured))]


@dataclass(frozen=True)
class AutoDraftLength:
    """``draft_length="auto"`` (see the module doc). ``prior`` is the acceptance assumed before any
    observation, held with ``prior_weight`` pseudo-steps (as is each position's predecessor); ``decay`` < 1 forgets old steps
    geometrically. ``draft_cost`` t_d and ``target_costs`` (t_T(L) for L = 0..max_length, t_T(0)
    the one-token call of an ``ar`` step) are both given or both measured (None; ``clock`` gives the
    time of each update). ``min_length`` = 0 lets it choose ``ar`` steps; ``probe``: after that many
    of them in a row, one step drafts, and (measured costs) after that many drafting steps in a row,
    then twice as many each time it did not turn the decoding to ``ar``, one ``ar`` step."""

    min_length: int = 0
    max_length: int = MAX_LENGTH
    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 1.0
    draft_cost: float | None = None
    target_costs: tuple[float, ...] | None = field(default=None)
    probe: int = 16
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_bounds(self, 0)
        if not 0 < self.prior < 1 or self.prior_weight <= 0:
            raise ValueError(f"prior must lie in (0, 1) and prior_weight be > 0, got {self.prior}, {self.prior_weight}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"decay must lie in (0, 1], got {self.decay}")
        if self.probe < 1:
            raise ValueError(f"probe must be >= 1, got {self.probe}")
        if (self.draft_cost is None) != (self.target_costs is None):
            raise ValueError("draft_cost and target_costs are given together or not at all")
        if self.target_costs is not None:
            object.__setattr__(self, "target_costs", tuple(float(c) for c in self.target_costs))
            if len(self.target_costs) != self.max_length + 1 or self.draft_cost < 0 or min(self.target_costs) <= 0:
                raise ValueError(f"target_costs must hold max_length + 1 = {self.max_length + 1} costs > 0, for L = 0.."
                                 f"{self.max_length} (and draft_cost be >= 0), got {self.target_costs}, {self.draft_cost}")

    def initial(self) -> AutoState:
        zeros, counts = (0.0,) * (self.max_length + 1), (0,) * (self.max_length + 1)
        return AutoState(tested=zeros[1:], accepted=zeros[1:], measured=counts, rest_seconds=zeros, drafted=counts,
                         draft_seconds=zeros)

    def acceptance(self, state: AutoState) -> list[float]:
        """beta_i for i = 1..max_length: the running estimate at position i, shrunk towards beta_{i-1}
        (towards ``prior`` for i = 1), so a position never tested takes its predecessor's value."""
        betas, previous = [], self.prior
        for tested, accepted in zip(state.tested, state.accepted):
            previous = (accepted + previous * self.prior_weight) / (tested + self.prior_weight)
            betas.append(previous)
        return betas

    def step_seconds(self, state: AutoState) -> list[float] | None:
        """t_step(L) for L = 0..max_length: given, or measured (then None until a draft phase that
        did not catch up was measured after the first step): the draft phase's line plus the line
        of the rest of a step, and at L = 0 the mean of the measured ``ar`` steps with the catch-up
        charged to them (the rest's line at 0 until one is measured)."""
        if self.draft_cost is not None:
            return [length * self.draft_cost + target for length, target in enumerate(self.target_costs)]
        if not any(state.drafted):
            return None
        draft = _line(state.drafted, state.draft_seconds, through_zero=True)
        rest = _line(state.measured, state.rest_seconds, through_zero=False)
        seconds = [max(d + r, 1e-9) for d, r in zip(draft, rest)]
        if state.measured[0]:
            seconds[0] = max((state.rest_seconds[0] + state.catch_up) / state.measured[0], 1e-9)
        return seconds

    def expected_tokens(self, state: AutoState) -> list[float]:
        """E(L) for L = 0..max_length: 1 + sum_{l <= L} prod_{i <= l} beta_i (seed 002's expected
        tokens per step, with per-position acceptance)."""
        expected, survive = [1.0], 1.0
        for beta in self.acceptance(state):
            survive *= beta
            expected.append(expected[-1] + survive)
        return expected

    def choose(self, state: AutoState) -> int:
        return self.choose_rows([state])[0]

    def choose_rows(self, states: Sequence[AutoState]) -> list[int]:
        """One L for every row of a batch: its rows share each step's target call, which scores
        L + 1 positions of every row, so the step's cost t_step(L) is the batch's, and the L chosen
        maximises the batch's expected tokens per second, sum_r E_r(L) / t_step(L), each row's E_r
        from its own acceptance. Every row's state has seen the same steps (rows leave a batch, none
        joins), so the first row's costs are the batch's. One row: the L that maximises its own
        E(L) / t_step(L). (Each row choosing for itself, a batch drafted where any one row's
        estimate favoured it: on eight prompts of the real pair, every fixed L >= 1 ran below
        ``ar``'s tokens/s.) The costs are means over the decoding's steps whatever the rows then:
        where prompts finish at different times, the last ones decode with the costs of the fuller
        batch (``ar`` steps where eight rows chose them, though one row alone would draft) until
        the probes' measurements move the lines. Before anything is measured one prompt drafts
        L = 4 and a batch L = 1, its cheapest drafting step: a batch's call scores L + 1 tokens of
        every row, and the first two steps that draft (the draft's catch-up on the prompts, then
        the measured one) cost a batch of sixteen samples of the real pair 4-6 ``ar`` steps each
        at L = 4 (0.72-0.87x ``ar``'s tokens/s over 64 tokens, against 0.90-0.93x from L = 1)."""
        seconds = self.step_seconds(states[0])
        if seconds is None:  # nothing measured yet: a length to measure from
            start = 4 if len(states) == 1 else 1
            return [min(max(start, self.min_length), self.max_length)] * len(states)
        if self.min_length == 0 and self.draft_cost is None \
                and (not states[0].measured[0] or states[0].drafting >= self._ar_probe(states[0])):
            return [0] * len(states)  # measure ar: once rather than trust the lines at L = 0, again after drafting
        lowest = max(self.min_length, 1) if states[0].undrafted >= self.probe else self.min_length
        expected = [sum(column) for column in zip(*(self.expected_tokens(state) for state in states))]
        rates = [(expected[length] / seconds[length], -length) for length in range(lowest, self.max_length + 1)]
        return [-max(rates)[1]] * len(states)  # the shortest of equal rates

    def _ar_probe(self, state: AutoState) -> int:
        """Drafting steps in a row after which an ``ar`` step measures t_step(0) again."""
        return min(self.probe << state.remeasured, MAX_BACKOFF * self.probe)

    def update(self, state: AutoState, draft_length: int, accepted: int, seconds: StepSeconds | None) -> AutoState:
        """The row verified ``draft_length`` tokens and accepted ``accepted``; the step's costs go
        under the L its call scored (``seconds.draft_calls``: a batch's step drafts the longest
        row's L for every row)."""
        step = draft_length if seconds is None else seconds.draft_calls
        if step:
            new = replace(state, steps=state.steps + 1, undrafted=0, drafting=state.drafting + 1)
        else:  # an ar step: taken to measure ar again (it counts), or chosen for itself (the count starts again)
            remeasured = state.remeasured + 1 if state.drafting >= self._ar_probe(state) else 0
            new = replace(state, steps=state.steps + 1, undrafted=state.undrafted + 1, drafting=0, remeasured=remeasured)
        if draft_length:  # positions 1..min(accepted + 1, L) were tested; the first `accepted` of them passed
            tested = [t * self.decay + (i < min(accepted + 1, draft_length)) for i, t in enumerate(state.tested)]
            passed = [a * self.decay + (i < accepted) for i, a in enumerate(state.accepted)]
            new = replace(new, tested=tuple(tested), accepted=tuple(passed))
        if seconds is None or self.draft_cost is not None:
            return new
        now = self.clock()
        if state.clock is None:  # the first step holds the prefill: its end starts the clock
            return replace(new, clock=now)
        # from the last update to this one: the last step's commit, then this step's draft, target and verifier
        catch_up = state.catch_up
        measured, rest_seconds = list(state.measured), list(state.rest_seconds)
        drafted, draft_seconds = list(state.drafted), list(state.draft_seconds)
        measured[step] += 1
        rest_seconds[step] += now - state.clock - seconds.draft_seconds
        if step and not state.undrafted:
            drafted[step] += 1
            draft_seconds[step] += seconds.draft_seconds
        elif step and any(state.drafted):  # the catch-up after ar steps: its excess is theirs
            catch_up += seconds.draft_seconds - _line(state.drafted, state.draft_seconds, through_zero=True)[step]
        return replace(new, measured=tuple(measured), rest_seconds=tuple(rest_seconds), drafted=tuple(drafted),
                       draft_seconds=tuple(draft_seconds), catch_up=catch_up, clock=now)


@dataclass(frozen=True)
class HeuristicDraftLength:
    """transformers' heuristic schedule (``num_assistant_tokens_schedule="heuristic"``): start at
    ``initial_length``; L + 2 after a fully accepted draft, L - 1 otherwise; kept in the bounds."""

    min_length: int = 1
    max_length: int = MAX_LENGTH
    initial_length: int = 4

    def __post_init__(self) -> None:
        _check_bounds(self, 1)
        if not self.min_length <= self.initial_length <= self.max_length:
            raise ValueError(f"initial_length = {self.initial_length} lies outside [{self.min_length}, {self.max_length}]")

    def initial(self) -> int:
        return self.initial_length

    def choose(self, state: int) -> int:
        return state

    def choose_rows(self, states: Sequence[int]) -> list[int]:
        """Each row's own L (the batch drafts the longest; a row verifies its own)."""
        return list(states)

    def update(self, state: int, draft_length: int, accepted: int, seconds: StepSeconds | None) -> int:
        step = 2 if accepted == draft_length else -1
        return min(max(draft_length + step, self.min_length), self.max_length)


def draft_length_policy(name: str, *, min_length: int | None = None, max_length: int = MAX_LENGTH) -> DraftLengthPolicy:
    """The policy called ``name`` (``"auto"`` or ``"heuristic"``) with bounds on L; ``min_length``
    unset is 0 for auto (it may choose ``ar`` steps) and 1 for heuristic."""
    policies = {AUTO: AutoDraftLength, HEURISTIC: HeuristicDraftLength}
    if name not in policies:
        raise ValueError(f"draft_length: expected a number >= 1, {AUTO!r} or {HEURISTIC!r}, got {name!r}")
    if name == HEURISTIC:
        low = 1 if min_length is None else min_length
        return HeuristicDraftLength(low, max_length, min(max(4, low), max_length))
    return AutoDraftLength(0 if min_length is None else min_length, max_length)

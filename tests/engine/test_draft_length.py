"""engine.draft_length: the policies, and decoding with a length per step (per prompt in a batch)."""

from __future__ import annotations

import dataclasses

import pytest

from draftverify.engine import DecodeConfig, Decoder, generate, generate_batch
from draftverify.engine.draft_length import (MAX_BACKOFF, AutoDraftLength, HeuristicDraftLength, StepSeconds,
                                             draft_length_policy)
from draftverify.testing import goodness_of_fit, random_pair
from tests.factories import toy_models
from tests.engine.test_engine_exactness import NUM_TOKENS, THRESHOLD, conditional_law, sequence_counts
from tests.verify.broken_twins import PeekingLength

SAMPLES = 2500


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=3, order=2, seed=3)


def given_costs(max_length: int = 3) -> AutoDraftLength:
    return AutoDraftLength(1, max_length, prior_weight=0.5, draft_cost=0.2, target_costs=(1.0,) * (max_length + 1))


def sometimes_ar(max_length: int = 3) -> AutoDraftLength:
    """Given costs under which L = 0 (a step of the target alone) wins whenever the estimated
    acceptance at position 1 is below 0.7 (as the prior 0.6 is), with a probe every second ar step."""
    return AutoDraftLength(0, max_length, prior_weight=0.5, draft_cost=0.7, target_costs=(1.0,) * (max_length + 1), probe=2)


def test_heuristic_is_transformers_schedule():
    policy = HeuristicDraftLength(1, 6, 4)
    state = policy.initial()
    for accepted, expected in [(4, 6), (6, 6), (2, 5), (0, 4), (1, 3), (0, 2), (0, 1), (0, 1), (1, 3)]:
        state = policy.update(state, policy.choose(state), accepted, None)
        assert policy.choose(state) == expected


def test_auto_maximises_predicted_tokens_per_second():
    policy = AutoDraftLength(1, 6, prior_weight=1e-9, draft_cost=0.1, target_costs=(1.0,) * 7)
    state = policy.initial()
    for accepted in [6] * 50:  # every position accepted: beta = 1, the longest draft pays most
        state = policy.update(state, 6, accepted, None)
    assert policy.choose(state) == 6
    for accepted in [0] * 500:  # almost nothing accepted: the shortest
        state = policy.update(state, 6, accepted, None)
    assert policy.choose(state) == 1
    bounded = AutoDraftLength(2, 3, draft_cost=0.1, target_costs=(1.0,) * 4)
    assert bounded.choose(bounded.update(bounded.initial(), 3, 0, None)) == 2


def test_auto_chooses_the_target_alone_where_drafting_cannot_pay_and_probes_again():
    """A target call of 2 tokens at 2.5 one-token calls: at acceptance 0.5 no L pays, so L = 0;
    an ar step tests nothing (the estimates stay), and after ``probe`` of them in a row one step
    drafts at the best L >= 1; once the draft is always accepted, drafting wins."""
    policy = AutoDraftLength(0, 3, prior_weight=1e-9, draft_cost=0.1, target_costs=(1.0, 2.5, 2.6, 2.7), probe=3)
    state = policy.initial()
    for _ in range(20):
        state = policy.update(state, 1, 0, None) if policy.choose(state) else state
        state = policy.update(state, 3, 1, None)
    assert policy.choose(state) == 0
    assert dataclasses.replace(policy, min_length=1).choose(state) == 1  # without L = 0 among the choices
    chosen = []
    for _ in range(8):
        chosen.append(policy.choose(state))
        state = policy.update(state, chosen[-1], 0, None)
    assert chosen == [0, 0, 0, 1, 0, 0, 0, 1]  # the probe drafts at the best L >= 1
    for _ in range(40):
        state = policy.update(state, 3, 3, None)
    assert policy.choose(state) == 3


def test_auto_measures_one_ar_step_then_uses_its_mean():
    """With measured costs L = 0 is not predicted from the lines of L >= 1: once a drafting step
    was measured, one ar step is taken to measure it, and t_step(0) is then the mean of those, with
    the draft's catch-up after them (the draft phase of the step after them) charged to them
    and left out of the draft's line; the rest of every step, ar steps included, makes the rest's."""
    times = iter([0.0, 3.0, 4.0, 5.0, 6.5, 10.4])
    policy = AutoDraftLength(0, 4, clock=lambda: next(times))
    state = policy.update(policy.initial(), 4, 4, StepSeconds(1.0, 4, 1.0))  # prefill: starts the clock
    state = policy.update(state, 4, 4, StepSeconds(1.0, 4, 2.0))  # 3 s: 1 drafting, 2 the rest
    assert policy.choose(state) == 0
    state = policy.update(state, 0, 0, StepSeconds(0.0, 0, 1.0))  # the ar step: 1 s
    assert policy.step_seconds(state)[0] == pytest.approx(1.0) and state.undrafted == 1
    state = policy.update(state, 0, 0, StepSeconds(0.0, 0, 1.0))  # another: 1 s
    state = policy.update(state, 0, 0, StepSeconds(0.0, 0, 1.5))  # and 1.5 s
    assert policy.step_seconds(state)[0] == pytest.approx(3.5 / 3) and state.tested == (2.0,) * 4  # ar tests nothing
    assert policy.choose(state) == 4  # 3.36 tokens expected in 3 s beat 1 token in 1.17 s
    caught_up = policy.update(state, 4, 4, StepSeconds(1.9, 4, 2.0))  # after ar steps, 3.9 s: 0.9 over the 3.0 predicted
    assert caught_up.drafted == state.drafted and caught_up.measured[4] == 2 and caught_up.undrafted == 0
    assert policy.step_seconds(caught_up)[0] == pytest.approx((3.5 + 0.9) / 3)  # the 0.9 s the draft caught up on
    # the rest's line through the ar steps (1.17 s at L = 0) and the two at L = 4 (2 s each); the draft's 1 s
    assert policy.step_seconds(caught_up)[2] == pytest.approx(0.5 + (3.5 / 3 + 2.0) / 2)


def test_auto_measures_ar_again_while_drafting_less_and_less_often():
    """Only ar steps measure t_step(0): a decoding that drafts takes one ar step after ``probe``
    drafting steps in a row, then after twice as many each time that step leaves it drafting, up to
    MAX_BACKOFF x ``probe``; an ar step chosen for itself starts the count again."""
    now = [0.0]
    policy = AutoDraftLength(0, 4, probe=4, clock=lambda: now[0])  # every draft accepted: drafting wins
    state = policy.update(policy.initial(), 4, 4, StepSeconds(1.0, 4, 1.0))  # prefill: starts the clock
    chosen = []
    for _ in range(100):
        chosen.append(policy.choose(state))
        length = chosen[-1]
        now[0] += 1.0 + 0.35 * length  # a drafted token 0.25 s, a scored one 0.1 s, the rest 1 s
        state = policy.update(state, length, length, StepSeconds(0.25 * length, length, 1.0 + 0.1 * length))
    ar = [i for i, length in enumerate(chosen) if length == 0]
    assert chosen[0] == 4 and ar[0] == 1  # the first drafting step, then the ar step it asks for
    assert [b - a - 1 for a, b in zip(ar, ar[1:])] == [4, 8, 16, 32, 32] and MAX_BACKOFF == 8
    assert set(chosen) == {0, 4} and state.remeasured == 5
    chosen_for_itself = policy.update(policy.update(dataclasses.replace(state, drafting=32), 0, 0, None), 0, 0, None)
    assert chosen_for_itself.remeasured == 0 and chosen_for_itself.drafting == 0
    assert AutoDraftLength(1, 4, probe=4, clock=lambda: now[0]).choose(dataclasses.replace(state, drafting=99)) == 4  # no ar


def test_auto_measures_whole_steps_when_costs_are_not_given():
    """The wall time from one update to the next (a fake clock here) is the whole step, commit
    included: its draft phase as a line through 0 while one L was seen, the rest flat; two L give
    two least-squares lines."""
    times = iter([10.0, 12.0, 13.4, 14.6])
    policy = AutoDraftLength(1, 8, clock=lambda: next(times))  # min_length 1: no ar step
    state = policy.initial()
    assert policy.step_seconds(state) is None and policy.choose(state) == 4
    state = policy.update(state, 4, 4, StepSeconds(9.0, 4, 9.0))  # the first step: prefill, starts the clock
    assert policy.step_seconds(state) is None
    state = policy.update(state, 4, 4, StepSeconds(0.4, 4, 1.0))  # 2.0 s in all: 0.4 drafting, 1.6 the rest
    assert policy.step_seconds(state) == pytest.approx([1.6 + 0.1 * length for length in range(9)])
    state = policy.update(state, 2, 2, StepSeconds(0.2, 2, 0.8))  # 1.4 s: 0.2 drafting, 1.2 the rest
    assert policy.step_seconds(state) == pytest.approx([0.8 + 0.3 * length for length in range(9)])
    state = policy.update(state, 2, 0, StepSeconds(0.2, 2, 0.8))  # 1.2 s: the rest 1.0
    assert policy.step_seconds(state)[2] == pytest.approx(0.2 + 1.1)  # means at L = 2 over two steps


@pytest.mark.parametrize("make", [
    lambda: AutoDraftLength(3, 2), lambda: HeuristicDraftLength(0, 2), lambda: HeuristicDraftLength(2, 4, 5),
    lambda: AutoDraftLength(1, 2, draft_cost=0.1), lambda: AutoDraftLength(1, 2, draft_cost=0.1, target_costs=(1.0,) * 2),
    lambda: AutoDraftLength(-1, 2), lambda: AutoDraftLength(0, 0), lambda: AutoDraftLength(probe=0),
    lambda: draft_length_policy("heuristic", min_length=0), lambda: draft_length_policy("sometimes"), lambda: DecodeConfig("sprinter", draft_length="auto"),
    lambda: DecodeConfig("ar", draft_length="auto"),
])
def test_bad_settings(make):
    with pytest.raises(ValueError):
        make()


def test_config_reads_the_policy_names():
    assert isinstance(DecodeConfig("sd", draft_length="auto").length_policy, AutoDraftLength)
    assert DecodeConfig("sd", draft_length="auto").length_policy.min_length == 0
    heuristic = DecodeConfig("bv", draft_length="heuristic")
    assert isinstance(heuristic.length_policy, HeuristicDraftLength) and heuristic.length == 8
    assert DecodeConfig("sd", draft_length=3).length_policy is None


@pytest.mark.parametrize("method,num_drafts", [("sd", None), ("bv", None), ("gbv", None), ("kseq", 2)])
def test_engine_law_with_a_length_per_prompt(pair, method, num_drafts):
    """Many rows of one batch, each choosing its own L (the heuristic): ragged drafts through the
    batched kernels (sd, bv) and through the per-row verifier (gbv, whose state sets a floor on L; kseq)."""
    samples = 1200 if method in ("kseq", "gbv") else SAMPLES
    results = generate_batch(*toy_models(pair), [[1]] * samples, method, num_drafts=num_drafts,
                             draft_length=HeuristicDraftLength(1, 3, 2), max_new_tokens=NUM_TOKENS, seed=4)
    assert any(len({r.steps[i].draft_length for r in results if len(r.steps) > i}) > 1 for i in (1, 2))  # ragged steps
    assert {s.draft_length for r in results for s in r.steps} == {1, 2, 3}
    k = num_drafts or 1  # each row counts its own L, though every row drafted the step's longest
    assert all(s.drafted == k * s.draft_length and s.verified == k * (s.draft_length + 1)
               for r in results for s in r.steps)
    law = conditional_law(pair.target, [1], NUM_TOKENS)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0] > THRESHOLD


@pytest.mark.parametrize("method,num_drafts", [("sd", None), ("bv", None), ("gbv", None), ("kseq", 2)])
def test_engine_law_with_steps_of_the_target_alone(pair, method, num_drafts):
    """Prompts decoded one by one with L = 0 among the choices: ar steps between drafting steps,
    the draft catching up on what it missed; gbv's pending modification keeps L >= 1."""
    samples = 800 if method in ("kseq", "gbv") else 1500
    results = [generate(*toy_models(pair), [1], method, num_drafts=num_drafts, draft_length=sometimes_ar(),
                        max_new_tokens=NUM_TOKENS, seed=seed) for seed in range(samples)]
    assert {s.draft_length for r in results for s in r.steps} >= {0, 1}
    law = conditional_law(pair.target, [1], NUM_TOKENS)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0] > THRESHOLD


@pytest.mark.parametrize("method", ["sd", "gbv"])
@pytest.mark.parametrize("policy,lengths", [(given_costs, {1, 2}), (sometimes_ar, {0, 1})], ids=["auto", "auto-with-ar-steps"])
def test_engine_law_with_one_length_for_a_batch(pair, method, policy, lengths):
    """Many rows of one batch given one L from all their pasts (auto): each row's law is still the
    target's, its L depending on the past only (the other rows' too)."""
    results = generate_batch(*toy_models(pair), [[1]] * (1200 if method == "gbv" else SAMPLES), method,
                             draft_length=policy(), max_new_tokens=NUM_TOKENS, seed=5)
    assert {s.draft_length for r in results for s in r.steps} >= lengths
    law = conditional_law(pair.target, [1], NUM_TOKENS)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0] > THRESHOLD


@pytest.mark.parametrize("length", [lambda: 2, lambda: dataclasses.replace(given_costs(), min_length=2)],
                         ids=["fixed", "auto-for-the-batch"])
def test_the_peeking_twin_fails_in_the_engine(pair, length):
    """The twin of the law tests above: their batches see a verifier that picks its L from the
    draft it verifies (biased from L = 2), at a fixed L and under auto's one L for the batch."""
    results = generate_batch(*toy_models(pair), [[1]] * SAMPLES, PeekingLength(),
                             draft_length=length(), max_new_tokens=NUM_TOKENS, seed=4)
    law = conditional_law(pair.target, [1], NUM_TOKENS)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0] < THRESHOLD


def test_caches_hold_with_ragged_lengths_and_seeded_runs_repeat(pair):
    prompts = [[1], [2, 0], [0, 0, 1, 2]]
    config = DecodeConfig("sd", draft_length=given_costs(4), max_new_tokens=12, seed=7)
    decoder = Decoder(*toy_models(pair), prompts, config)
    while not decoder.done:
        decoder.step()
        decoder.check_caches()
    first = generate(*toy_models(pair), [1, 2], "bv", draft_length=given_costs(), seed=9)
    again = generate(*toy_models(pair), [1, 2], "bv", draft_length=given_costs(), seed=9)
    assert first.tokens == again.tokens and [s.draft_length for s in first.steps] == [s.draft_length for s in again.steps]
    measured = generate(*toy_models(pair), [1, 2], "sd", draft_length="auto", max_new_tokens=40)
    assert len(measured.tokens) == 40 and all(0 <= s.draft_length <= 8 for s in measured.steps)


def test_auto_gives_a_batch_the_length_that_maximises_its_expected_tokens_per_second():
    """Rows share each step's call: given a draft forward at 0.7 of a target call of any length,
    a row the draft always matches would draft 3 alone (4 tokens in 3.1 calls against 1 in 1) and a
    row it never matches take ar steps; together, 2 + L tokens in 1 + 0.7 L calls, the batch takes
    ar steps, and three rows matched always against one never draft 3 (13 tokens in 3.1 calls)."""
    policy = AutoDraftLength(0, 3, prior_weight=1e-9, draft_cost=0.7, target_costs=(1.0,) * 4)
    matched, missed = policy.initial(), policy.initial()
    for _ in range(50):
        matched, missed = policy.update(matched, 3, 3, None), policy.update(missed, 3, 0, None)
    assert policy.choose(matched) == 3 and policy.choose(missed) == 0
    assert policy.choose_rows([matched, missed]) == [0, 0]
    assert policy.choose_rows([matched, matched, matched, missed]) == [3] * 4
    assert HeuristicDraftLength(1, 6, 4).choose_rows([2, 6, 1]) == [2, 6, 1]  # the heuristic's rows choose alone


def test_auto_measures_one_prompt_from_four_and_a_batch_from_one():
    """Before any step is measured: one prompt drafts L = 4, a batch L = 1 (its call scores L + 1
    tokens of every row: the cheapest drafting step), both within the bounds."""
    policy, start = AutoDraftLength(0, 8), AutoDraftLength(0, 8).initial()
    assert policy.choose_rows([start]) == [4] and policy.choose(start) == 4
    assert policy.choose_rows([start] * 2) == [1, 1] and policy.choose_rows([start] * 16) == [1] * 16
    assert AutoDraftLength(2, 8).choose_rows([start] * 3) == [2] * 3 and AutoDraftLength(0, 3).choose(start) == 3


def test_auto_measures_a_step_at_the_length_its_call_scored():
    """A row that verified fewer tokens than the batch drafted: its acceptance counts its own
    positions, the step's seconds go under the batch's L (``StepSeconds.draft_calls``)."""
    times = iter([0.0, 3.0])
    policy = AutoDraftLength(0, 4, clock=lambda: next(times))
    state = policy.update(policy.initial(), 4, 4, StepSeconds(1.0, 4, 1.0))  # prefill: starts the clock
    state = policy.update(state, 1, 1, StepSeconds(1.0, 4, 2.0))  # the row verified 1 of the batch's 4
    assert state.tested == (2.0, 1.0, 1.0, 1.0) and state.accepted == (2.0, 1.0, 1.0, 1.0)  # position 1 only
    assert state.measured == (0, 0, 0, 0, 1) and state.drafted == (0, 0, 0, 0, 1)


@dataclasses.dataclass(frozen=True)
class OwnLengths:
    """A policy whose rows choose apart, L = 0 among their choices (neither auto, one L for the
    batch, nor the heuristic, L >= 1, does both): 2 after an odd count of steps and accepted
    tokens, else 0."""

    min_length: int = 0
    max_length: int = 2

    def initial(self) -> int:
        return 0

    def choose(self, state: int) -> int:
        return 2 * (state % 2)

    def choose_rows(self, states: list[int]) -> list[int]:
        return [self.choose(state) for state in states]

    def update(self, state: int, draft_length: int, accepted: int, seconds: StepSeconds | None) -> int:
        return state + 1 + accepted


def test_a_batch_takes_an_ar_step_only_when_every_prompt_chose_it(pair):
    """Rows whose choices disagree: the step drafts, and a row that chose L = 0 verifies one token;
    caches hold through ar steps and drafting steps."""
    prompts = [[1], [2, 0], [0, 0, 1, 2]]
    decoder = Decoder(*toy_models(pair), prompts, DecodeConfig("sd", draft_length=OwnLengths(), max_new_tokens=16, seed=3))
    lengths = []
    while not decoder.done:
        rows = len(decoder.active)
        chosen = decoder.config.length_policy.choose_rows([decoder.length_states[p] for p in decoder.active])
        steps = decoder.step()
        decoder.check_caches()
        taken = [s.stats.draft_length for s in steps]
        assert taken == ([0] * rows if not any(chosen) else [max(n, 1) for n in chosen])
        lengths.append(taken)
    assert [0] * len(prompts) in lengths and any(0 < min(taken) < max(taken) for taken in lengths)


def test_a_batch_with_auto_takes_one_length_for_every_prompt(pair):
    """The batch's choice from every row's past: ar steps and drafting steps, all rows alike, caches
    holding through both."""
    prompts = [[1], [2, 0], [0, 0, 1, 2]]
    decoder = Decoder(*toy_models(pair), prompts, DecodeConfig("sd", draft_length=sometimes_ar(), max_new_tokens=16, seed=3))
    lengths = []
    while not decoder.done:
        chosen = decoder.config.length_policy.choose_rows([decoder.length_states[p] for p in decoder.active])
        steps = decoder.step()
        decoder.check_caches()
        assert [s.stats.draft_length for s in steps] == chosen and len(set(chosen)) == 1
        lengths += chosen
    assert 0 in lengths and max(lengths) >= 1

"""engine.draft_length: the policies, and decoding with a length per step (per prompt in a batch)."""

from __future__ import annotations

import pytest

from draftverify.engine import DecodeConfig, Decoder, generate, generate_batch
from draftverify.engine.draft_length import AutoDraftLength, HeuristicDraftLength, StepSeconds, draft_length_policy
from draftverify.testing import goodness_of_fit, random_pair
from tests.factories import toy_models
from tests.engine.test_engine_exactness import NUM_TOKENS, THRESHOLD, conditional_law, sequence_counts
from tests.verify.broken_twins import PeekingLength

SAMPLES = 2500


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=3, order=2, seed=3)


def given_costs(max_length: int = 3) -> AutoDraftLength:
    return AutoDraftLength(1, max_length, prior_weight=0.5, draft_cost=0.2, target_costs=(1.0,) * max_length)


def test_heuristic_is_transformers_schedule():
    policy = HeuristicDraftLength(1, 6, 4)
    state = policy.initial()
    for accepted, expected in [(4, 6), (6, 6), (2, 5), (0, 4), (1, 3), (0, 2), (0, 1), (0, 1), (1, 3)]:
        state = policy.update(state, policy.choose(state), accepted, None)
        assert policy.choose(state) == expected


def test_auto_maximises_predicted_tokens_per_second():
    policy = AutoDraftLength(1, 6, prior_weight=1e-9, draft_cost=0.1, target_costs=(1.0,) * 6)
    state = policy.initial()
    for accepted in [6] * 50:  # every position accepted: beta = 1, the longest draft pays most
        state = policy.update(state, 6, accepted, None)
    assert policy.choose(state) == 6
    for accepted in [0] * 500:  # almost nothing accepted: the shortest
        state = policy.update(state, 6, accepted, None)
    assert policy.choose(state) == 1
    bounded = AutoDraftLength(2, 3, draft_cost=0.1, target_costs=(1.0,) * 3)
    assert bounded.choose(bounded.update(bounded.initial(), 3, 0, None)) == 2


def test_auto_measures_whole_steps_when_costs_are_not_given():
    """The wall time from one update to the next (a fake clock here) is the whole step, commit
    included: its draft phase as a line through 0 while one L was seen, the rest flat; two L give
    two least-squares lines."""
    times = iter([10.0, 12.0, 13.4, 14.6])
    policy = AutoDraftLength(1, 8, clock=lambda: next(times))
    state = policy.initial()
    assert policy.step_seconds(state) is None and policy.choose(state) == 4
    state = policy.update(state, 4, 4, StepSeconds(9.0, 4, 9.0))  # the first step: prefill, starts the clock
    assert policy.step_seconds(state) is None
    state = policy.update(state, 4, 4, StepSeconds(0.4, 4, 1.0))  # 2.0 s in all: 0.4 drafting, 1.6 the rest
    assert policy.step_seconds(state) == pytest.approx([1.6 + 0.1 * length for length in range(1, 9)])
    state = policy.update(state, 2, 2, StepSeconds(0.2, 2, 0.8))  # 1.4 s: 0.2 drafting, 1.2 the rest
    assert policy.step_seconds(state) == pytest.approx([0.8 + 0.3 * length for length in range(1, 9)])
    state = policy.update(state, 2, 0, StepSeconds(0.2, 2, 0.8))  # 1.2 s: the rest 1.0
    assert policy.step_seconds(state)[1] == pytest.approx(0.2 + 1.1)  # means at L = 2 over two steps


@pytest.mark.parametrize("make", [
    lambda: AutoDraftLength(3, 2), lambda: HeuristicDraftLength(0, 2), lambda: HeuristicDraftLength(2, 4, 5),
    lambda: AutoDraftLength(1, 2, draft_cost=0.1), lambda: AutoDraftLength(1, 2, draft_cost=0.1, target_costs=(1.0,)),
    lambda: draft_length_policy("sometimes"), lambda: DecodeConfig("sprinter", draft_length="auto"),
    lambda: DecodeConfig("ar", draft_length="auto"),
])
def test_bad_settings(make):
    with pytest.raises(ValueError):
        make()


def test_config_reads_the_policy_names():
    assert isinstance(DecodeConfig("sd", draft_length="auto").length_policy, AutoDraftLength)
    heuristic = DecodeConfig("bv", draft_length="heuristic")
    assert isinstance(heuristic.length_policy, HeuristicDraftLength) and heuristic.length == 8
    assert DecodeConfig("sd", draft_length=3).length_policy is None


@pytest.mark.parametrize("method,num_drafts", [("sd", None), ("bv", None), ("gbv", None), ("kseq", 2)])
def test_engine_law_with_a_length_per_prompt(pair, method, num_drafts):
    """Many rows of one batch, each choosing its own L: ragged drafts through the batched kernels
    (sd, bv) and through the per-row verifier (gbv, whose state sets a floor on L; kseq)."""
    samples = 1200 if method in ("kseq", "gbv") else SAMPLES
    results = generate_batch(*toy_models(pair), [[1]] * samples, method,
                             num_drafts=num_drafts, draft_length=given_costs(), max_new_tokens=NUM_TOKENS, seed=4)
    assert {s.draft_length for r in results for s in r.steps} == {1, 2, 3}
    law = conditional_law(pair.target, [1], NUM_TOKENS)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0] > THRESHOLD


def test_the_peeking_twin_fails_in_the_engine(pair):
    results = generate_batch(*toy_models(pair), [[1]] * SAMPLES, PeekingLength(),
                             draft_length=2, max_new_tokens=NUM_TOKENS, seed=4)
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
    assert len(measured.tokens) == 40 and all(1 <= s.draft_length <= 8 for s in measured.steps)

"""engine/stats: what a decoding cost, summed from its steps; acceptance pooled over verified tokens."""

from __future__ import annotations

import pytest

from draftverify.engine import GenerationResult, StepStats


def step(accepted, committed=None, draft_calls=4, target_calls=1, seconds=(0.1, 0.2, 0.05), draft_length=None):
    return StepStats(drafted=4, verified=5, accepted=accepted, committed=accepted + 1 if committed is None else committed,
                     draft_index=0, draft_calls=draft_calls, target_calls=target_calls, draft_seconds=seconds[0],
                     target_seconds=seconds[1], verify_seconds=seconds[2], draft_length=draft_length)


def result(steps, tokens=None, draft_length=4, seconds=2.0):
    tokens = list(range(sum(s.committed for s in steps))) if tokens is None else tokens
    return GenerationResult(prompt_ids=[1], tokens=tokens, text=None, finish_reason="length", method="sd", num_drafts=1,
                            draft_length=draft_length, steps=steps, seconds=seconds)


def test_sums_over_steps():
    r = result([step(4), step(1), step(0)])
    assert (r.accepted, r.target_calls, r.draft_calls, len(r.tokens)) == (5, 3, 12, 8)
    assert r.draft_seconds == pytest.approx(0.3) and r.target_seconds == pytest.approx(0.6) and r.verify_seconds == pytest.approx(0.15)
    assert r.tokens_per_target_call == pytest.approx(8 / 3) and r.tokens_per_second == pytest.approx(4.0)


def test_acceptance_pooled_over_verified_tokens():
    # 4 + 1 + 0 accepted; the second and third steps each made one rejected test: 5 / (5 + 2)
    r = result([step(4), step(1), step(0)])
    assert r.acceptance_rate == pytest.approx(5 / 7)
    assert r.position_acceptance == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert result([step(4), step(4)]).acceptance_rate == 1.0  # no rejected test at all
    assert result([step(0)]).acceptance_rate == 0.0


def test_ar_has_no_acceptance():
    ar = result([step(0, committed=1, draft_calls=0)], draft_length=0)
    assert ar.acceptance_rate is None and ar.position_acceptance == []
    assert result([], tokens=[]).acceptance_rate is None
    assert result([], tokens=[], seconds=0.0).tokens_per_second == float("inf")


def test_per_position_acceptance_with_a_length_per_step():
    # L = 4, 2, 1 (draft_length="auto"): the steps that drafted a position are its denominator
    r = result([step(4, draft_length=4), step(2, draft_length=2), step(0, draft_length=1)])
    assert r.accepted_per_position == [2, 2, 1, 1]
    assert r.position_acceptance == pytest.approx([2 / 3, 1.0, 1.0, 1.0])
    assert r.acceptance_rate == pytest.approx(6 / 7)  # only the last step made a rejected test

"""Metric definitions of `bench decode` against hand-computed values (no models)."""

import math

import numpy as np
import pytest

from draftverify.bench import metrics
from draftverify.bench.summary import summarize

# four steps of a draft of length L = 3 that accepted 0, 2, 3 and 1 tokens: tests made 1, 3, 3, 2
ACCEPTED, L = [0, 2, 3, 1], 3


def test_acceptance_is_pooled_over_verified_not_drafted_tokens():
    assert metrics.verified_tests(ACCEPTED, L).tolist() == [1, 3, 3, 2]
    assert metrics.acceptance(ACCEPTED, L) == pytest.approx(6 / 9)
    # the drafted-token rate 6 / 12 = 0.5 is the mistake seed 002 warns about
    assert metrics.acceptance(ACCEPTED, L) != pytest.approx(6 / 12)


def test_position_acceptance_and_histogram():
    # reached position 1, 2, 3: 4, 3, 2 steps; accepted it: 3, 2, 1
    assert metrics.position_acceptance(ACCEPTED, L).tolist() == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert metrics.accepted_histogram(ACCEPTED, L).tolist() == [1, 1, 1, 1]
    never = metrics.position_acceptance([0, 0], 2)
    assert never[0] == 0 and math.isnan(never[1])
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        metrics.acceptance([4], 3)


def test_latency_ttft_itl_and_burstiness():
    # one token at 0.1 s, then three at 0.3 s (one step), then a step that was cut to nothing
    out = metrics.latency([0.1, 0.3, 0.4], [1, 3, 0])
    gaps = np.array([0.2, 0.0, 0.0])
    assert out["ttft"] == pytest.approx(0.1)
    assert out["itl"] == pytest.approx(gaps.mean())
    assert out["burstiness"] == pytest.approx(gaps.std() / gaps.mean())
    steady = metrics.latency([0.1, 0.2, 0.3], [1, 1, 1])
    assert steady["burstiness"] == pytest.approx(0.0, abs=1e-9)


def test_bootstrap_ratio_value_interval_and_determinism():
    num, den = [1.0, 2.0, 3.0, 10.0], [2.0, 2.0, 2.0, 2.0]
    a = metrics.bootstrap_ratio(num, den)
    assert a.value == pytest.approx(16 / 8)
    assert a.low <= a.value <= a.high and a.low < a.high
    assert metrics.bootstrap_ratio(num, den) == a
    paired = metrics.bootstrap_ratio(num, den, baseline=(num, [4.0] * 4))
    assert paired == metrics.Interval(2.0, 2.0, 2.0)  # same units: every resample gives the ratio 2


def test_bootstrap_intervals_are_95_percent_ones():
    """Over 400 units the percentile intervals of the ratio and of the mean span about 1.96 standard
    errors either side (the normal approximation, well met at this size; 1000 resamples): a 50%
    interval would span 0.67."""
    values = np.random.default_rng(3).exponential(size=400)
    standard_error = values.std(ddof=1) / np.sqrt(values.size)
    for interval in (metrics.bootstrap_ratio(values, np.ones(values.size)), metrics.bootstrap_mean(values)):
        assert interval.value == pytest.approx(values.mean())
        assert 1.7 * standard_error < (interval.high - interval.low) / 2 < 2.25 * standard_error


def _record(method, accepted, tokens, seconds, target_calls, prompt, length=3, temperature=1.0, draft_seconds=0.0,
            heap_peak=1 << 20):
    return dict(key=method, label=method, method=method, options=[], num_drafts=1, draft_length=length if accepted else 0,
                temperature=temperature, top_k=None, draft="draft" if accepted else None, prompt=prompt, seed=0,
                tokens=list(tokens), seconds=seconds, arrivals=[seconds * (i + 1) / len(tokens) for i in range(len(tokens))],
                counts=[1] * len(tokens), accepted=accepted or [0] * len(tokens), target_calls=target_calls,
                draft_calls=length * len(accepted) if accepted else 0, target_seconds=seconds / 2,
                draft_seconds=draft_seconds, verify_seconds=0.0, heap_peak=heap_peak, weights=0, ot_solves=0,
                ot_fallbacks=0, text=" ".join(map(str, tokens)))


def test_summary_of_hand_built_runs():
    ar = [_record("ar", None, range(8), 1.0, 8, prompt=p) for p in (0, 1)]
    sd = [_record("sd", [0, 2], range(8), 0.5, 2, prompt=0, draft_seconds=0.06, heap_peak=3 << 20),
          _record("sd", [3, 1], range(8), 0.25, 2, prompt=1, draft_seconds=0.06)]
    rows = {r["method"]: r for r in summarize(ar + sd, {"sd": True})}
    row = rows["sd"]
    assert row["acceptance"]["value"] == pytest.approx(6 / 9)
    assert row["acceptance_per_drafted"] == pytest.approx(6 / 12)
    assert row["block_efficiency"]["value"] == pytest.approx(16 / 4)
    assert row["speedup"]["value"] == pytest.approx((16 / 0.75) / (16 / 2.0))
    # rho: 0.12 s over 12 draft forwards, against ar's 1.0 s over 16 target forwards
    assert row["cost_ratio"] == pytest.approx((0.12 / 12) / (1.0 / 16))
    a = 6 / 9
    assert row["tokens_per_step_theory"] == pytest.approx((1 - a**4) / (1 - a))
    assert row["speedup_theory"] == pytest.approx(row["tokens_per_step_theory"] / (1 + 3 * row["cost_ratio"]))
    assert row["speedup_plugin"] == pytest.approx(4 / (1 + 3 * 0.16))  # the measured k in the same formula
    # a target call: 0.375 s over 4 calls against ar's 1.0 s over 16; memory: sd's 3 MB peak against ar's 1
    assert row["target_call_ratio"] == pytest.approx((0.375 / 4) / (1.0 / 16))
    assert (row["peak_mb"], row["memory_overhead_mb"]) == pytest.approx((3.0, 2.0))
    assert row["accepted_histogram"] == [1, 1, 1, 1]
    assert row["rouge_l_vs_ar"]["value"] == pytest.approx(1.0)  # same text
    assert rows["ar"]["speedup"]["value"] == pytest.approx(1.0) and "acceptance" not in rows["ar"]
    with pytest.raises(ValueError, match="no ar runs"):
        summarize(sd, {"sd": True})

"""Seed 003 (SPRINTER): the output law and its TV (Theorem 3.1), the token-dependent law (derived),
acceptance (Theorem A.4), run length (Theorem 3.3) and stopping time (Theorem 3.4), each against a
simulation with a synthetic classifier of given true/false-positive rates."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import theory
from tests.factories import distribution_pairs

TARGET, DRAFT = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])


def simulate_sprinter_step(target, draft, yes_if_acceptable, yes_if_unacceptable, runs, rng):
    """One position: draft x; the classifier says yes with the given per-token probabilities; a
    "no" runs the SD accept/correct step. Returns (kept the drafted token, emitted token)."""
    vocab = len(target)
    x = rng.choice(vocab, size=runs, p=draft)
    acceptable = draft[x] <= target[x]
    yes = rng.random(runs) < np.where(acceptable, yes_if_acceptable[x], yes_if_unacceptable[x])
    sd_accept = rng.random(runs) < np.minimum(1, target[x] / draft[x])
    kept = yes | sd_accept
    residual = np.maximum(target - draft, 0)
    emitted = np.where(kept, x, rng.choice(vocab, size=runs, p=residual / residual.sum()))
    return kept, emitted


def empirical(tokens, vocab):
    return np.bincount(tokens, minlength=vocab) / tokens.size


def test_theorem_3_1_uniform_rate_law_tv_and_acceptance():
    rng = np.random.default_rng(0)
    fp = 0.3
    law = theory.sprinter_output_law(TARGET, DRAFT, fp)
    np.testing.assert_allclose(law, (1 - fp) * TARGET + fp * DRAFT)
    tv = 0.5 * np.abs(TARGET - DRAFT).sum()
    assert theory.sprinter_tv(TARGET, DRAFT, fp) == pytest.approx(fp * tv)
    assert theory.sprinter_acceptance(TARGET, DRAFT, fp) == pytest.approx(1 - (1 - fp) * tv)  # Theorem A.4
    for tp in (0.2, 0.9):  # the true-positive rate does not change the law
        kept, emitted = simulate_sprinter_step(TARGET, DRAFT, np.full(4, tp), np.full(4, fp), 400_000, rng)
        assert np.abs(empirical(emitted, 4) - law).max() < 0.004
        assert abs(kept.mean() - (1 - (1 - fp) * tv)) < 0.004


def test_token_dependent_false_positive_rate():
    rng = np.random.default_rng(1)
    rates = np.array([0.0, 0.0, 0.1, 0.7])  # only tokens with D > T (2 and 3) matter
    law = theory.sprinter_output_law(TARGET, DRAFT, rates)
    kept, emitted = simulate_sprinter_step(TARGET, DRAFT, np.full(4, 0.5), rates, 400_000, rng)
    assert np.abs(empirical(emitted, 4) - law).max() < 0.004
    assert abs(kept.mean() - theory.sprinter_acceptance(TARGET, DRAFT, rates)) < 0.004
    assert theory.sprinter_tv(TARGET, DRAFT, rates) == pytest.approx(0.5 * np.abs(law - TARGET).sum())
    # the uniform formula with the average false-positive rate over unacceptable tokens is wrong here
    average = rates[2:].mean()
    assert np.abs((1 - average) * TARGET + average * DRAFT - law).max() > 0.02


@settings(max_examples=100, deadline=None)
@given(distribution_pairs(), st.floats(0, 1))
def test_uniform_rate_law_is_a_distribution_at_tv_eta_tv(pair, fp):
    target, draft = pair
    law = theory.sprinter_output_law(target, draft, fp)
    assert law.min() >= -1e-15 and law.sum() == pytest.approx(1)
    tv = 0.5 * np.abs(target - draft).sum()
    assert 0.5 * np.abs(law - target).sum() == pytest.approx(fp * tv, abs=1e-12)


def simulate_run_length(tp, fp, r, runs, rng):
    """Stylised model of Theorem 3.3: drafted tokens 1..r acceptable, later ones not; the
    classifier says yes independently with probability tp / fp; N = yeses before the first no."""
    horizon = 80  # P(N >= 80) < 1e-10 for the rates tested
    probs = np.where(np.arange(horizon) < r, tp, fp)
    says_yes = rng.random((runs, horizon)) < probs
    return np.argmin(says_yes, axis=1)  # index of the first "no" = number of yeses before it


@pytest.mark.parametrize("tp,fp,r", [(0.9, 0.5, 5), (0.6, 0.1, 3), (0.95, 0.3, 0)])
def test_theorems_3_3_and_3_4_against_simulation(tp, fp, r):
    rng = np.random.default_rng(2)
    run = theory.sprinter_run_length(tp, fp, r, support=40)
    n = simulate_run_length(tp, fp, r, 200_000, rng)
    assert abs(n.mean() - run.mean) < 4 * n.std() / np.sqrt(n.size)
    assert np.abs(np.bincount(n, minlength=40)[:40] / n.size - run.pmf).max() < 0.005
    assert run.mean == pytest.approx(np.arange(40) @ run.pmf + run.tail * 40, rel=0.05)
    draft_time = 0.1
    stop = theory.sprinter_stopping_time(tp, fp, r, draft_time)
    assert stop == pytest.approx(draft_time * (run.mean + 1))  # T_stop = t_d (N + 1)
    assert abs(draft_time * (n + 1).mean() - stop) < 4 * draft_time * n.std() / np.sqrt(n.size)


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.sprinter_output_law(TARGET, DRAFT, 1.2),
        lambda: theory.sprinter_output_law(TARGET, DRAFT, np.ones(3) * 0.5),
        lambda: theory.sprinter_run_length(1.0, 0.5, 3),
        lambda: theory.sprinter_run_length(0.5, 0.5, -1),
        lambda: theory.sprinter_stopping_time(0.5, 0.5, 3, -0.1),
    ],
)
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 0.999), st.floats(0, 0.5), st.integers(0, 20))
def test_figures_5_and_6_gap_at_most_one_token_while_fp_at_most_half(tp, fp, r):
    # seed 003 Figures 5-6: with eta_FP <= 0.5 the extra tokens over a perfect rejector (eta_FP = 0)
    # stay <= 1 and the extra stopping time <= t_d; the gap is eta_TP^r eta_FP / (1 - eta_FP)
    gap = theory.sprinter_run_length(tp, fp, r).mean - theory.sprinter_run_length(tp, 0.0, r).mean
    assert gap == pytest.approx(tp**r * fp / (1 - fp), abs=1e-12)
    assert gap <= 1 + 1e-12
    time_gap = theory.sprinter_stopping_time(tp, fp, r, 0.1) - theory.sprinter_stopping_time(tp, 0.0, r, 0.1)
    assert time_gap <= 0.1 + 1e-12

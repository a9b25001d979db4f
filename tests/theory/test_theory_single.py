"""Seed 002 closed forms: tokens per step, speedup, optimal draft length, and the exact path product."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import theory
from draftverify.testing import random_pair
from tests.factories import markov_tables, random_tables
from tests.theory.simulations import simulate_token_sd

RNG = np.random.default_rng(0)


def test_blog_table_of_tokens_per_step():
    # seed 002, "Expected tokens per step" table, rows alpha, columns gamma = 3, 5, 7, 10
    table = {
        0.5: [1.88, 1.97, 1.99, 2.00],
        0.7: [2.53, 2.94, 3.14, 3.27],
        0.8: [2.95, 3.69, 4.16, 4.57],
        0.9: [3.44, 4.69, 5.70, 6.86],
        0.95: [3.71, 5.30, 6.73, 8.62],
    }
    for acceptance, row in table.items():
        values = theory.tokens_per_step(acceptance, [3, 5, 7, 10])
        np.testing.assert_allclose(np.round(values, 2), row, atol=0.011)


def test_tokens_per_step_is_the_geometric_sum_and_handles_acceptance_one():
    a, length = 0.7, 6
    assert theory.tokens_per_step(a, length) == pytest.approx(sum(a**i for i in range(length + 1)))
    assert theory.tokens_per_step(1.0, 4) == 5
    assert theory.tokens_per_step(0.0, 4) == 1


def test_closed_form_equals_path_product_when_acceptance_is_constant():
    # context-free model: 1 - TV is the same at every prefix, so (1 - a^{L+1}) / (1 - a) is exact
    target, draft = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    length = 4
    tables = lambda p: [np.broadcast_to(p, (3,) * (i + 1)).copy() for i in range(length)]  # noqa: E731
    profile = theory.acceptance_profile(tables(target), tables(draft))
    a = theory.maximal_acceptance(target, draft)
    assert profile.tokens_per_step == pytest.approx(theory.tokens_per_step(a, length))


def test_path_product_agrees_with_simulated_sd_and_differs_from_the_mean_rate_formula():
    pair = random_pair(vocab_size=3, order=2, seed=3)
    length = 4
    target, draft = markov_tables(pair.target, length), markov_tables(pair.draft, length)
    profile = theory.acceptance_profile(target, draft)
    accepted = simulate_token_sd(target, draft, 200_000, np.random.default_rng(0))
    stderr = accepted.std() / np.sqrt(accepted.size)
    assert abs(accepted.mean() - profile.expected_accepted) < 4 * stderr
    for i, p in enumerate(profile.at_least, start=1):
        assert abs((accepted >= i).mean() - p) < 4 * np.sqrt(p * (1 - p) / accepted.size) + 1e-12
    # plugging the average per-position acceptance into the constant-rate formula is off here
    mean_rate = profile.at_least[0]
    constant_rate = theory.tokens_per_step(mean_rate, length) - 1
    assert abs(constant_rate - profile.expected_accepted) > 10 * stderr


def test_speedup_formula_and_the_blog_comparison():
    assert theory.speedup(0.8, 0.05, 5) == pytest.approx(theory.tokens_per_step(0.8, 5) / 1.25)
    # seed 002: alpha = 0.9 with rho = 0.5 "can easily lose" to alpha = 0.75 with rho = 0.02
    big = theory.optimal_draft_length(0.9, 0.5)
    small = theory.optimal_draft_length(0.75, 0.02)
    assert big.speedup < 1.4 < 2.9 < small.speedup


@settings(max_examples=150, deadline=None)
@given(st.floats(0.01, 0.99), st.floats(0.001, 2.0))
def test_optimal_length_solves_the_equation_and_matches_brute_force(acceptance, rho):
    result = theory.optimal_draft_length(acceptance, rho)
    lengths = np.arange(0, 3000)
    values = theory.speedup(acceptance, rho, lengths)
    assert result.speedup == pytest.approx(values.max(), rel=1e-12)
    assert values[result.integer] == pytest.approx(values.max(), rel=1e-12)
    if result.continuous > 0:
        a, L = acceptance, result.continuous
        lhs = -(a ** (L + 1)) * np.log(a) * (1 + L * rho)
        assert lhs == pytest.approx(rho * (1 - a ** (L + 1)), rel=1e-7, abs=1e-12)
    else:
        assert result.integer == 0


def test_pooled_acceptance_rate_is_unbiased_but_dividing_by_gamma_is_not():
    # seed 002 metric 1: accepted / verified recovers alpha; accepted / gamma gives about 0.54 for 0.8
    rng = np.random.default_rng(1)
    a, gamma, runs = 0.8, 5, 200_000
    accepted = (np.cumprod(rng.random((runs, gamma)) < a, axis=1)).sum(axis=1)
    verified = accepted + (accepted < gamma)
    assert accepted.sum() / verified.sum() == pytest.approx(a, abs=0.005)
    assert accepted.sum() / (gamma * runs) == pytest.approx(0.54, abs=0.005)
    assert (theory.tokens_per_step(a, gamma) - 1) / gamma == pytest.approx(0.538, abs=0.001)


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.tokens_per_step(1.2, 3),
        lambda: theory.tokens_per_step(0.5, -1),
        lambda: theory.tokens_per_step(0.5, 2.5),
        lambda: theory.tokens_per_step(float("nan"), 2),
        lambda: theory.speedup(0.5, -0.1, 2),
        lambda: theory.optimal_draft_length(1.0, 0.1),
        lambda: theory.optimal_draft_length(0.5, 0.0),
        lambda: theory.acceptance_profile([np.array([0.5, 0.6])], [np.array([0.5, 0.5])]),
        lambda: theory.acceptance_profile(random_tables(RNG, 3, 2), random_tables(RNG, 3, 3)),
        lambda: theory.acceptance_profile([np.ones((2, 2)) / 2], [np.ones((2, 2)) / 2]),
    ],
)
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()

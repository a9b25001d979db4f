"""Seed 000 section 5: Theorem 5.1 (refuted), Algorithm 1 line 5 (erratum), Proposition 5.2
(confirmed), Theorem 5.3 (refuted as stated; corrected form holds)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import get_verifier, theory
from draftverify.testing import exact_output_law, random_pair
from tests.factories import markov_tables, order_one_tables, random_tables
from tests.theory.simulations import simulate_token_sd


def context_free(probs: np.ndarray, length: int) -> list[np.ndarray]:
    return [np.broadcast_to(probs, (len(probs),) * (i + 1)).copy() for i in range(length)]


THIRDS_TARGET, THIRDS_DRAFT = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])


def accepted_law(verifier_name: str, target: np.ndarray, draft: np.ndarray, length: int) -> np.ndarray:
    """P(A = a), a = 0..L, of one call of a registered verifier on a context-free pair, exactly."""
    verifier = get_verifier(verifier_name)
    vocab = len(target)
    law = np.zeros(length + 1)
    for drafted in itertools.product(range(vocab), repeat=length):
        weight = np.prod(draft[list(drafted)])
        outcomes = exact_output_law(
            verifier,
            torch.tensor([drafted]),
            torch.tensor(np.broadcast_to(draft, (1, length, vocab)).copy()),
            torch.tensor(np.broadcast_to(target, (1, length + 1, vocab)).copy()),
        )
        for tokens, p in outcomes.items():
            law[len(tokens) - 1] += weight * p
    return law


def test_theorem_5_1_counterexample():
    claim = theory.longest_prefix_claim(context_free(THIRDS_TARGET, 2), context_free(THIRDS_DRAFT, 2))
    np.testing.assert_allclose(claim.claimed, [2 / 3, 6 / 9])
    np.testing.assert_allclose(claim.token_level, [2 / 3, 4 / 9])  # P(A >= 2) = 4/9 < 6/9
    # the registered token-level verifier and block verification agree with the computation ...
    sd = accepted_law("sd", THIRDS_TARGET, THIRDS_DRAFT, 2)
    assert sd[2] == pytest.approx(4 / 9)
    bv = accepted_law("bv", THIRDS_TARGET, THIRDS_DRAFT, 2)
    # ... BV, optimal in the ordinary loop, reaches E[tau] = 11/9, below the 12/9 the claim sums to
    assert bv @ np.arange(3) == pytest.approx(11 / 9)
    assert bv @ np.arange(3) < claim.claimed.sum() - 0.1
    # the claimed values are still upper bounds (the proof's first step), for SD and BV alike
    assert np.all(np.cumsum(bv[::-1])[::-1][1:] <= claim.claimed + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 3), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_theorem_5_1_claimed_values_bound_token_level_acceptance(vocab, length, seed):
    rng = np.random.default_rng(seed)
    claim = theory.longest_prefix_claim(random_tables(rng, vocab, length), random_tables(rng, vocab, length))
    assert np.all(claim.token_level <= claim.claimed + 1e-12)
    assert claim.token_level[0] == pytest.approx(claim.claimed[0])  # j = 1: equality


def test_algorithm_1_line_5_literal_reading_is_not_exact():
    # seed 000 Algorithm 1 line 5 draws a fresh coupled pair (X_i, Y_i) at the drafted prefix instead
    # of X_i given the drafted Y_i: the committed token can differ from the drafted one the next
    # target conditional was computed for. Exact law of the first two committed tokens:
    rng = np.random.default_rng(11)
    target, draft = random_tables(rng, 2, 2), random_tables(rng, 2, 2)
    t1, t2, d1, d2 = target[0], target[1], draft[0], draft[1]
    match1 = np.minimum(t1, d1)  # P(match, X_1 = a)
    overlap2 = np.minimum(t2, d2)  # [y, b]: P(match at 2, X_2 = b | drafted Y_1 = y)
    tv2 = 1 - overlap2.sum(axis=1)  # [y]
    literal = (
        match1[:, None] * (d1 @ overlap2 + (d1 @ tv2) * t2)  # step 2 at drafted y; on mismatch, T(.|a)
        + (t1 - match1)[:, None] * t2  # mismatch at step 1: exact continuation
    )
    assert literal.sum() == pytest.approx(1.0)
    assert np.abs(literal - t1[:, None] * t2).max() > 0.02


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_proposition_5_2_full_acceptance_bound_holds(vocab, length, seed):
    rng = np.random.default_rng(seed)
    bound = theory.full_acceptance_bound(random_tables(rng, vocab, length), random_tables(rng, vocab, length))
    assert bound.exact >= bound.bound_target - 1e-12
    assert bound.exact >= bound.bound_draft - 1e-12
    if length == 1:
        assert bound.exact == pytest.approx(bound.bound_target)  # tight for one token


def test_proposition_5_2_weighs_each_later_tv_by_its_prefix_law():
    """L = 2 by hand: 1 - TV(T_0, D_0) - sum_x P(x) TV(T_1(.|x), D_1(.|x)), P the target's first
    law or the draft's; exact P(A = 2) = sum_x min(T_0, D_0)(x) (1 - TV(T_1(.|x), D_1(.|x)))."""
    target = [np.array([0.5, 0.0, 0.5]), np.tile([0.5, 0.0, 0.5], (3, 1))]
    draft = [np.array([0.3, 0.7, 0.0]), np.array([[0.25, 0.5, 0.25], [0.5, 0.0, 0.5], [0.5, 0.0, 0.5]])]
    bound = theory.full_acceptance_bound(target, draft)  # TV(T_0, D_0) = 0.7; after token 0 the TV is 0.5, else 0
    assert bound.bound_target == pytest.approx(1 - 0.7 - 0.5 * 0.5)
    assert bound.bound_draft == pytest.approx(1 - 0.7 - 0.3 * 0.5)
    assert bound.exact == pytest.approx(0.3 * 0.5)


def test_proposition_5_2_exact_value_matches_simulation():
    pair = random_pair(vocab_size=3, order=2, seed=1)
    target, draft = markov_tables(pair.target, 3), markov_tables(pair.draft, 3)
    bound = theory.full_acceptance_bound(target, draft)
    accepted = simulate_token_sd(target, draft, 200_000, np.random.default_rng(5))
    full = (accepted == 3).mean()
    assert abs(full - bound.exact) < 4 * np.sqrt(bound.exact * (1 - bound.exact) / accepted.size)
    assert bound.exact > bound.bound_target


def theorem_5_3_counterexample(a: float = 0.5):
    """An i.i.d. target (gamma = 0) and an order-1 draft whose accepted first token, 0, leads to a
    prefix where the draft never agrees with the target."""
    target = np.array([a, 0.0, 1 - a])
    target_tables = [target, np.tile(target, (3, 1))]
    draft_tables = [np.array([a, 1 - a, 0.0]), np.array([[0.0, 1.0, 0.0], target, target])]
    return target_tables, draft_tables


def test_theorem_5_3_counterexample():
    target, draft = theorem_5_3_counterexample()
    result = theory.markov_block_bound(target, draft)
    assert result.gamma_target == 0.0
    assert result.exact == pytest.approx(0.5)
    assert result.claimed == pytest.approx(0.75)  # the claimed lower bound exceeds E[A]
    accepted = simulate_token_sd(target, draft, 100_000, np.random.default_rng(6))
    assert abs(accepted.mean() - 0.5) < 0.01
    # no exact scheme helps: the best possible E[A] is sum_j (1 - TV of the joint j-token laws)
    assert theory.longest_prefix_claim(target, draft).claimed.sum() == pytest.approx(0.5)
    assert result.corrected <= result.exact


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.integers(0, 2**32 - 1), st.sampled_from([0.3, 1.0, 20.0]))
def test_theorem_5_3_corrected_bound_holds_on_order_one_pairs(vocab, length, seed, concentration):
    rng = np.random.default_rng(seed)
    target = order_one_tables(rng, vocab, length, concentration)
    draft = order_one_tables(rng, vocab, length, concentration)
    result = theory.markov_block_bound(target, draft)
    assert result.corrected <= result.exact + 1e-12


def test_corrected_bound_is_informative_when_both_chains_are_stable():
    rng = np.random.default_rng(8)
    target = order_one_tables(rng, 3, 4, concentration=50.0)
    draft = [0.9 * t + 0.1 * d for t, d in zip(target, order_one_tables(rng, 3, 4, concentration=50.0))]
    result = theory.markov_block_bound(target, draft)
    assert 0.5 < result.corrected <= result.exact


def test_markov_sensitivity():
    transition = np.array([[1.0, 0.0], [0.5, 0.5]])
    tables = [np.array([0.5, 0.5]), transition, np.broadcast_to(transition, (2, 2, 2)).copy()]
    assert theory.markov_sensitivity(tables) == pytest.approx(0.5)
    order_two = markov_tables(random_pair(vocab_size=3, order=2, seed=0).target, 3)
    assert theory.markov_sensitivity(order_two) == float("inf")

"""`bv` and `gbv`: the regression of docs/corrections.md, E[tau] formulas against exact and Monte Carlo
values, and the gbv state."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from draftverify import get_verifier
from draftverify.bench.spectr_gbv import context_free_pair
from draftverify.testing import draw_drafts, enumerate_outcomes, random_pair
from draftverify.verify.block import GBVState

from .test_token import expected_accepted, monte_carlo_accepted


@pytest.mark.parametrize("name,value", [("sd", Fraction(10, 9)), ("bv", Fraction(11, 9)), ("gbv", Fraction(12, 9))])
def test_context_free_regression(name, value):
    # docs/corrections.md: T(a) = 1/3, D(a) = 2/3, L = 2
    pair = context_free_pair([1 / 3, 2 / 3], [2 / 3, 1 / 3])
    assert expected_accepted(get_verifier(name), pair, [], 2) == pytest.approx(float(value), abs=1e-12)


def joint(model, prefix, path):
    rows = model.conditionals(prefix, path)
    return float(np.prod([rows[j, path[j]] for j in range(len(path))]))


def bv_formula(pair, prefix, length):
    """E[tau] = sum_i E_{X^i ~ D}[p_i], p_i the clipped running ratio (Sun et al. 2025, Thm 2)."""
    total = 0.0
    for i in range(1, length + 1):
        for path in itertools.product(range(pair.vocab_size), repeat=i):
            p = 1.0
            t_rows, d_rows = pair.target.conditionals(prefix, path), pair.draft.conditionals(prefix, path)
            for j in range(i):
                p = min(1.0, p * t_rows[j, path[j]] / d_rows[j, path[j]]) if d_rows[j, path[j]] > 0 else 0.0
            total += joint(pair.draft, prefix, path) * p
    return total


def gbv_formula(pair, prefix, length):
    """E[tau] = sum_i sum_{x^i} min(D(x^i), T(x^i)) (seed 004 section 3.3)."""
    return sum(
        min(joint(pair.draft, prefix, path), joint(pair.target, prefix, path))
        for i in range(1, length + 1)
        for path in itertools.product(range(pair.vocab_size), repeat=i)
    )


@pytest.mark.parametrize("name,formula", [("bv", bv_formula), ("gbv", gbv_formula)])
@pytest.mark.parametrize("length", [1, 2, 3])
def test_expected_accepted_formulas(name, formula, length):
    pair = random_pair(vocab_size=3, seed=6)
    verifier = get_verifier(name)
    value = formula(pair, [2], length)
    assert expected_accepted(verifier, pair, [2], length) == pytest.approx(value, abs=1e-12)
    mean, stderr = monte_carlo_accepted(verifier, pair, [2], length, samples=3000, seed=length)
    assert abs(mean - value) < 4.5 * stderr


def test_bv_beats_sd_and_gbv_beats_bv_per_call():
    pair = random_pair(vocab_size=3, seed=8)
    values = [expected_accepted(get_verifier(n), pair, [], 3) for n in ("sd", "bv", "gbv")]
    assert values[0] <= values[1] + 1e-12 <= values[2] + 2e-12


def test_gbv_state_is_returned_and_validated():
    pair = context_free_pair([1 / 3, 2 / 3], [2 / 3, 1 / 3])
    verifier = get_verifier("gbv")

    def first_state(source):
        tokens, draft, target = draw_drafts(pair, [], 1, 3, source)
        result = verifier.verify(tokens, draft, target, generator=source)
        return result.num_accepted, result.state

    for (accepted, state), prob in enumerate_outcomes(first_state).items():
        if accepted < 2:  # L - tau - 1 > 0 positions to modify
            assert isinstance(state, GBVState) and state.modifications[-1].remaining == 3 - accepted - 1
        else:
            assert state is None
    tokens, draft, target = draw_drafts(pair, [], 1, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="state"):
        verifier.verify(tokens, draft, target, state="not a state")

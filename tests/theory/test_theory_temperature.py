"""Seed 000 section 4: the temperature law (Theorem 4.1), its constant (Theorem 4.2), schedules."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import theory
from draftverify.testing import random_pair
from tests.factories import markov_tables
from tests.theory.simulations import categorical


def test_tempered_matches_direct_power_and_keeps_zeros():
    target = np.array([0.5, 0.0, 0.3, 0.2])
    powered = target**0.7
    np.testing.assert_allclose(theory.tempered(target, 0.7), powered / powered.sum())
    np.testing.assert_allclose(theory.tempered(target, 1.0), target)


def test_first_order_law_is_the_derivative_at_tau_one():
    # remainder / (tau - 1)^2 stays bounded as tau -> 1 (the law is first-order exact) ...
    target = np.array([0.6, 0.25, 0.1, 0.05])
    ratios = [theory.temperature_law(target, 1 + t).remainder / t**2 for t in (1e-1, 1e-2, 1e-3)]
    assert max(ratios) < 1.0 and ratios[-1] == pytest.approx(ratios[-2], rel=0.1)
    # ... while a wrong coefficient (the standard deviation instead of the MAD) leaves an O(t) error
    logs = np.log(target)
    std = np.sqrt((target * (logs - (target * logs).sum()) ** 2).sum())
    t = 1e-3
    assert abs(theory.temperature_law(target, 1 + t).exact_tv - t / 2 * std) / t**2 > 10


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 12),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.05, 0.3, 1.0, 3.0]),
    st.floats(0.01, 0.95),
    st.floats(-1.0, 1.0),
)
def test_theorem_4_2_bound_holds(support, seed, concentration, rho, where):
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.full(support, concentration))
    target = np.where(target < 1e-300, 0, target)
    target /= target.sum()
    tau = 1 + where * rho
    law = theory.temperature_law(target, tau, max(rho, abs(tau - 1)))  # rounding can push |tau - 1| past rho
    assert law.remainder <= law.bound + 1e-15


def test_theorem_4_2_constant_value_and_erratum_support_size():
    # C(m, rho) as printed, at m = 3, rho = 1/2
    m, rho = 3, 0.5
    expected = (1 + rho * np.log(m)) * m**rho * (4 * m / (np.e**2 * (1 - rho) ** 2) + np.log(m) ** 2 * m**rho)
    assert theory.temperature_constant(m, rho) == pytest.approx(expected)
    # Theorem 4.1 writes |S| <= n: the constant must depend on the support size m, not a fixed
    # number. A 200-token target needs more than C(1, rho) (a support of one) allows ...
    target = np.concatenate([[0.975], np.full(199, 0.025 / 199)])
    law = theory.temperature_law(target, 0.5, rho)
    assert law.remainder > theory.temperature_constant(1, rho) * 0.25
    # ... and stays within C(200, rho)
    assert law.remainder <= law.bound


def test_self_speculation_rejects_with_probability_tv():
    rng = np.random.default_rng(0)
    target = np.array([0.5, 0.25, 0.15, 0.1])
    draft = theory.tempered(target, 0.7)
    n = 400_000
    x = rng.choice(4, size=n, p=draft)
    rejected = rng.random(n) >= np.minimum(1, target[x] / draft[x])
    tv = theory.temperature_law(target, 0.7).exact_tv
    assert abs(rejected.mean() - tv) < 4 * np.sqrt(tv * (1 - tv) / n)


def test_schedule_rejections_match_simulation_and_first_order():
    pair = random_pair(vocab_size=3, order=2, seed=7, zero_share=0.0)
    taus = np.array([0.9, 0.8, 1.1, 1.2])
    tables = markov_tables(pair.target, len(taus))
    schedule = theory.schedule_rejections(tables, taus)
    rng = np.random.default_rng(3)
    runs, rows = 200_000, np.arange(200_000)
    prefix = np.zeros((runs, 0), dtype=np.int64)
    rejections = np.zeros(runs)
    for n, tau in enumerate(taus):
        index = tuple(prefix[:, j] for j in range(n))
        t = tables[n][index] if n else np.broadcast_to(tables[0], (runs, 3))
        d = theory.tempered(t, tau)
        x = categorical(rng, d)
        accept = rng.random(runs) < np.minimum(1, t[rows, x] / d[rows, x])
        correction = categorical(rng, np.maximum(t - d, 0) + 1e-300 * t)
        rejections += ~accept
        prefix = np.concatenate([prefix, np.where(accept, x, correction)[:, None]], axis=1)
    assert abs(rejections.mean() - schedule.exact.sum()) < 4 * rejections.std() / np.sqrt(runs)
    assert np.all(np.abs(schedule.exact - schedule.first_order) <= schedule.bound)


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.tempered([0.5, 0.5], 0.0),
        lambda: theory.temperature_law([0.5, 0.5], 2.5),
        lambda: theory.temperature_law([0.5, 0.5], 0.7, rho=0.2),
        lambda: theory.temperature_constant(0, 0.5),
        lambda: theory.temperature_constant(3, 1.0),
        lambda: theory.schedule_rejections([np.array([0.5, 0.5])], [0.9, 0.9]),
    ],
)
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()

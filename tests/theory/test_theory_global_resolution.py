"""Seed 001: Global Resolution's error bounds (Lemma 6.6: 15 tau, 10 tau) and the multi-step bound
15 L tau (Theorem R.1), the latter checked exactly on small autoregressive models."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import ot, theory
from tests.factories import random_tables


def test_bounds_follow_lemma_6_6_arithmetic():
    bounds = theory.global_resolution_bounds(1e-3, draft_length=4)
    assert bounds.l1 == pytest.approx(5e-3 + 2 * 5e-3)  # a + 2b with a = b = 5 tau
    assert bounds.acceptance == pytest.approx(5e-3 + 5e-3)  # a + b
    assert bounds.multi_step_l1 == pytest.approx(15 * 4 * 1e-3)


def perturbed(tables, rng, size):
    """Tables whose every row is moved by at most ``size`` in L1 (mass shifted between two tokens)."""
    out = []
    for table in tables:
        shift = rng.uniform(0, size / 2, size=table.shape[:-1])
        give, take = table.argmax(axis=-1), table.argmin(axis=-1)
        moved = np.minimum(shift, np.take_along_axis(table, give[..., None], -1)[..., 0])
        new = table.copy()
        np.put_along_axis(new, give[..., None], np.take_along_axis(new, give[..., None], -1) - moved[..., None], -1)
        np.put_along_axis(new, take[..., None], np.take_along_axis(new, take[..., None], -1) + moved[..., None], -1)
        out.append(new)
    return out


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.integers(0, 2**32 - 1), st.floats(1e-4, 0.02))
def test_theorem_r_1_telescoping_bound_holds(vocab, length, seed, tau):
    rng = np.random.default_rng(seed)
    target = random_tables(rng, vocab, length)
    approx = perturbed(target, rng, 15 * tau)  # every conditional within 15 tau in L1
    error = theory.multi_step_error(target, approx)
    assert error.exact <= error.bound + 1e-12 <= error.worst_case + 2e-12
    assert error.worst_case <= 15 * length * tau + 1e-12
    if length == 1:
        assert error.exact == pytest.approx(error.bound)


def test_theorem_r_1_bound_is_tight_for_one_erring_step_and_loose_when_errors_compound():
    point = [np.array([1.0, 0.0])] + [np.tile([1.0, 0.0], (2,) * i + (1,)) for i in range(1, 3)]
    off = [np.array([0.9, 0.1])] + [np.tile([0.9, 0.1], (2,) * i + (1,)) for i in range(1, 3)]
    last_only = theory.multi_step_error(point, point[:2] + off[2:])
    assert last_only.exact == pytest.approx(last_only.bound) == pytest.approx(0.2)
    every_step = theory.multi_step_error(point, off)
    assert every_step.exact == pytest.approx(2 * (1 - 0.9**3))  # 0.542 < 3 * 0.2
    assert every_step.exact < every_step.bound == pytest.approx(0.6)


def test_theorem_r_1_bound_weighs_each_step_by_the_targets_prefix_law():
    """The approximation errs after token 1, which the target never emits first and the
    approximation does half the time: E_{x ~ T} counts that error 0 times, E_{x ~ A} would count it
    half; the worst case counts it whole. Exact: T^(2) = {00: 1}, A^(2) = {00: 1/2, 11: 1/2}."""
    target = [np.array([1.0, 0.0]), np.array([[1.0, 0.0], [1.0, 0.0]])]
    approx = [np.array([0.5, 0.5]), np.array([[1.0, 0.0], [0.0, 1.0]])]
    error = theory.multi_step_error(target, approx)
    assert (error.exact, error.bound, error.worst_case) == pytest.approx((1.0, 1.0, 3.0))


def test_global_resolution_solver_respects_the_seed_bounds():
    rng = np.random.default_rng(3)
    tau = 1e-3
    for _ in range(5):
        target, draft = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
        plan = ot.solve(target, draft, 2, method="gr", tol=tau)
        bounds = theory.global_resolution_bounds(tau)
        assert plan.target_error <= bounds.l1
        assert plan.optimal_acceptance - plan.acceptance <= bounds.acceptance


def test_multi_step_error_of_global_resolution_decoding():
    rng = np.random.default_rng(4)
    vocab, length, k, tau = 3, 2, 2, 1e-3
    target, draft = random_tables(rng, vocab, length), random_tables(rng, vocab, length)
    tuples = list(itertools.product(range(vocab), repeat=k))

    def output_law(t_row, d_row):  # the law of the emitted token: sum_w P_draft(w) pi(. | w)
        plan = ot.solve(t_row, d_row, k, method="gr", tol=tau)
        return sum(np.prod(d_row[list(w)]) * plan.conditional(np.array(w)) for w in tuples)

    approx = [output_law(target[0], draft[0])]
    approx.append(np.stack([output_law(target[1][x], draft[1][x]) for x in range(vocab)]))
    error = theory.multi_step_error(target, approx)
    assert error.exact <= error.bound + 1e-12 <= theory.global_resolution_bounds(tau, length).multi_step_l1


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError):
        theory.global_resolution_bounds(-1e-3)
    with pytest.raises(ValueError):
        theory.global_resolution_bounds(1e-3, draft_length=0)
    with pytest.raises(ValueError):
        theory.multi_step_error([np.array([0.5, 0.5])], [np.array([0.5, 0.5]), np.ones((2, 2)) / 2])

"""Seed 000 section 3: maximal acceptance = 1 - TV, and the sub-maximal accounting (Proposition 3.2)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import get_verifier, theory
from draftverify.testing import exact_output_law, random_pair
from tests.factories import distribution_pairs, markov_tables
from tests.theory.simulations import categorical


def test_maximal_acceptance_matches_simulated_sd_step():
    rng = np.random.default_rng(0)
    target, draft = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    n = 400_000
    x = rng.choice(5, size=n, p=draft)
    accepted = rng.random(n) < np.minimum(1, target[x] / draft[x])
    expected = theory.maximal_acceptance(target, draft)
    assert expected == pytest.approx(1 - 0.5 * np.abs(target - draft).sum())
    assert abs(accepted.mean() - expected) < 4 * np.sqrt(expected * (1 - expected) / n)


@settings(max_examples=100, deadline=None)
@given(distribution_pairs(), st.integers(0, 2**32 - 1))
def test_submaximal_step_is_exact_and_rejects_tv_plus_eps(pair, seed):
    target, draft = pair
    withheld = np.random.default_rng(seed).random(target.shape) * np.minimum(target, draft)
    step = theory.submaximal_step(target, draft, withheld)
    tv = 0.5 * np.abs(target - draft).sum()
    np.testing.assert_allclose(step.output, target, atol=1e-12)
    assert step.rejection == pytest.approx(tv + withheld.sum(), abs=1e-12)
    assert step.extra_rejection == pytest.approx(withheld.sum(), abs=1e-12)
    # the law implied by the pieces: accept x with accept_probs(x), else draw the correction
    implied = draft * step.accept_probs + (1 - (draft * step.accept_probs).sum()) * step.correction
    np.testing.assert_allclose(implied, target, atol=1e-12)


def test_broken_twin_correcting_from_r_alone_is_not_exact():
    # withholding sigma but correcting from (T - D)_+ / TV (SD's residual) loses the withheld mass
    target, draft = np.array([0.5, 0.3, 0.2]), np.array([0.3, 0.3, 0.4])
    withheld = 0.5 * np.minimum(target, draft)
    step = theory.submaximal_step(target, draft, withheld)
    residual = np.maximum(target - draft, 0)
    broken = draft * step.accept_probs + step.rejection * residual / residual.sum()
    assert np.abs(broken - target).max() > 0.05
    np.testing.assert_allclose(step.output, target, atol=1e-12)


def test_rejection_accounting_matches_simulated_decoding():
    pair = random_pair(vocab_size=3, order=2, seed=5)
    horizon, fraction, runs = 4, 0.4, 200_000
    target, draft = markov_tables(pair.target, horizon), markov_tables(pair.draft, horizon)
    accounting = theory.rejection_accounting(target, draft, fraction)
    rng = np.random.default_rng(2)
    prefix = np.zeros((runs, 0), dtype=np.int64)
    rejections = np.zeros(runs)
    rows = np.arange(runs)
    for n in range(horizon):
        index = tuple(prefix[:, j] for j in range(n))
        t = target[n][index] if n else np.broadcast_to(target[0], (runs, 3))
        d = draft[n][index] if n else np.broadcast_to(draft[0], (runs, 3))
        x = categorical(rng, d)
        overlap = np.minimum(t, d)
        accept = rng.random(runs) < (1 - fraction) * overlap[rows, x] / d[rows, x]
        correction = categorical(rng, np.maximum(t - d, 0) + fraction * overlap)
        emitted = np.where(accept, x, correction)
        rejections += ~accept
        prefix = np.concatenate([prefix, emitted[:, None]], axis=1)
    stderr = rejections.std() / np.sqrt(runs)
    assert abs(rejections.mean() - accounting.submaximal) < 4 * stderr
    assert accounting.extra == pytest.approx(fraction * (horizon - accounting.maximal))
    # the emitted sequences follow the target (exactness of the scheme the identity is about)
    counts = np.bincount(prefix @ (3 ** np.arange(horizon - 1, -1, -1)), minlength=3**horizon) / runs
    assert np.abs(counts - pair.target.law(horizon).ravel()).max() < 0.005


def test_registered_submaximal_verifier_rejects_as_proposition_3_2_says():
    verifier = get_verifier("submaximal", fraction=0.3)
    rng = np.random.default_rng(4)
    target = rng.dirichlet(np.ones(4), size=2)  # rows: position 1, bonus position
    draft = rng.dirichlet(np.ones(4))
    rejection = 0.0
    for x in range(4):  # exact law of one call per drafted token, weighted by D(x)
        law = exact_output_law(
            verifier, torch.tensor([[x]]), torch.tensor(draft[None, None]), torch.tensor(target[None])
        )
        rejection += draft[x] * sum(p for tokens, p in law.items() if len(tokens) == 1)
    expected = theory.submaximal_step(target[0], draft, 0.3 * np.minimum(target[0], draft)).rejection
    assert rejection == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.submaximal_step([0.5, 0.5], [0.5, 0.5], [0.6, 0.0]),
        lambda: theory.submaximal_step([0.5, 0.5], [0.5, 0.5], [0.1]),
        lambda: theory.maximal_acceptance([0.5, 0.5], [0.5, 0.5, 0.0]),
        lambda: theory.maximal_acceptance([0.5, 0.6], [0.5, 0.5]),
        lambda: theory.rejection_accounting([np.array([0.5, 0.5])], [np.array([0.5, 0.5])], 1.5),
    ],
)
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()

"""SPRINTER's output law against seed 003's theory, with a synthetic classifier of given rates.

Every token the classifier decides on has law T + eta (D - T)_+ - (T - D)_+ E / TV (our general
form of seed 003, Theorem 3.1, in ``draftverify.theory.sprinter_output_law``); with one rate eta_FP,
(1 - eta_FP) T + eta_FP D. With draft length L >= N the first N tokens are all decided by the
classifier, so their law is that of the Markov chain whose table is the predicted law. Checked by
exact enumeration and by Monte Carlo; a broken twin and the target's own law must fail.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from draftverify import get_verifier, rng, theory
from draftverify.approx import Sprinter, load_classifier
from draftverify.testing import MarkovModel, check_exactness, decode_known_laws, exact_sequence_law, goodness_of_fit, random_pair
from draftverify.verify import VerifyResult
from tests.factories import RateClassifier

STRICT, BROKEN = 1e-3, 1e-6
SMALL = random_pair(vocab_size=3, order=2, seed=5)


def predicted_chain(pair, false_positive_rate) -> MarkovModel:
    """The Markov chain whose conditionals are SPRINTER's predicted per-token law."""
    eta = np.broadcast_to(np.asarray(false_positive_rate, dtype=np.float64), pair.target.table.shape[-1:])
    table = theory.sprinter_output_law(pair.target.table, pair.draft.table, np.broadcast_to(eta, pair.target.table.shape))
    return MarkovModel(table, pair.target.order, pair.target.start)


def exact_law(classifier, pair=SMALL) -> np.ndarray:
    return exact_sequence_law(Sprinter(classifier=classifier), pair, draft_length=2, num_tokens=2)


def test_uniform_rate_law_is_theorem_3_1_exactly():
    law = exact_law(RateClassifier(0.3, 0.6))
    uniform = (1 - 0.3) * SMALL.target.table + 0.3 * SMALL.draft.table  # the seed's formula, written out
    np.testing.assert_allclose(law, MarkovModel(uniform, 2, SMALL.target.start).law(2), atol=1e-12)
    assert 0.5 * np.abs(law - SMALL.target.law(2)).sum() > 0.05  # lossy: the test could fail


def test_true_positive_rate_leaves_the_law_unchanged():
    laws = [exact_law(RateClassifier(0.4, tp)) for tp in (0.05, 0.5, 1.0)]
    np.testing.assert_allclose(laws[0], laws[1], atol=1e-12)
    np.testing.assert_allclose(laws[0], laws[2], atol=1e-12)
    assert np.abs(exact_law(RateClassifier(0.1, 0.5)) - laws[0]).max() > 1e-3  # eta_FP does change it


def test_zero_false_positive_rate_is_exact():
    np.testing.assert_allclose(exact_law(RateClassifier(0.0, 0.7)), SMALL.target.law(2), atol=1e-12)
    report = check_exactness(Sprinter(classifier=RateClassifier(0.0, 0.8)), draft_length=2, num_tokens=2, samples=1500,
                             seed=4, threshold=STRICT)
    assert report.passed(), report


def test_token_dependent_rate_follows_the_general_formula_not_the_uniform_one():
    rates = np.array([0.9, 0.0, 0.5])
    law = exact_law(RateClassifier(rates, 0.5))
    np.testing.assert_allclose(law, predicted_chain(SMALL, rates).law(2), atol=1e-12)
    # the seed's uniform formula with the rate averaged over drafted unacceptable tokens misses it
    excess = np.maximum(SMALL.draft.table - SMALL.target.table, 0)
    average = float((excess * rates).sum() / excess.sum())
    assert np.abs(law - predicted_chain(SMALL, average).law(2)).max() > 1e-3


@dataclass(frozen=True)
class NoKeepOnNo:
    """Broken twin: at a "no" it always emits a correction from the residual (no min(1, T/D) step)."""

    classifier: RateClassifier

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        x, draft, target = draft_tokens[0], draft_probs[0], target_probs[0]
        length = x.shape[0]
        yes = rng.bernoulli(self.classifier.yes_probability(x, draft, target_probs=target[:length]), generator)
        no = torch.nonzero(~yes)
        j = int(no[0]) if no.numel() else length
        row = target[j] if j == length else torch.clamp(target[j] - draft[j], min=0) + 1e-12
        return VerifyResult(x[:j].tolist() + [rng.categorical(row, generator)], j, 0, None)


def monte_carlo_counts(verifier, pair, samples: int, num_tokens: int = 3, draft_length: int = 3, seed: int = 0):
    generator, draft_rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    weights = pair.vocab_size ** np.arange(num_tokens - 1, -1, -1)
    counts = np.zeros(pair.vocab_size**num_tokens)
    for trace in decode_known_laws(verifier, pair, 1, draft_length, num_tokens, samples, generator, draft_rng):
        counts[int(np.dot(trace.tokens, weights))] += 1
    return counts


@pytest.mark.parametrize("false_positive_rate", [0.5, np.array([1.0, 0.2, 0.0, 0.6])])
def test_monte_carlo_matches_the_prediction_and_not_the_target(false_positive_rate):
    pair = random_pair(vocab_size=4, order=2, seed=2)
    classifier = RateClassifier(false_positive_rate, 0.7)
    counts = monte_carlo_counts(Sprinter(classifier=classifier), pair, 2000)
    assert goodness_of_fit(counts, predicted_chain(pair, false_positive_rate).law(3).ravel())[0] > STRICT
    assert goodness_of_fit(counts, pair.target.law(3).ravel())[0] < BROKEN
    twin = monte_carlo_counts(NoKeepOnNo(classifier), pair, 1500)
    assert goodness_of_fit(twin, predicted_chain(pair, false_positive_rate).law(3).ravel())[0] < BROKEN


def test_bonus_after_a_full_run_and_checked_token():
    draft = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    target = torch.tensor([[[0.9, 0.1], [0.9, 0.1], [0.0, 1.0]]], dtype=torch.float64)
    always = Sprinter(classifier=RateClassifier(1.0, 1.0))
    result = always.verify(torch.tensor([[1, 1]]), draft, target)
    assert result.tokens == [1, 1, 1] and result.num_accepted == 2  # bonus from target row L
    never = Sprinter(classifier=RateClassifier(0.0, 0.0))  # checked at position 0: token 1 kept w.p. 0.2
    outcomes = [tuple(never.verify(torch.tensor([[1, 1]]), draft, target, generator=torch.Generator().manual_seed(s)).tokens)
                for s in range(400)]
    assert set(outcomes) == {(0,), (1,)} and 0.1 < outcomes.count((1,)) / 400 < 0.3


def test_bad_options_and_inputs():
    with pytest.raises(ValueError, match="threshold"):
        Sprinter(threshold=1.5, classifier=RateClassifier())
    with pytest.raises(ValueError, match="given rates"):
        Sprinter(threshold=0.7, classifier=RateClassifier())
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        RateClassifier(1.2)
    with pytest.raises(ValueError, match="yes_probability"):
        Sprinter(classifier=3)
    with pytest.raises(ValueError, match="yes_probability"):
        Sprinter(classifier="/nonexistent/classifier.json")  # a path is not read here: the verifier is pure
    with pytest.raises(FileNotFoundError):
        load_classifier("/nonexistent/classifier.json")
    with pytest.raises(ValueError, match="does not take"):
        get_verifier("sprinter", lam=1)
    with pytest.raises(ValueError, match="test device"):
        RateClassifier().yes_probability(torch.tensor([0]), torch.tensor([[1.0, 0.0]]))

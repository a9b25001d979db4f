"""The checker itself: its goodness-of-fit test, its power against a biased decoder, and the
enumerator's exact laws on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify import get_verifier
from draftverify.testing import (
    FAILED, INCONCLUSIVE, PASSED, check_exactness, decode_known_laws, detectable_tv, enumerate_outcomes, exact_output_law,
    goodness_of_fit, random_pair,
)


def test_goodness_of_fit_on_hand_cases():
    law = np.array([0.5, 0.3, 0.2])
    assert goodness_of_fit(np.array([500.0, 300.0, 200.0]), law)[0] == pytest.approx(1.0)
    assert goodness_of_fit(np.array([600.0, 250.0, 150.0]), law)[0] < 1e-6
    # an outcome of probability zero observed once is fatal
    assert goodness_of_fit(np.array([500.0, 300.0, 199.0, 1.0]), np.append(law, 0.0))[0] == 0.0


def test_p_values_of_an_exact_verifier_are_not_piled_near_zero():
    p_values = [check_exactness(get_verifier("sd"), draft_length=1, num_tokens=2, samples=400, seed=s).p_value for s in range(12)]
    assert min(p_values) > 1e-3 and np.mean(p_values) > 0.25


class DraftOnly:
    """Accepts every drafted token: its law is the draft's, not the target's."""

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        from draftverify.verify.base import VerifyResult

        return VerifyResult(draft_tokens[0].tolist() + [0], draft_tokens.shape[1], 0, None)


def test_checker_rejects_a_decoder_with_the_draft_law():
    report = check_exactness(DraftOnly(), draft_length=2, samples=3000)
    assert report.p_value < 1e-12 and report.tv > 0.1


def test_enumeration_of_hand_built_draws():
    from draftverify import rng

    def procedure(source):
        coin = bool(rng.bernoulli(torch.tensor([0.25]), source)[0])
        return (coin, rng.categorical(torch.tensor([0.0, 1.0, 3.0]), source))

    law = enumerate_outcomes(procedure)
    assert law == pytest.approx({(True, 1): 0.0625, (True, 2): 0.1875, (False, 1): 0.1875, (False, 2): 0.5625})


def test_exact_output_law_of_sd_single_position():
    draft = torch.tensor([[[0.6, 0.4]]], dtype=torch.float64)
    target = torch.tensor([[[0.3, 0.7], [0.5, 0.5]]], dtype=torch.float64)
    law = exact_output_law(get_verifier("sd"), torch.tensor([[0]]), draft, target)
    # accept 0 with 0.3 / 0.6 = 1/2 then a bonus token; else the residual (T - D)+ is token 1
    assert law == pytest.approx({(0, 0): 0.25, (0, 1): 0.25, (1,): 0.5})


def test_checker_validates_its_arguments():
    with pytest.raises(ValueError):
        check_exactness(get_verifier("sd"), samples=0)
    with pytest.raises(ValueError, match="too large"):
        check_exactness(get_verifier("sd"), random_pair(vocab_size=8), num_tokens=8, samples=1)
    for count in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="count"):
            decode_known_laws(get_verifier("sd"), random_pair(), 1, 2, 3, count, torch.Generator(), np.random.default_rng())


def test_checker_reports_each_decoded_sequence():
    done = []
    report = check_exactness(get_verifier("sd"), samples=25, on_sample=lambda: done.append(1))
    assert len(done) == report.samples == 25


class TargetCubed:
    """Samples the next token from the target cubed (renormalised): far from the target's law."""

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        from draftverify.verify.base import VerifyResult

        row = torch.as_tensor(target_probs)[0, 0] ** 3  # [V]
        return VerifyResult([int(torch.multinomial(row / row.sum(), 1, generator=generator))], 0, 0, None)


def test_a_test_without_degrees_of_freedom_is_inconclusive_never_passed():
    # 20^4 outcomes, 500 samples: every expected count is below 5, so one pooled bin and no test
    report = check_exactness(TargetCubed(), random_pair(vocab_size=20), num_tokens=4, samples=500)
    assert report.status == INCONCLUSIVE and not report.passed(), report
    assert np.isnan(report.p_value) and report.dof == 0 and report.detectable_tv == 1.0
    assert np.isnan(goodness_of_fit(np.array([3.0, 1.0]), np.array([0.5, 0.5]))[0])


def test_a_test_too_weak_for_the_stated_tv_is_inconclusive():
    report = check_exactness("sd", draft_length=1, num_tokens=2, samples=200)
    assert report.dof >= 1 and report.p_value > report.threshold
    assert report.detectable_tv > report.detect_tv and report.status == INCONCLUSIVE, report
    assert check_exactness("sd", draft_length=1, num_tokens=2, samples=200, detect_tv=0.5).passed()


def test_an_exact_verifier_with_enough_samples_passes_and_its_broken_twins_fail():
    passed = check_exactness("sd", draft_length=1, num_tokens=2, samples=2000)
    assert passed.status == PASSED and passed.detectable_tv <= 0.1, passed
    for twin in (TargetCubed(), DraftOnly()):
        failed = check_exactness(twin, draft_length=1, num_tokens=2, samples=2000)
        assert failed.status == FAILED and not failed.passed(), failed


def test_detectable_tv_is_detected_by_the_worst_alternative():
    # the alternative at binned TV delta of least noncentrality (Cauchy-Schwarz equality: shifts
    # proportional to the law, +delta on one half of the mass, -delta on the other) is still
    # rejected with about the stated power 0.9
    law = np.array([0.25, 0.25, 0.2, 0.1, 0.1, 0.05, 0.05])
    samples, threshold = 400, 1e-3
    delta = detectable_tv(law, samples, threshold)
    sign = np.array([1, -1, 1, -1, 1, -1, -1])  # halves of mass 0.5 and 0.5
    alternative = law * (1 + 2 * delta * sign)
    rng = np.random.default_rng(0)
    rejected = [goodness_of_fit(rng.multinomial(samples, alternative).astype(float), law)[0] <= threshold
                for _ in range(2000)]
    assert 0.5 * np.abs(alternative - law).sum() == pytest.approx(delta)
    assert np.mean(rejected) > 0.85
    assert detectable_tv(law, 4 * samples, threshold) < delta  # more samples see smaller deviations


def test_checker_refuses_what_is_not_a_verifier_or_its_arguments():
    assert check_exactness("bv", draft_length=1, num_tokens=2, samples=5).samples == 5  # a name resolves
    with pytest.raises(ValueError, match="verifier"):
        check_exactness(object())
    with pytest.raises(ValueError, match="pair"):
        check_exactness("sd", pair="foo")
    with pytest.raises(ValueError, match="samples"):
        check_exactness("sd", samples=2.5)
    with pytest.raises(ValueError, match="threshold"):
        check_exactness("sd", threshold=0)

    class ReturnsNone:
        def verify(self, *args, **kwargs):
            return None

    with pytest.raises(ValueError, match="not a VerifyResult"):
        check_exactness(ReturnsNone(), samples=2)


def test_rare_outcomes_pool_into_bins_of_expected_count_at_least_five():
    # 100 samples: cells of expected count 48, 48, 2, 2; the rare ones pooled (4) still fall short
    # of 5, so they join the smaller kept cell: two bins, one degree of freedom
    law = np.array([0.48, 0.48, 0.02, 0.02])
    p_value, _, dof = goodness_of_fit(np.array([48.0, 48.0, 2.0, 2.0]), law)
    assert dof == 1 and p_value == pytest.approx(1.0)
    # pooled to 10 they keep a bin of their own
    law = np.array([0.45, 0.45, 0.04, 0.03, 0.03])
    assert goodness_of_fit(np.array([45.0, 45.0, 4.0, 3.0, 3.0]), law)[2] == 2


def test_a_deviation_inside_a_pooled_bin_is_not_claimed_detectable():
    # twenty cells of expected count 2 share one bin of mass 0.2: a law that moves all of it onto
    # one of them (TV 0.19) gives the same binned counts, so no TV below 0.19 may be promised
    law = np.concatenate([[0.3, 0.3, 0.2], np.full(20, 0.01)])
    samples, threshold = 200, 1e-3
    alternative = np.concatenate([[0.3, 0.3, 0.2, 0.2], np.zeros(19)])
    rng = np.random.default_rng(0)
    rejected = [goodness_of_fit(rng.multinomial(samples, alternative).astype(float), law)[0] <= threshold
                for _ in range(500)]
    assert np.mean(rejected) < 0.05  # the test does not see it
    assert detectable_tv(law, samples, threshold) >= 0.5 * np.abs(alternative - law).sum()


def test_inconclusive_exactly_when_the_detectable_tv_exceeds_the_stated_one():
    report = check_exactness("sd", draft_length=1, num_tokens=2, samples=400, seed=3)
    assert report.p_value > report.threshold and report.dof >= 1
    tv = report.detectable_tv
    below = check_exactness("sd", draft_length=1, num_tokens=2, samples=400, seed=3, detect_tv=0.99 * tv)
    above = check_exactness("sd", draft_length=1, num_tokens=2, samples=400, seed=3, detect_tv=1.01 * tv)
    assert below.detectable_tv == above.detectable_tv == tv and below.p_value == above.p_value == report.p_value
    assert below.status == INCONCLUSIVE and above.status == PASSED, (below, above)


def test_a_cell_of_expected_count_exactly_five_is_a_bin_of_its_own():
    # 100 samples: expected counts 45, 45, 5, 5 (Cochran's rule is >= 5): four bins, three degrees
    # of freedom; pooled as "rare", the last two would leave two bins
    law = np.array([0.45, 0.45, 0.05, 0.05])
    assert goodness_of_fit(np.array([45.0, 45.0, 5.0, 5.0]), law)[2] == 3


class ZerosOnly:
    """Commits token 0 at every call and accepts nothing: a law far from the target's, with known
    counters (every verify call a rejection, one token a call)."""

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        from draftverify.verify.base import VerifyResult

        return VerifyResult([0], 0, 0, None)


def test_the_report_counts_what_the_decoding_did():
    pair = random_pair(vocab_size=3, order=2, seed=1)
    report = check_exactness(ZerosOnly(), pair, draft_length=2, num_tokens=3, samples=300)
    assert report.status == FAILED
    # every sample is 000: the empirical law is a point mass, at TV 1 - T(000) from the target's
    assert report.tv == pytest.approx(1 - pair.target.law(3)[0, 0, 0])
    assert (report.acceptance_rate, report.mean_accepted, report.tokens_per_call) == (0.0, 0.0, 1.0)


def test_a_verify_call_that_commits_nothing_is_refused():
    class CommitsNothing:
        def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
            from draftverify.verify.base import VerifyResult

            return VerifyResult([], 0, 0, None)

    with pytest.raises(ValueError, match="committed no token"):
        check_exactness(CommitsNothing(), samples=2)

"""The checker itself: its goodness-of-fit test, its power against a biased decoder, and the
enumerator's exact laws on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify import get_verifier
from draftverify.testing import check_exactness, enumerate_outcomes, exact_output_law, goodness_of_fit, random_pair


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


def test_checker_reports_each_decoded_sequence():
    done = []
    report = check_exactness(get_verifier("sd"), samples=25, on_sample=lambda: done.append(1))
    assert len(done) == report.samples == 25

"""Measurement helpers: the acceptance rate identity and the n-gram held-out loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from draftverify.models.ngram import NGramDrafter
from draftverify.train.measure import acceptance, humaneval_prompts, ngram_heldout_loss
from tests.factories import random_distributions


def test_acceptance_is_one_minus_total_variation():
    target, draft = (torch.from_numpy(random_distributions(seed, 6, 11)) for seed in (0, 1))
    tv = 0.5 * (target - draft).abs().sum(-1)
    torch.testing.assert_close(acceptance(target, draft), 1 - tv)
    torch.testing.assert_close(acceptance(target, target), torch.ones(6, dtype=torch.float64))
    with pytest.raises(ValueError):
        acceptance(target, draft[:, :5])


def test_ngram_heldout_loss_scores_each_document_from_its_start():
    eos = 0
    drafter = NGramDrafter.train([[1, 2, 3, 0, 2, 3, 1, 0]], vocab_size=4, order=2)
    stream = np.array([1, 2, 0, 3, 3, 0])       # documents [1 2 0] and [3 3 0]
    expected = -sum(math.log(drafter.next_token_probs([context])[0, token].item())
                    for context, token in [([1], 2), ([2], 0), ([3], 3), ([3], 0)]) / 4
    assert ngram_heldout_loss(drafter, stream, eos, chunk=3) == pytest.approx(expected, rel=1e-6)


def test_humaneval_prompts_are_the_164_problems():
    prompts = humaneval_prompts()
    assert len(prompts) == 164 and prompts[0].startswith("from typing import List")
    assert humaneval_prompts(3) == prompts[:3]

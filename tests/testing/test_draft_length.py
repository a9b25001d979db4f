"""Choosing L from the past keeps the law; choosing it from the draft being verified does not.

Exact laws by enumeration on a known-law pair (every draft, every verifier draw, every L the policy
picks along the way), and the checker's Monte Carlo test with its power against the twin.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.engine.draft_length import AutoDraftLength, HeuristicDraftLength
from draftverify.testing import check_exactness, decode_known_law, exact_sequence_law, random_pair
from draftverify.verify import get_verifier
from tests.verify.broken_twins import PeekingLength

NUM_TOKENS = 3


def auto_policy(max_length: int = 3) -> AutoDraftLength:
    """Given costs, so L depends on the acceptance seen so far only (and varies over the first calls)."""
    return AutoDraftLength(1, max_length, prior_weight=0.5, draft_cost=0.2, target_costs=(1.0,) * max_length)


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=3, order=2, seed=5)


@pytest.mark.parametrize("method", ["sd", "bv", "gbv"])  # gbv: L never below its pending modification
@pytest.mark.parametrize("policy", [auto_policy(), HeuristicDraftLength(1, 3, 1)], ids=["auto", "heuristic"])
def test_policies_keep_the_law_exactly(pair, method, policy):
    law = exact_sequence_law(get_verifier(method), pair, draft_length=policy, num_tokens=NUM_TOKENS)
    assert np.abs(law - pair.target.law(NUM_TOKENS)).max() < 1e-12


def test_the_auto_length_varies_along_a_decoding(pair):
    """Otherwise the enumeration above would check a fixed L only."""
    lengths = []

    class Recording(AutoDraftLength):
        def choose(self, state):
            lengths.append(super().choose(state))
            return lengths[-1]

    policy = Recording(1, 3, prior_weight=0.5, draft_cost=0.2, target_costs=(1.0,) * 3)
    generator, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    for _ in range(30):
        decode_known_law(get_verifier("sd"), pair, 1, policy, 12, generator, rng)
    assert set(lengths) == {1, 2, 3}


def test_picking_the_length_from_the_draft_breaks_the_law(pair):
    law = exact_sequence_law(PeekingLength(), pair, draft_length=2, num_tokens=NUM_TOKENS)
    assert np.abs(law - pair.target.law(NUM_TOKENS)).max() > 1e-3
    assert not check_exactness(PeekingLength(), pair, draft_length=2, num_tokens=NUM_TOKENS, samples=6000).passed()


def test_the_checker_passes_auto(pair):
    report = check_exactness(get_verifier("sd"), pair, draft_length=auto_policy(), num_tokens=NUM_TOKENS, samples=3000)
    assert report.passed() and report.draft_length == 3

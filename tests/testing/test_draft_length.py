"""Choosing L from the past keeps the law; choosing it from the draft being verified does not.

Exact laws by enumeration on a known-law pair (every draft, every verifier draw, every L the policy
picks along the way), and the checker's Monte Carlo test with its power against the twin.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from draftverify.engine.draft_length import AutoDraftLength, HeuristicDraftLength
from draftverify.testing import check_exactness, decode_known_law, exact_sequence_law, random_pair
from draftverify.verify import get_verifier
from tests.verify.broken_twins import AcceptAll, PeekingLength

NUM_TOKENS = 3


def auto_policy(max_length: int = 3) -> AutoDraftLength:
    """Given costs, so L depends on the acceptance seen so far only (and varies over the first calls)."""
    return AutoDraftLength(1, max_length, prior_weight=0.5, draft_cost=0.2, target_costs=(1.0,) * (max_length + 1))


def sometimes_ar(max_length: int = 3) -> AutoDraftLength:
    """Given costs under which L = 0 (an ar step) wins while the acceptance seen is low."""
    return AutoDraftLength(0, max_length, prior_weight=0.5, draft_cost=0.7, target_costs=(1.0,) * (max_length + 1), probe=2)


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=3, order=2, seed=5)


@pytest.mark.parametrize("method", ["sd", "bv", "gbv"])  # gbv: L never below its pending modification
@pytest.mark.parametrize("policy", [auto_policy(), sometimes_ar(), HeuristicDraftLength(1, 3, 1)],
                         ids=["auto", "auto-with-ar-steps", "heuristic"])
def test_policies_keep_the_law_exactly(pair, method, policy):
    law = exact_sequence_law(get_verifier(method), pair, draft_length=policy, num_tokens=NUM_TOKENS)
    assert np.abs(law - pair.target.law(NUM_TOKENS)).max() < 1e-12


@pytest.mark.parametrize("make,expected", [(auto_policy, {1, 2, 3}), (sometimes_ar, {0, 1, 2, 3})])
def test_the_auto_length_varies_along_a_decoding(pair, make, expected):
    """Otherwise the enumeration above would check a fixed L only (or never an ar step)."""
    lengths = []

    class Recording(AutoDraftLength):
        def choose(self, state):
            lengths.append(super().choose(state))
            return lengths[-1]

    policy = Recording(**{f.name: getattr(make(), f.name) for f in dataclasses.fields(AutoDraftLength)})
    generator, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    for _ in range(30):
        decode_known_law(get_verifier("sd"), pair, 1, policy, 12, generator, rng)
    assert set(lengths) == expected


def test_picking_the_length_from_the_draft_breaks_the_law(pair):
    law = exact_sequence_law(PeekingLength(), pair, draft_length=2, num_tokens=NUM_TOKENS)
    assert np.abs(law - pair.target.law(NUM_TOKENS)).max() > 1e-3
    assert not check_exactness(PeekingLength(), pair, draft_length=2, num_tokens=NUM_TOKENS, samples=6000).passed()


@pytest.mark.parametrize("make", [auto_policy, sometimes_ar])
def test_the_checker_passes_auto(pair, make):
    report = check_exactness(get_verifier("sd"), pair, draft_length=make(), num_tokens=NUM_TOKENS, samples=3000)
    assert report.passed() and report.draft_length == 3


def test_a_policy_that_never_drafts_judges_nothing(pair):
    """L = 0 at every call decodes the target's own law: the verifier was never called, and the
    checker says inconclusive rather than passed (here even a verifier that accepts everything)."""
    never = AutoDraftLength(0, 2, draft_cost=10.0, target_costs=(1.0,) * 3)
    report = check_exactness(AcceptAll(), pair, draft_length=never, num_tokens=NUM_TOKENS, samples=2000)
    assert report.status == "inconclusive" and "never called" in report.reason and report.tokens_per_call == 1.0
    assert not check_exactness(AcceptAll(), pair, draft_length=sometimes_ar(), num_tokens=NUM_TOKENS, samples=2000).passed()


def test_an_ar_step_that_ignored_the_target_would_be_caught(pair, monkeypatch):
    """The L = 0 path is under test too: a twin drawing its ar steps from the draft fails."""
    from draftverify.testing import checker

    real = checker._call

    def from_the_draft(verifier, pair, prefix, length, state, source, drafts):
        if length:
            return real(verifier, pair, prefix, length, state, source, drafts)
        row = pair.draft_conditional(prefix, [])
        return (checker.categorical(torch.from_numpy(row), source),), state, 0

    monkeypatch.setattr(checker, "_call", from_the_draft)
    law = exact_sequence_law(get_verifier("sd"), pair, draft_length=sometimes_ar(), num_tokens=NUM_TOKENS)
    assert np.abs(law - pair.target.law(NUM_TOKENS)).max() > 1e-3


@dataclasses.dataclass(frozen=True)
class Alternating:
    """L = 3, 1, 3, 1, ... from the call count alone: a shortening policy, legal for sd and bv."""

    max_length: int = 3

    def initial(self) -> int:
        return 0

    def choose(self, state: int) -> int:
        return 3 if state % 2 == 0 else 1

    def update(self, state: int, draft_length: int, accepted: int, seconds: None) -> int:
        return state + 1


def test_gbv_keeps_its_pending_modification_under_a_shortening_policy(pair):
    """gbv's modification after an L = 3 call can span 2 positions; the loop drafts at least that
    many (ModificationStack.min_draft_length) even where the policy asks for 1, and the law holds."""
    law = exact_sequence_law(get_verifier("gbv"), pair, draft_length=Alternating(), num_tokens=NUM_TOKENS + 1)
    assert np.abs(law - pair.target.law(NUM_TOKENS + 1)).max() < 1e-12
    assert check_exactness("gbv", pair, draft_length=Alternating(), num_tokens=NUM_TOKENS, samples=3000).passed()


def test_gbv_refuses_a_call_shorter_than_its_pending_modification(pair):
    """What the minimum above guards: called at L = 1 with a 2-position modification pending, gbv
    raises rather than verify part of it."""
    from draftverify.testing import draw_drafts
    from draftverify.verify.modifications import ModificationStack

    verifier, generator, rng = get_verifier("gbv"), torch.Generator().manual_seed(0), np.random.default_rng(0)
    for _ in range(200):
        result = verifier.verify(*draw_drafts(pair, [], 1, 3, rng), generator=generator)
        if ModificationStack.min_draft_length(result.state) >= 2:
            break
    else:
        pytest.fail("no call left a modification of 2 positions pending")
    prefix = list(result.tokens)
    with pytest.raises(ValueError, match="keep the draft length"):
        verifier.verify(*draw_drafts(pair, prefix, 1, 1, rng), generator=generator, state=result.state)

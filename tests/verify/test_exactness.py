"""Exactness of the single-draft verifiers through the checker (Monte Carlo across calls) and by
exact enumeration of the whole decoding process; their broken twins must fail both."""

from __future__ import annotations

import numpy as np
import pytest

from draftverify import get_verifier
from draftverify.verify import verifiers
from draftverify.testing import check_exactness, exact_sequence_law, random_pair

from .broken_twins import BVStoppingAtFirstRejection, GBVWithoutModification, ResampleFromTarget

STRICT = 1e-3  # a correct verifier passes above this p-value; seeds are fixed, so runs are deterministic
BROKEN = 1e-6  # a broken twin must fall below this one

CASES = [("sd", {}), ("bv", {}), ("gbv", {}), ("submaximal", {"fraction": 0.3}), ("submaximal", {"fraction": 0.8})]


@pytest.mark.parametrize("name,options", CASES)
@pytest.mark.parametrize("draft_length", [1, 2, 3])
def test_checker_accepts_exact_verifiers(name, options, draft_length):
    report = check_exactness(get_verifier(name, **options), draft_length=draft_length, num_tokens=4, samples=6000, seed=11,
                             threshold=STRICT)
    assert report.passed(), report


@pytest.mark.parametrize(
    "twin,draft_length", [(ResampleFromTarget(), 2), (GBVWithoutModification(), 3), (BVStoppingAtFirstRejection(), 3)]
)
def test_checker_rejects_broken_twins(twin, draft_length):
    report = check_exactness(twin, draft_length=draft_length, num_tokens=4, samples=6000, seed=11)
    assert report.p_value < BROKEN, report


PAIR = random_pair(vocab_size=3, order=2, seed=5)
TARGET_LAW = PAIR.target.law(3)


@pytest.mark.parametrize("name,options", CASES[:3] + [("submaximal", {"fraction": 0.5})])
@pytest.mark.parametrize("draft_length", [1, 2, 3])
def test_enumerated_law_equals_target(name, options, draft_length):
    if name == "submaximal" and draft_length == 3:
        pytest.skip("same algebra as L = 2, at eight times the enumeration cost")
    law = exact_sequence_law(get_verifier(name, **options), PAIR, draft_length=draft_length, num_tokens=3)
    np.testing.assert_allclose(law, TARGET_LAW, atol=1e-9, rtol=0)


def test_gbv_modification_stack_across_three_calls():
    # L = 3, tau = 0 leaves a modification of 2 positions; a next call committing 1 token must carry it
    pair = random_pair(vocab_size=2, order=2, seed=3)
    law = exact_sequence_law(get_verifier("gbv"), pair, draft_length=3, num_tokens=5)
    np.testing.assert_allclose(law, pair.target.law(5), atol=1e-9, rtol=0)


@pytest.mark.parametrize(
    "twin,draft_length", [(ResampleFromTarget(), 1), (GBVWithoutModification(), 2), (BVStoppingAtFirstRejection(), 2)]
)
def test_enumeration_exposes_broken_twins(twin, draft_length):
    law = exact_sequence_law(twin, PAIR, draft_length=draft_length, num_tokens=3)
    assert np.abs(law - TARGET_LAW).sum() > 1e-3


# A draft whose law depends on its depth within a call (a feature draft, EAGLE-style): the first
# drafted position of a call has one table, the later ones another
DEPTH_PAIR = random_pair(vocab_size=3, order=2, seed=5, depth_dependent=True)
DEPTH_CASES = [("sd", {}, 1), ("bv", {}, 1), ("submaximal", {"fraction": 0.5}, 1), ("kseq", {}, 2),
               ("multidraft-bv", {}, 2), ("ot", {"solver": "maxflow-cs"}, 2)]


def test_the_depth_cases_cover_every_exact_verifier_that_may_take_such_a_draft():
    # greedy keeps the target's argmax (temperature 0): it has no law to enumerate here
    stateless = {info.name for info in verifiers() if not info.prefix_draft_only and info.name != "greedy"
                 and (info.exact or info.name == "ot")}
    assert stateless == {name for name, _, _ in DEPTH_CASES}


@pytest.mark.parametrize("name,options,num_drafts", DEPTH_CASES)
def test_verifiers_without_state_stay_exact_with_a_depth_dependent_draft(name, options, num_drafts):
    law = exact_sequence_law(get_verifier(name, **options), DEPTH_PAIR, num_drafts=num_drafts, draft_length=2,
                             num_tokens=3)
    np.testing.assert_allclose(law, DEPTH_PAIR.target.law(3), atol=1e-9, rtol=0)


@pytest.mark.parametrize("draft_length", [2, 3])
def test_gbv_is_not_exact_with_a_depth_dependent_draft(draft_length):
    """Why gbv is ``prefix_draft_only`` and the engine refuses it with a feature draft: its target
    modification reads the next call's draft rows as the modifying call's. With the first table at
    every depth it is exact again."""
    verifier = get_verifier("gbv")
    assert verifier.prefix_draft_only
    law = exact_sequence_law(verifier, DEPTH_PAIR, draft_length=draft_length, num_tokens=3)
    assert 0.5 * np.abs(law - DEPTH_PAIR.target.law(3)).sum() > 0.05
    same = random_pair(vocab_size=3, order=2, seed=5)  # the first draft table at every depth
    law = exact_sequence_law(verifier, same, draft_length=draft_length, num_tokens=3)
    np.testing.assert_allclose(law, same.target.law(3), atol=1e-9, rtol=0)

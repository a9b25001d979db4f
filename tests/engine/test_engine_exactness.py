"""The engine leaves the law of generated sequences equal to the target's (toy Markov backend).

Many rows of one batch decode the same prompt (ragged acceptance, per-row crop); the law of the
first N generated tokens is tested by chi-square against the target's, enumerated exactly. Broken
twins (a verifier that accepts everything; gbv with its state dropped) must fail the same test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.engine import generate_batch
from draftverify.probs import warp
from draftverify.testing import goodness_of_fit, random_pair
from tests.factories import toy_models
from tests.verify.broken_twins import AcceptAll, StatelessGBV

VOCAB, NUM_TOKENS, SAMPLES = 3, 4, 2500
THRESHOLD = 1e-3


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=VOCAB, order=2, seed=3)


def conditional_law(markov, prompt: list[int], num_tokens: int, **warping) -> np.ndarray:
    """Exact law [V ** n] of the n tokens after ``prompt``, from the model's conditionals
    (warped by ``draftverify.probs.warp(log conditional, **warping)`` when warping is given)."""
    law = np.ones(1)
    contexts = [list(prompt)]
    for _ in range(num_tokens):
        rows = np.stack([markov.conditional(c) for c in contexts])  # [V ** i, V]
        if warping:
            with np.errstate(divide="ignore"):
                rows = warp(torch.from_numpy(np.log(rows)), **warping).numpy()
        law = (law[:, None] * rows).ravel()
        contexts = [c + [t] for c in contexts for t in range(VOCAB)]
    return law


def sequence_counts(results, num_tokens: int) -> np.ndarray:
    weights = VOCAB ** np.arange(num_tokens - 1, -1, -1)
    counts = np.zeros(VOCAB**num_tokens)
    for result in results:
        assert len(result.tokens) == num_tokens and result.finish_reason == "length"
        counts[int(np.dot(result.tokens, weights))] += 1
    return counts


def engine_p_value(pair, method, *, prompt=(1,), samples=SAMPLES, num_drafts=None, draft_length=2, seed=0) -> float:
    target, draft = toy_models(pair)
    results = generate_batch(
        target, draft, [list(prompt)] * samples, method,
        num_drafts=num_drafts, draft_length=draft_length, max_new_tokens=NUM_TOKENS, seed=seed,
    )
    law = conditional_law(pair.target, list(prompt), NUM_TOKENS)
    return goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0]


# single-draft families plus one multi-draft verifier (each family's own tests check every verifier
# in isolation; here the loop around them is under test)
METHODS = [("sd", None), ("bv", None), ("gbv", None), ("submaximal", None), ("kseq", 2)]
SLOW_METHODS = {"kseq": 1200}  # samples for verifiers whose calls are slow


@pytest.mark.parametrize("method,num_drafts", METHODS)
def test_engine_output_law_equals_target(pair, method, num_drafts):
    samples = SLOW_METHODS.get(method, SAMPLES)
    assert engine_p_value(pair, method, num_drafts=num_drafts, samples=samples) > THRESHOLD


def test_ar_output_law_equals_target(pair):
    assert engine_p_value(pair, "ar", draft_length=None) > THRESHOLD


def test_warped_target_law_with_temperature_and_top_k(pair):
    """Draft and target are warped alike, so the output follows the warped target."""
    warping = dict(temperature=0.6, top_k=2)
    results = generate_batch(*toy_models(pair), [[1]] * SAMPLES, "sd",
                             draft_length=2, max_new_tokens=NUM_TOKENS, seed=2, **warping)
    law = conditional_law(pair.target, [1], NUM_TOKENS, **warping)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), law)[0] > THRESHOLD
    unwarped = conditional_law(pair.target, [1], NUM_TOKENS)
    assert goodness_of_fit(sequence_counts(results, NUM_TOKENS), unwarped)[0] < THRESHOLD  # the test can tell


def test_ragged_prompts_each_follow_their_own_law(pair):
    prompts = [[1], [2, 0, 1]] * (SAMPLES // 2)
    results = generate_batch(*toy_models(pair), prompts, "bv",
                             draft_length=3, max_new_tokens=NUM_TOKENS, seed=1)
    for start, prompt in enumerate(prompts[:2]):
        law = conditional_law(pair.target, prompt, NUM_TOKENS)
        assert goodness_of_fit(sequence_counts(results[start::2], NUM_TOKENS), law)[0] > THRESHOLD


@pytest.mark.parametrize("broken", [AcceptAll(), StatelessGBV()], ids=lambda v: v.name)
def test_broken_twins_fail_the_same_test(pair, broken):
    assert engine_p_value(pair, broken) < THRESHOLD


def test_toy_decoding_keeps_the_cache_invariant(pair):
    from draftverify.engine import DecodeConfig, Decoder

    prompts = [[1], [2, 0], [0, 0, 1, 2]]
    for method, k in [("sd", None), ("gbv", None), ("ar", None)] + [(m, 2) for m, k in METHODS if k]:
        config = DecodeConfig(method, num_drafts=k, draft_length=None if method == "ar" else 3, max_new_tokens=9)
        decoder = Decoder(*toy_models(pair), prompts, config)
        while not decoder.done:
            decoder.step()
            decoder.check_caches()
        assert all(len(decoder.generated(i)) == 9 for i in range(len(prompts)))


def test_seeded_toy_runs_are_identical(pair):
    runs = [
        [r.tokens for r in generate_batch(*toy_models(pair), [[1]] * 20, "bv",
                                                    max_new_tokens=8, seed=s)]
        for s in (5, 5, 6)
    ]
    assert runs[0] == runs[1] and runs[0] != runs[2]

"""The end of the context: checked up front, drafts shortened near it, a partial result at it."""

from __future__ import annotations

import pytest

from draftverify.engine import DecodeConfig, Decoder, generate
from tests.factories import tiny_pair

VOCAB, CONTEXT = 32, 24


@pytest.fixture(scope="module")
def models():
    return tiny_pair(VOCAB, target_width=16, target_layers=1, max_positions=CONTEXT)


def test_prompt_plus_max_new_tokens_beyond_the_context_is_refused_up_front(models):
    target, draft = models
    with pytest.raises(ValueError, match=rf"max_new_tokens: a prompt of 20 tokens \+ max_new_tokens = 5 exceeds "
                                         rf"the model's context of {CONTEXT} tokens; give at most 4"):
        generate(target, draft, [1] * 20, "sd", max_new_tokens=5)


@pytest.mark.parametrize("method", ["ar", "sd", "bv", "kseq(K=2)", "gbv"])
def test_drafts_are_shortened_near_the_end_of_the_context(models, method):
    # today's failure: a 4-token draft after a prompt that leaves room for fewer positions
    target, draft = models
    for seed in range(5):
        result = generate(target, draft, [1] * (CONTEXT - 4), method, draft_length=None if method == "ar" else 4,
                          max_new_tokens=4, seed=seed, ignore_eos=True)
        assert len(result.tokens) == 4 and result.finish_reason == "length"
        length = CONTEXT - 4
        for step in result.steps:  # each step's L fits the room left: L <= context - committed
            assert step.drafted <= result.num_drafts * (CONTEXT - length)
            length += step.committed


def test_a_full_context_ends_with_reason_context_and_keeps_the_tokens(models):
    target, draft = models
    decoder = Decoder(target, draft, [[1] * 6, [2] * 12], DecodeConfig("sd", draft_length=3, max_new_tokens=10, seed=0,
                                                                       ignore_eos=True))
    decoder.context = 14  # reached anyway (the check up front passed a longer context)
    reasons = {}
    while not decoder.done:
        before = {p: len(decoder.committed[p]) for p in decoder.active}
        for row in decoder.step():
            if before[row.index] >= 14:  # full: ends at once, committing nothing more
                assert row.tokens == [] and row.finish_reason == "context", (before, row)
            if row.finish_reason is not None:
                reasons[row.index] = row.finish_reason
    assert reasons == {0: "context", 1: "context"}
    # full at 14 tokens; a last step's bonus token may make 15 (the last token is never fed to a model)
    assert all(14 <= len(decoder.committed[i]) <= 15 for i in range(2))
    assert len(decoder.generated(0)) >= 8 and len(decoder.generated(1)) >= 2

"""The engine on tiny random transformers models: greedy equals the target's own greedy
``generate``, seeded runs repeat, caches always match the committed tokens, stopping, bad input."""

from __future__ import annotations

import pytest
import torch

import draftverify
import draftverify.models.base
from draftverify.engine import DecodeConfig, Decoder, generate, generate_batch
from draftverify.models.hf import TransformersModel
from draftverify.models.toy import char_tokenizer, tiny_causal_lm
from tests.factories import tiny_lms, tiny_pair

VOCAB = 48


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def models(request):
    target, draft = tiny_lms(VOCAB, arch=request.param)
    return target, TransformersModel(target), TransformersModel(draft)


def target_greedy(raw, prompt: list[int], new: int) -> list[int]:
    out = raw.generate(torch.tensor([prompt]), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("draft_length", [1, 5])
def test_greedy_at_temperature_zero_is_the_target_greedy_decoding(models, draft_length):
    raw, target, draft = models
    prompt = [3, 1, 4, 1, 5]
    result = generate(target, draft, prompt, "greedy", draft_length=draft_length, temperature=0, max_new_tokens=24)
    assert result.tokens == target_greedy(raw, prompt, 24)
    # one target call per step; every step but the last commits its accepted tokens plus one
    assert result.target_calls == len(result.steps)
    assert all(s.committed == s.accepted + 1 for s in result.steps[:-1])
    assert sum(s.committed for s in result.steps) == 24


@pytest.mark.parametrize("draft_length", [1, 5])
def test_greedy_with_the_target_as_its_own_draft_accepts_every_token(models, draft_length):
    raw, target, _ = models
    result = generate(target, target, [3, 1, 4], "greedy", draft_length=draft_length, temperature=0, max_new_tokens=24)
    assert result.tokens == target_greedy(raw, [3, 1, 4], 24)
    assert result.target_calls == -(-24 // (draft_length + 1))  # L accepted + 1 bonus token per call


def test_greedy_batch_of_ragged_prompts(models):
    raw, target, draft = models
    prompts = [[3, 1, 4, 1, 5], [9], [2, 7, 1, 8, 2, 8, 1, 8]]
    results = generate_batch(target, draft, prompts, "greedy", draft_length=3, temperature=0, max_new_tokens=16)
    for prompt, result in zip(prompts, results):
        assert result.tokens == target_greedy(raw, prompt, 16)


def test_ar_at_temperature_zero_is_the_target_greedy_decoding(models):
    raw, target, _ = models
    assert generate(target, None, [5, 6], "ar", temperature=0, max_new_tokens=12).tokens == target_greedy(raw, [5, 6], 12)


def test_seeded_runs_are_identical(models):
    _, target, draft = models
    runs = [generate(target, draft, [1, 2, 3], "bv", draft_length=4, max_new_tokens=20, seed=s).tokens for s in (7, 7, 8)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def cache_methods():
    cases = [("ar", None), ("sd", None), ("bv", None), ("gbv", None)]
    multi = [i.name for i in draftverify.verifiers() if i.multi_draft and i.exact]
    return cases + [(multi[0], 3)] if multi else cases


@pytest.mark.parametrize("method,num_drafts", cache_methods())
def test_cache_lengths_match_committed_lengths_at_every_step(models, method, num_drafts):
    _, target, draft = models
    config = DecodeConfig(method, num_drafts=num_drafts, draft_length=None if method == "ar" else 3, max_new_tokens=14)
    decoder = Decoder(target, draft, [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10]], config)
    while not decoder.done:
        decoder.step()
        decoder.check_caches()
    assert [len(decoder.generated(i)) for i in range(3)] == [14, 14, 14]


def test_stats_add_up(models):
    _, target, draft = models
    result = generate(target, draft, [1, 2], "sd", draft_length=4, max_new_tokens=30)
    assert len(result.tokens) == 30 == sum(s.committed for s in result.steps)
    assert result.target_calls == len(result.steps) and result.draft_calls == 4 * len(result.steps)
    assert all(s.drafted == 4 and s.verified == 5 and 0 <= s.accepted <= 4 for s in result.steps)
    # pooled over verified tokens: each step that kept fewer than L = 4 tokens made one rejected test
    rejections = sum(s.accepted < 4 for s in result.steps)
    assert result.acceptance_rate == pytest.approx(result.accepted / (result.accepted + rejections))
    assert result.tokens_per_target_call == pytest.approx(30 / len(result.steps))


def test_eos_and_stop_strings_end_a_row():
    tokenizer = char_tokenizer("ab")  # <eos> = 0, <unk> = 1, a = 2, b = 3
    target, draft = tiny_pair(len(tokenizer), seeds=(2, 3), tokenizer=tokenizer)
    results = generate_batch(target, draft, [[2, 3]] * 6, "sd", max_new_tokens=40, seed=0)
    for r in results:
        assert r.finish_reason in ("eos", "length")
        assert (r.tokens[-1] == 0) == (r.finish_reason == "eos") and 0 not in r.tokens[:-1]
    stopped = generate(target, draft, [2, 3], "bv", max_new_tokens=40, stop="ba", tokenizer=tokenizer,
                       ignore_eos=True, seed=1)
    assert stopped.finish_reason == "stop" and stopped.text.endswith("ba") and stopped.text.count("ba") == 1


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(method="nope"), "unknown verifier"),
        (dict(method="sd", options={"lam": 0.5}), "does not take"),
        (dict(method="sd", num_drafts=3), "takes one draft"),
        (dict(method="ar", draft_length=4), "takes no drafts"),
        (dict(method="sd", temperature=-1.0), "temperature"),
        (dict(method="sd", max_new_tokens=0), "max_new_tokens"),
        (dict(method="sd", prompt=[]), "empty"),
        (dict(method="sd", prompt=[VOCAB]), "outside"),
        (dict(method="sd", stop="x"), "tokenizer"),
        (dict(method="sd", draft=TransformersModel(tiny_causal_lm(VOCAB + 1))), "vocabulary"),
    ],
)
def test_bad_input_is_a_clear_value_error(models, kwargs, message):
    _, target, draft = models
    kwargs = dict(kwargs)
    prompt, draft = kwargs.pop("prompt", [1]), kwargs.pop("draft", draft)
    with pytest.raises(ValueError, match=message):
        generate(target, draft, prompt, **kwargs)


class ReplicatedTarget(TransformersModel):
    """The same model scoring K drafts by replicating rows (the backend-independent default)."""

    score_drafts = draftverify.models.base.LanguageModel.score_drafts
    keep_draft = draftverify.models.base.LanguageModel.keep_draft


def test_tree_scoring_decodes_like_replicated_rows(models):
    multi = [i.name for i in draftverify.verifiers() if i.multi_draft and i.exact]
    assert multi, "no exact multi-draft verifier registered"
    raw, target, draft = models
    prompts = [[1, 2, 3], [4, 5]]
    runs = [
        [r.tokens for r in generate_batch(model, draft, prompts, multi[0], num_drafts=3, draft_length=3,
                                          max_new_tokens=15, seed=4)]
        for model in (target, ReplicatedTarget(raw))
    ]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("method", ["sd", "bv", "greedy", "submaximal(fraction=0.3)"])
def test_batched_verification_commits_what_the_per_row_verifiers_commit(models, method, monkeypatch):
    """With one draft and several prompts the verifier checks every row in one batched call; the
    per-row verifiers, forced here, must commit the same tokens from the same seed."""
    from draftverify.verify import Verifier

    _, target, draft = models
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    temperature = 0 if method == "greedy" else 1.0
    kernel_calls = []
    batch_call = Verifier.verify_batch
    monkeypatch.setattr(Verifier, "verify_batch", lambda self, *a, **k: kernel_calls.append(1) or batch_call(self, *a, **k))

    def run() -> list[list[int]]:
        batch = Decoder(target, draft, prompts, DecodeConfig(method, draft_length=3, temperature=temperature,
                                                             max_new_tokens=20, seed=7, ignore_eos=True))
        while not batch.done:
            batch.step()
        return [batch.generated(i) for i in range(len(prompts))]

    batched = run()
    used = len(kernel_calls)
    monkeypatch.setattr(Verifier, "batched", False)
    per_row = run()
    assert used > 0 and len(kernel_calls) == used
    assert batched == per_row

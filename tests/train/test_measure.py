"""Measurement helpers: the acceptance rate identity, the n-gram held-out loss, the target's
sampled continuations (their law and the eos stop), the acceptance measured over prompts and the
latency, each by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from draftverify.models.ngram import NGramDrafter
from draftverify.models.toy import char_tokenizer
from draftverify.testing import goodness_of_fit
from draftverify.train import measure
from draftverify.train.measure import (
    acceptance, humaneval_prompts, mean_and_stderr, measure_acceptance, measure_latency, ngram_heldout_loss,
    sample_continuation, teacher_forced_probs,
)
from tests.factories import random_distributions, tiny_lms


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


@pytest.fixture(scope="module")
def lms():
    return tiny_lms(6, seeds=(3, 4), dtype=torch.float32)


def test_a_continuation_follows_the_target_law_and_stops_after_eos(lms):
    """Two sampled tokens after a prompt, 1500 times: their law is the model's (chi-square on all
    36 pairs, from one uncached forward), and each returned row is the law its token was drawn from."""
    model, _ = lms
    prompt = [1, 2, 3]
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].double(), -1)  # [V]
        second = torch.softmax(model(torch.tensor([prompt + [t] for t in range(6)])).logits[:, -1].double(), -1)
    law = (first[:, None] * second).flatten().numpy()  # [V * V]
    generator, counts = torch.Generator().manual_seed(0), np.zeros(36)
    for _ in range(1500):
        tokens, probs = sample_continuation(model, prompt, 2, eos_id=-1, generator=generator)
        counts[tokens[0] * 6 + tokens[1]] += 1
    torch.testing.assert_close(probs, teacher_forced_probs(model, prompt, tokens))
    assert goodness_of_fit(counts, law)[0] > 1e-3
    for _ in range(20):
        tokens, probs = sample_continuation(model, prompt, 8, eos_id=4, generator=generator)
        assert 4 not in tokens[:-1] and (tokens[-1] == 4 or len(tokens) == 8) and len(probs) == len(tokens)
    assert any(len(sample_continuation(model, prompt, 8, 4, generator)[0]) < 8 for _ in range(20))


def test_teacher_forced_rows_are_the_rows_after_each_token(lms):
    model, _ = lms
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 5, 0]])).logits[0]
    expected = torch.softmax(logits[2:4].double(), -1)  # the laws of tokens 5 and 0, read after 3 and 5
    torch.testing.assert_close(teacher_forced_probs(model, [1, 2, 3], [5, 0]), expected)


def test_mean_and_stderr_by_hand():
    assert mean_and_stderr([1.0, 2.0, 3.0, 4.0]) == pytest.approx(
        {"mean": 2.5, "positions": 4, "stderr": math.sqrt(5 / 3) / 2})
    assert mean_and_stderr([0.5]) == {"mean": 0.5, "positions": 1, "stderr": 0.0}


def test_measure_acceptance_by_hand(lms):
    """Each prompt (the long one keeping its last tokens) continued by the target from the seeded
    generator; every position's 1 - TV against the draft's and the n-gram's rows, pooled."""
    target, draft = lms
    tokenizer = char_tokenizer("abcd")  # ids 0..5: <eos>, <unk>, a, b, c, d
    # bigrams seen twice and thrice: a discount below 1, so the rows differ by context
    ngram = NGramDrafter.train([[2, 3, 4, 2, 3, 4, 2, 3, 5, 0, 3, 3, 2]], vocab_size=6, order=2)
    prompts, num_tokens, context = ["ab", "dcbadcba"], 4, 9  # the second keeps its last 5 tokens
    result = measure_acceptance(target, {"small": draft}, ngram, tokenizer, prompts, num_tokens, context, seed=7)
    generator = torch.Generator().manual_seed(7)
    small, grams = [], []
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-(context - num_tokens):]
        tokens, target_rows = sample_continuation(target, ids, num_tokens, 0, generator)
        small += (1 - 0.5 * (target_rows - teacher_forced_probs(draft, ids, tokens)).abs().sum(-1)).tolist()
        rows = ngram.next_token_probs([(ids + tokens)[: len(ids) + i] for i in range(len(tokens))]).double()
        grams += (1 - 0.5 * (target_rows - rows).abs().sum(-1)).tolist()
    assert result["small"] == pytest.approx(mean_and_stderr(small))
    assert result["ngram"] == pytest.approx(mean_and_stderr(grams))
    assert (result["prompts"], result["truncated_prompts"]) == (2, 1)


class Clocked:
    """A model whose calls take ``seconds[round]`` each on the fake clock, a round being a prefill
    and ``steps`` one-token calls; it returns a cache to pass on."""

    def __init__(self, clock: list[float], seconds: tuple[float, ...], steps: int):
        self.clock, self.seconds, self.steps, self.calls = clock, seconds, steps, []

    def __call__(self, input_ids, cache=None, use_cache=True):
        self.clock[0] += self.seconds[len(self.calls) // (self.steps + 1)]
        self.calls.append((input_ids.shape[1], cache))
        return type("Out", (), {"cache": len(self.calls)})()


def test_latency_is_the_median_per_token_step_after_the_prefill(monkeypatch):
    """On a fake clock whose third round is slow: the prefill's time is not counted, each step is
    one token fed with the previous call's cache, the n-gram's is one context per call; the median
    round's milliseconds per token."""
    clock, prefix, steps = [0.0], 32, 16  # min(128, 64 // 2), min(32, 64 // 4)
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    slow, fast = Clocked(clock, (0.004, 0.005, 0.04), steps), Clocked(clock, (0.001, 0.001, 0.01), steps)
    grams = []

    def next_token_probs(rows):
        clock[0] += (0.0005, 0.0005, 0.005)[len(grams) // steps] * len(rows)
        grams.append(rows)

    ngram = type("Grams", (), {"vocab_size": 6, "next_token_probs": staticmethod(next_token_probs)})()
    latency = measure_latency({"slow": slow, "fast": fast}, ngram, context=64, rounds=3)
    assert latency == pytest.approx({"slow": 5.0, "fast": 1.0, "ngram": 0.5})
    assert slow.calls[0][0] == prefix and all(width == 1 for width, _ in slow.calls[1 : steps + 1])
    assert [cache for _, cache in slow.calls[1 : steps + 1]] == list(range(1, steps + 1))
    assert len(slow.calls) == 3 * (steps + 1) and len(grams) == 3 * steps

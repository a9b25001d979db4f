"""Decoding on the compiled panel kernel: sd keeps the law of a float32 transformers target that
runs on it (chi-square against the law enumerated with the same model; the draft's law must fail
the same test), and on the embedded float32 pair a fixed seed decodes the same tokens as torch's
eager kernels.

They are the same wherever the two kernels' logits lead to the same decisions. The logits are not
equal to the bit (the kernels sum each product in a different order; they differ by about 1e-6
relative), so a step may differ where a uniform draw falls within that difference of a boundary of
the cumulative distribution, or where greedy decoding meets a near tie; neither happens in these
runs, and each kernel alone is deterministic (same seed, same tokens)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from draftverify.engine import generate, generate_batch
from draftverify.models.hf import TransformersModel
from draftverify.models.pair import load_pair
from draftverify.models.panel_mm import PanelLinear, kernel
from draftverify.testing import goodness_of_fit
from tests.factories import tiny_lms

VOCAB, NUM_TOKENS, SAMPLES, THRESHOLD = 4, 3, 2500, 1e-3

pytestmark = pytest.mark.skipif(not kernel().compiled, reason=f"panel kernel unavailable: {kernel().reason}")


def sequence_law(model: TransformersModel, prompt: list[int]) -> np.ndarray:
    """Exact law [V ** n] of the next n tokens, from the model's own conditionals (one call per context)."""
    law = np.ones(1)
    for n in range(NUM_TOKENS):
        rows = []
        for tail in itertools.product(range(VOCAB), repeat=n):
            logits = model.forward(model.new_cache(1), torch.tensor([prompt + list(tail)]), None, 1)[0, -1]  # [V]
            rows.append(torch.softmax(logits.double(), -1).numpy())
        law = (law[:, None] * np.stack(rows)).ravel()  # [V ** (n + 1)]
    return law


def test_sd_on_the_panel_kernel_keeps_the_law_of_the_target_it_runs():
    raw, raw_draft = tiny_lms(VOCAB, arch="llama", dtype=torch.float32)
    with torch.no_grad():
        raw.lm_head.weight.mul_(8)  # a peaked target, far from the near-uniform draft
    target, draft = TransformersModel(raw), TransformersModel(raw_draft)
    assert isinstance(target._lean.head, PanelLinear)
    prompt = [1, 2]
    results = generate_batch(target, draft, [prompt] * SAMPLES, "sd", draft_length=2, max_new_tokens=NUM_TOKENS, seed=0)
    counts = np.zeros(VOCAB**NUM_TOKENS)
    for result in results:
        counts[int(np.dot(result.tokens, VOCAB ** np.arange(NUM_TOKENS - 1, -1, -1)))] += 1
    assert goodness_of_fit(counts, sequence_law(target, prompt))[0] > THRESHOLD
    assert goodness_of_fit(counts, sequence_law(draft, prompt))[0] < THRESHOLD  # the test can tell the laws apart


@pytest.mark.parametrize("method,temperature", [("greedy", 0.0), ("ar", 1.0), ("sd", 1.0), ("bv", 1.0)])
def test_a_seeded_run_decodes_the_same_tokens_on_both_kernels(method, temperature):
    pair = load_pair("tiny")  # the embedded tiny pair: the seeded tokens checked here agree on both kernels
    prompt = pair.tokenizer.encode("def fibonacci(n):")
    runs = {}
    for name in ("eager", "panel", "panel again"):
        option = name.split()[0]
        target = TransformersModel(pair.target.model, pair.tokenizer, kernel=option)
        draft = TransformersModel(pair.draft.model, kernel=option)
        drafting = (None, {}) if method == "ar" else (draft, {"draft_length": 4})  # ar takes no draft options
        runs[name] = generate(target, drafting[0], prompt, method, temperature=temperature, max_new_tokens=40,
                              seed=3, ignore_eos=True, **drafting[1]).tokens
    assert runs["panel"] == runs["panel again"] == runs["eager"]

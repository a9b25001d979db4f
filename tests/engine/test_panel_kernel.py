"""Decoding on the compiled panel kernel against torch's eager kernels, on the embedded float32
pair: for a fixed seed the tokens are the same.

They are the same wherever the two kernels' logits lead to the same decisions. The logits are not
equal to the bit (the kernels sum each product in a different order; they differ by about 1e-6
relative), so a step may differ where a uniform draw falls within that difference of a boundary of
the cumulative distribution, or where greedy decoding meets a near tie; neither happens in these
runs, and each kernel alone is deterministic (same seed, same tokens)."""

from __future__ import annotations

import pytest

from draftverify.engine import generate
from draftverify.models.hf import TransformersModel
from draftverify.models.pair import load_pair
from draftverify.models.panel_mm import kernel


@pytest.mark.skipif(not kernel().compiled, reason=f"panel kernel unavailable: {kernel().reason}")
@pytest.mark.parametrize("method,temperature", [("greedy", 0.0), ("ar", 1.0), ("sd", 1.0), ("bv", 1.0)])
def test_a_seeded_run_decodes_the_same_tokens_on_both_kernels(method, temperature):
    pair = load_pair()
    prompt = pair.tokenizer.encode("def fibonacci(n):")
    runs = {}
    for name in ("eager", "panel", "panel again"):
        option = name.split()[0]
        target = TransformersModel(pair.target.model, pair.tokenizer, kernel=option)
        draft = TransformersModel(pair.draft.model, kernel=option)
        runs[name] = generate(target, None if method == "ar" else draft, prompt, method, draft_length=4,
                              temperature=temperature, max_new_tokens=40, seed=3, ignore_eos=True).tokens
    assert runs["panel"] == runs["panel again"] == runs["eager"]

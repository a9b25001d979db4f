"""The compiled decoder-layer loop (``csrc/llama_layers.cpp``) against the Python loop of
:func:`draftverify.models.llama.llama_layers`: the same operations in the same order, so the same
bits, for every product kind (float32 panels, int8 panels, GGUF blocks), a prompt under the causal
mask, single tokens, a batch with holes, and a tree of drafts; it writes the static cache as the
Python loop does."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from draftverify.engine import generate
from draftverify.models.hf import TransformersModel
from draftverify.models.panel_mm import kernel
from draftverify.models.toy import tiny_causal_lm
from tests.factories import block_llama

pytestmark = pytest.mark.skipif(not kernel().compiled, reason=f"no compiled kernel here: {kernel().reason}")
FORMATS = ["float32", "int8", pytest.param("gguf", marks=pytest.mark.skipif(
    "avx512" not in kernel().isas, reason="the block product runs on AVX-512 CPUs only"))]


def twins(quantize: str) -> tuple[TransformersModel, TransformersModel]:
    """The same target twice: the compiled loop, and the Python loop (its compiled form dropped)."""
    model = block_llama()
    compiled, python = TransformersModel(model, quantize=quantize), TransformersModel(model, quantize=quantize)
    assert compiled._lean.compiled is not None
    python._lean = dataclasses.replace(python._lean, compiled=None)
    return compiled, python


@pytest.mark.parametrize("quantize", FORMATS)
def test_the_compiled_loop_computes_the_python_loops_bits(quantize):
    compiled, python = twins(quantize)
    tokens = torch.randint(0, 50, (3, 11), generator=torch.Generator().manual_seed(0))
    caches = [model.new_cache(3) for model in (compiled, python)]
    prompt = [model.forward(cache, tokens, num_logits=11) for model, cache in zip((compiled, python), caches)]
    assert torch.equal(*prompt)  # causal mask over the prompt
    for step in range(3):  # one token at a time, no mask
        nxt = torch.full((3, 1), step + 4)
        assert torch.equal(*[model.forward(cache, nxt) for model, cache in zip((compiled, python), caches)])
    kv = [cache.backend for cache in caches]
    assert kv[0].length == kv[1].length == 14
    for layer in range(len(kv[0].keys)):  # the cache holds the same keys and values
        assert torch.equal(kv[0].keys[layer][:, :, :14], kv[1].keys[layer][:, :, :14])
        assert torch.equal(kv[0].values[layer][:, :, :14], kv[1].values[layer][:, :, :14])


@pytest.mark.parametrize("quantize", FORMATS)
def test_batches_with_holes_and_draft_trees_decode_alike(quantize):
    compiled, python = twins(quantize)
    draft = TransformersModel(tiny_causal_lm(50, width=32, dtype=torch.float32, seed=1))
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]  # different lengths: padding holes in the batch
    for method, options in (("bv", dict(draft_length=3)), ("kseq", dict(draft_length=2, num_drafts=3))):
        runs = [generate(target, draft, prompts[1], method, max_new_tokens=12, seed=4, **options)
                for target in (compiled, python)]
        assert runs[0].tokens == runs[1].tokens
    from draftverify.engine import generate_batch

    batches = [generate_batch(target, draft, prompts, "sd", max_new_tokens=10, draft_length=2, seed=5)
               for target in (compiled, python)]
    assert [r.tokens for r in batches[0]] == [r.tokens for r in batches[1]]


def test_the_python_loop_runs_where_a_product_is_eager():
    model = TransformersModel(block_llama(), kernel="eager")
    assert model._lean.compiled is None

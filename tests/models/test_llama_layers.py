"""The compiled decoder-layer loop (``csrc/llama_layers.cpp``) against the Python loop of
:func:`draftverify.models.llama.llama_layers`: the same arithmetic (norms, rotary angles, attention,
gate) summed in another order, so the same results to float32 rounding, for every product kind
(float32 panels, int8 panels, GGUF blocks, GGUF blocks times 8-bit activations), head sizes 32 and
64, a prompt under the causal mask, single tokens, a batch with holes, and a tree of drafts; it
writes the static cache as the Python loop does, and decodes the same tokens for these seeds."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from draftverify.engine import generate
from draftverify.models.base import chunk_repeats
from draftverify.models.ggml_blocks import int8_activations_compiled
from draftverify.models.hf import TransformersModel
from draftverify.models.panel_mm import kernel
from draftverify.models.toy import tiny_causal_lm
from tests.factories import block_llama

pytestmark = pytest.mark.skipif(not kernel().compiled, reason=f"no compiled kernel here: {kernel().reason}")
FORMATS = ["float32", "int8", pytest.param("gguf", marks=pytest.mark.skipif(
    "avx512" not in kernel().isas, reason="the block product runs on AVX-512 CPUs only")),
    pytest.param("gguf-q8", marks=pytest.mark.skipif(not int8_activations_compiled(), reason="no compiled 8-bit activation product here"))]


def twins(quantize: str, width: int = 128) -> tuple[TransformersModel, TransformersModel]:
    """The same target (two heads of width / 2) twice: the compiled loop, and the Python loop (its compiled form dropped)."""
    model = block_llama(width=width)
    compiled, python = TransformersModel(model, quantize=quantize), TransformersModel(model, quantize=quantize)
    assert compiled._lean.compiled is not None
    python._lean = dataclasses.replace(python._lean, compiled=None)
    return compiled, python


def grouped_llama() -> torch.nn.Module:
    """Six query heads over two key heads of 64 (SmolLM2: nine over three), two layers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=384, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(3)
    return LlamaForCausalLM(config).eval()


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-5)  # float32 rounding of sums of a few hundred terms


@pytest.mark.parametrize("width", [128, 64])
@pytest.mark.parametrize("quantize", FORMATS)
def test_the_compiled_loop_computes_what_the_python_loop_computes(quantize, width):
    compiled, python = twins(quantize, width)
    tokens = torch.randint(0, 50, (3, 21), generator=torch.Generator().manual_seed(0))
    caches = [model.new_cache(3) for model in (compiled, python)]
    prompt = [model.forward(cache, tokens, num_logits=21) for model, cache in zip((compiled, python), caches)]
    close(*prompt)  # causal mask over the prompt
    for step in range(3):  # one token at a time, no mask
        nxt = torch.full((3, 1), step + 4)
        close(*[model.forward(cache, nxt) for model, cache in zip((compiled, python), caches)])
    kv = [cache.backend for cache in caches]
    assert kv[0].length == kv[1].length == 24
    for layer in range(len(kv[0].keys)):  # the cache holds the same keys and values
        close(kv[0].keys[layer][:, :, :24], kv[1].keys[layer][:, :, :24])
        close(kv[0].values[layer][:, :, :24], kv[1].values[layer][:, :, :24])


def test_a_long_prompt_attends_as_the_python_loop_does():
    compiled, python = twins("float32")
    tokens = torch.randint(0, 50, (4, 500), generator=torch.Generator().manual_seed(2))  # 4 x 500 queries x 2 heads over up to 500 keys each
    close(*[model.forward(model.new_cache(4), tokens, num_logits=500) for model in (compiled, python)])
    valid = torch.ones(4, 500, dtype=torch.bool)
    valid[1, :130], valid[3, :377] = False, False  # left padding: the live queries' chunks cross rows elsewhere
    close(*[model.forward(model.new_cache(4), tokens, valid, num_logits=500)[valid] for model in (compiled, python)])


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


@pytest.mark.parametrize("kernel", [None, "panel-avx2"])
def test_grouped_heads_read_their_key_head_in_every_call_shape(kernel):
    """Six query heads over two key heads of 64 (SmolLM2: nine over three): the compiled loop takes
    the three query heads of a position and key head together (one tile where AVX-512VL gives the
    registers, one at a time where the products keep to AVX2); every query still attends to its own
    key head, over lengths that leave partial blocks of eight keys, in one-token, five-token and
    masked (holes) calls; the compiled loop skips the padding's products and attention, so only
    the other positions' logits are compared there."""
    model = grouped_llama()
    compiled, python = TransformersModel(model, kernel=kernel), TransformersModel(model, kernel=kernel)
    assert compiled._lean.compiled is not None
    python._lean = dataclasses.replace(python._lean, compiled=None)
    tokens = torch.randint(0, 50, (2, 37), generator=torch.Generator().manual_seed(1))
    valid = torch.ones(2, 37, dtype=torch.bool)
    valid[1, :9] = False  # a shorter prompt: holes, so every call takes a mask
    for holes in (None, valid):
        caches = [m.new_cache(2) for m in (compiled, python)]
        seen = valid if holes is not None else torch.ones_like(valid)  # logits at padding are no one's
        close(*[m.forward(c, tokens, holes, num_logits=37)[seen] for m, c in zip((compiled, python), caches)])
        for size in (1, 5, 1, 5):
            nxt = torch.randint(0, 50, (2, size), generator=torch.Generator().manual_seed(size))
            close(*[m.forward(c, nxt, None if holes is None else torch.ones(2, size, dtype=torch.bool), num_logits=size)
                    for m, c in zip((compiled, python), caches)])


def ungrouped(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with a key head for each query head: each key and value head's weights repeated for
    the query heads that read it, so every query attends to the same keys and values."""
    repeated = copy.deepcopy(model)
    config = repeated.config
    group, size = config.num_attention_heads // config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    with torch.no_grad():
        for layer in repeated.model.layers:
            for name in ("k_proj", "v_proj"):
                old = getattr(layer.self_attn, name)
                new = torch.nn.Linear(old.in_features, old.out_features * group, bias=False)
                new.weight.copy_(old.weight.view(-1, 1, size, old.in_features).expand(-1, group, -1, -1).reshape(-1, old.in_features))
                setattr(layer.self_attn, name, new)
            layer.self_attn.num_key_value_groups = 1
    config.num_key_value_heads = config.num_attention_heads
    return repeated


@pytest.mark.parametrize("kernel", [None, "panel-avx2"])
def test_grouped_heads_have_the_bits_of_a_key_head_each(kernel):
    """The compiled loop scores a tile of three query heads against each load of a key (blocks of 8
    keys where AVX-512VL gives 32 registers, of 4 where the products keep to AVX2) and one query
    head in blocks of 8 keys (the last keys of a query's span, fewer than a block, one at a time), and
    each score and weighted value is summed in the same order whatever the block: so the grouped
    model (6 query heads over 2 key heads) gives the logits, to the bit, of the same model with its
    key and value heads repeated, one per query head (a product's columns have the bits of the same
    columns alone), over spans of 37 to 47 keys. The twin that tells: a block of 4 keys whose scores
    summed their lanes in another tree would round some scores otherwise."""
    grouped, alone = (TransformersModel(m, kernel=kernel) for m in (grouped_llama(), ungrouped(grouped_llama())))
    assert grouped._lean.compiled is not None and alone._lean.compiled is not None
    assert alone.model.config.num_key_value_heads == 6
    tokens = torch.randint(0, 50, (2, 37), generator=torch.Generator().manual_seed(4))
    caches = [m.new_cache(2) for m in (grouped, alone)]
    first = [m.forward(c, tokens, None, num_logits=37) for m, c in zip((grouped, alone), caches)]
    assert torch.equal(*first)
    for size in (1, 5, 1, 3):
        nxt = torch.randint(0, 50, (2, size), generator=torch.Generator().manual_seed(size))
        assert torch.equal(*[m.forward(c, nxt, None, num_logits=size) for m, c in zip((grouped, alone), caches)])


@pytest.mark.parametrize("heads", ["grouped", "one per key head"])
def test_a_position_has_the_same_bits_however_its_call_is_cut(heads):
    """The compiled attention sums each query's scores, softmax and weighted values over the keys it
    sees and no others, whatever else the call holds (``attend_tiled`` in llama_layers.cpp), and the
    rest of a layer is row by row: a prompt of 28 tokens on 2 rows scored in one call or in calls of
    4 to 14 tokens gives every position the same logits to the bit, in tiles of three query heads
    (grouped) and of one (a key head each). A query that scored or weighed a key past its last
    visible one, or missed one, would differ from the call that ends at its position. (Every call
    here puts 8 to 14 rows in each block of the panel product, which then sums a row's k in one
    accumulator set, the same order whatever the block: panel_mm.cpp's ``sets512``; blocks of fewer
    rows split k into several sets, so calls of 1 to 3 tokens on 2 rows round their products otherwise.)"""
    model = TransformersModel(grouped_llama()) if heads == "grouped" else twins("float32")[0]
    tokens = torch.randint(0, 50, (2, 28), generator=torch.Generator().manual_seed(6))
    whole = model.forward(model.new_cache(2), tokens, num_logits=28)
    for sizes in ([4, 5, 6, 7, 6], [7] * 4, [14, 4, 5, 5]):
        cache, parts, start = model.new_cache(2), [], 0
        for size in sizes:
            parts.append(model.forward(cache, tokens[:, start: start + size], num_logits=size))
            start += size
        assert torch.equal(torch.cat(parts, 1), whole)


@pytest.mark.parametrize("heads", ["grouped", "one per key head"])
def test_a_padded_row_attends_as_the_prompt_alone(heads):
    """A left-padded prompt's queries read its keys from its first visible one (``Visible.first`` in
    llama_layers.cpp), so its scores, softmax and weighted values are summed in the same order
    whatever padding stands before it: two calls with the same live tokens in the same order, their
    rows padded by 0 and 8 in one and by 3 and 11 in the other, give the live positions the same
    logits to the bit, and so does the next token. (The products see the same live rows in both
    calls. The padding moves the keys' slots by 3, where a softmax and weighted sum from slot 0
    would group their terms otherwise; a move by 4 would only swap the halves of their lanes' sum
    tree, which commutes.)"""
    model = TransformersModel(grouped_llama()) if heads == "grouped" else twins("float32")[0]
    long, short = (torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(n)) for n in (20, 12))
    logits = []
    for pads in ((0, 8), (3, 11)):
        width = pads[0] + 20  # both rows end there
        tokens, valid = torch.zeros(2, width, dtype=torch.int64), torch.zeros(2, width, dtype=torch.bool)
        for row, (prompt, pad) in enumerate(zip((long, short), pads)):
            tokens[row, pad: pad + len(prompt)], valid[row, pad: pad + len(prompt)] = prompt, True
        cache = model.new_cache(2)
        first = model.forward(cache, tokens, valid, num_logits=width)[valid]  # [32, V]: the live positions
        nxt = model.forward(cache, torch.tensor([[7], [9]]), torch.ones(2, 1, dtype=torch.bool))
        logits.append((first, nxt))
    assert torch.equal(logits[0][0], logits[1][0]) and torch.equal(logits[0][1], logits[1][1])


@pytest.mark.parametrize("heads", ["grouped", "one per key head"])
def test_prompts_that_open_alike_compute_their_opening_once_to_the_same_bits(heads, monkeypatch):
    """A batch's prompts on empty rows that open with the same tokens: the compiled loop computes
    the opening once and copies its keys, values and states (``repeats``, :func:`chunk_repeats`).
    The logits and kept features of every live position, in the prompts' call and in the next
    one-token call (which reads the copied keys and values), are those of the same batch computed
    whole to the bit, and the prompts' call gives each prompt's logits alone: a prompt that shares
    ten tokens with the first, one that is the first's opening of twelve, one equal to the first, one
    that opens otherwise, left-padded to the longest. (The twin that tells: a copy of the source's
    values from the slot after it fails this.)"""
    model = TransformersModel(grouped_llama()) if heads == "grouped" else twins("float32")[0]
    model.keep_features()
    draw = torch.Generator().manual_seed(4)
    first = torch.randint(0, 50, (20,), generator=draw)
    prompts = [first, torch.cat([first[:10], torch.randint(0, 50, (6,), generator=draw)]), first[:12], first,
               torch.randint(0, 50, (15,), generator=draw)]
    width = max(len(p) for p in prompts)
    tokens, valid = torch.zeros(len(prompts), width, dtype=torch.int64), torch.zeros(len(prompts), width, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt):], valid[row, width - len(prompt):] = prompt, True
    repeats = chunk_repeats(tokens, valid)
    assert repeats is not None and int((repeats >= 0).sum()) == 10 + 12 + 20  # what the compiled loop copies
    runs = []
    for copied in (True, False):
        if not copied:
            monkeypatch.setattr("draftverify.models.hf.chunk_repeats", lambda tokens, valid: None)
        cache = model.new_cache(len(prompts))
        together = model.forward(cache, tokens, valid, num_logits=width)[valid]  # [live, V]
        runs.append((together, model.forward(cache, torch.arange(len(prompts))[:, None] + 7),
                     model.kept_features(cache)[cache.valid]))
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    alone = torch.cat([model.forward(model.new_cache(1), p[None], num_logits=len(p))[0] for p in prompts])
    assert torch.equal(runs[0][0], alone)


def test_a_batch_attends_alike_on_one_thread_and_two():
    """Where a call reads enough keys (kParallelWork in llama_layers.cpp: here 8 rows of a 60-token
    prompt) its attention is shared among threads, a cache row's queries for one key head a unit, each
    thread with its own scratch rows: the logits are those of one thread to the bit, in the prompt's
    call and in the next one-token call, which reads the keys and values that call wrote."""
    model = TransformersModel(grouped_llama())
    tokens = torch.randint(0, 50, (8, 60), generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            cache = model.new_cache(8)
            runs.append((model.forward(cache, tokens, num_logits=60), model.forward(cache, tokens[:, :1])))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("quantize", FORMATS)
def test_padding_takes_no_part_in_the_products(quantize):
    """Positions marked not valid (a batch's left padding) leave the compiled loop as they came in
    (their products and attention skipped: nothing is added to their states) and their cache slots
    hold zeros (whatever the buffer held: the next call weighs their values by 0); every other
    position gets what the Python loop, which computes all of them, gives it, in that call and the next.
    The states of this call reach |38|, where the two loops' float32 sums (the compiled one over the 20
    live rows, the Python one over all 36, so the products' row blocks differ) each sit up to ~7e-5
    from the exact result: for the float32 weights (whose float64 model is the same model) the first
    call is judged against that float64 model, the compiled loop no further from it than twice the
    Python loop (measured 2026-11-28: 3.4e-5 against 3.9e-5; 6.7e-5 with the earlier row blocks);
    a padding that leaked into a live position moves it by the order of the states."""
    from draftverify.models.llama import llama_layers
    from draftverify.models.masks import slot_mask
    from draftverify.models.static_cache import StaticKV

    compiled, python = twins(quantize)
    valid = torch.ones(3, 12, dtype=torch.bool)
    valid[1, :5], valid[2, :11] = False, False
    x = torch.randn(3, 12, 128, generator=torch.Generator().manual_seed(6))
    positions = (valid.cumsum(1) - 1).clamp(min=0)
    then = torch.cat([valid, torch.ones(3, 1, dtype=torch.bool)], 1)  # one more token on every row
    outs = []
    for model, skip in ((compiled, valid), (python, None)):
        lean = model._lean
        kv = StaticKV(len(lean.layers), 3, lean.kv_heads, lean.head_dim, 16, torch.float32)
        for buffer in kv.keys + kv.values:
            buffer.fill_(float("nan"))  # what a grown or reordered buffer may hold
        with torch.inference_mode():
            kv.reserve(12)
            first = llama_layers(lean, kv, x, positions, slot_mask(valid, 12), skip)
            kv.advance(12)
            kv.reserve(1)
            second = llama_layers(lean, kv, x[:, -1:], positions[:, -1:] + 1, slot_mask(then, 1))
        outs.append((first, second))
    assert torch.equal(outs[0][0][~valid], x[~valid])  # padding: nothing added
    if quantize in ("float32", "gguf"):  # the model's own weights (block_llama's are GGUF blocks)
        exact = TransformersModel(copy.deepcopy(python.model).double(), kernel="eager")._lean
        kv = StaticKV(len(exact.layers), 3, exact.kv_heads, exact.head_dim, 16, torch.float64)
        with torch.inference_mode():
            kv.reserve(12)
            reference = llama_layers(exact, kv, x.double(), positions, slot_mask(valid, 12))[valid]
        errors = [(out[0][valid].double() - reference).abs().max().item() for out in outs]
        assert errors[0] <= 2 * errors[1], errors
    else:  # int8 weights: the float64 model is another model
        close(outs[0][0][valid], outs[1][0][valid])
    close(outs[0][1], outs[1][1])  # finite: the padding's slots were zeroed


def test_the_python_loop_runs_where_a_product_is_eager_or_heads_are_odd_sizes():
    for model in (TransformersModel(block_llama(), kernel="eager"), TransformersModel(block_llama(), quantize="gguf-q8", kernel="eager"),
                  TransformersModel(tiny_causal_lm(50, arch="llama", width=36, dtype=torch.float32))):  # heads of 18
        assert model._lean.compiled is None


@pytest.mark.parametrize("quantize", ["float32", "int8"])
def test_kept_streams_are_the_residual_streams_after_those_layers(quantize):
    """A target that keeps streams for a fused feature draft (keep_features((1,))): each slot holds
    the final hidden state, then the residual stream after the first decoder layer, the compiled
    loop (run layer range by layer range) as the Python loop and as transformers' own layers."""
    from draftverify.train.feature_draft import residual_streams

    tokens = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    kept = []
    for model in twins(quantize):
        model.keep_features((1,))
        cache = model.new_cache(2)
        model.forward(cache, tokens[:, :6])
        model.forward(cache, tokens[:, 6:])  # a second chunk appends after the first
        kept.append(cache.backend.features)  # [B, 9, 2E]
    torch.testing.assert_close(*kept, rtol=1e-4, atol=1e-4)  # the stream before any norm: larger than the logits
    if quantize == "float32":
        with torch.no_grad():
            final = twins(quantize)[0].model.model(input_ids=tokens).last_hidden_state
            expected = torch.cat([final, residual_streams(twins(quantize)[0].model, tokens, (1,))], -1)
        torch.testing.assert_close(kept[0], expected, rtol=1e-4, atol=1e-4)


def test_a_target_keeps_one_set_of_streams():
    model = twins("float32")[0]
    for bad in [(0,), (2,), (1, 1)]:  # two decoder layers: a stream after the first only
        with pytest.raises(ValueError, match="streams"):
            model.keep_features(bad)
    model.keep_features((1,))
    model.keep_features()  # a draft reading the final states alone reads the first E columns
    assert model.feature_streams == (1,) and model.feature_size == 2 * model.config.hidden_size
    big = TransformersModel(tiny_causal_lm(50, arch="llama", layers=3, dtype=torch.float32, seed=0))
    big.keep_features((1,))
    with pytest.raises(ValueError, match="keeps the streams after layers \\(1,\\)"):
        big.keep_features((2,))
    cache = big.new_cache(1)
    big.forward(cache, torch.tensor([[1, 2, 3]]))
    width = big.config.hidden_size
    assert torch.equal(big.kept_features(cache, (1,)), cache.backend.features)  # final states, then the stream
    assert torch.equal(big.kept_features(cache), cache.backend.features[..., :width])  # the final states alone
    with pytest.raises(ValueError, match="keeps the streams after layers \\(1,\\), not \\(2,\\)"):
        big.kept_features(cache, (2,))


@pytest.mark.parametrize("shape", [(1, 576), (5, 576), (2, 3, 64), (1, 1, 40)])
def test_the_loops_rms_norm_is_f_rms_norm_to_float32_rounding(shape):
    # the compiled op a feature draft's final norm runs (the block and the loop alike)
    gen = torch.Generator().manual_seed(shape[-1])
    x, weight = 3 * torch.randn(shape, generator=gen), torch.randn(shape[-1], generator=gen)
    out = torch.ops.draftverify.rms_norm(x, weight, 1e-5)
    assert out.shape == x.shape
    torch.testing.assert_close(out, torch.nn.functional.rms_norm(x, (shape[-1],), weight, 1e-5), rtol=2e-6, atol=2e-6)
    with pytest.raises(RuntimeError, match="rms_norm"):
        torch.ops.draftverify.rms_norm(x.double(), weight, 1e-5)

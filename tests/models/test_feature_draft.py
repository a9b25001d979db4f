"""The feature draft: zero probability outside its token subset, the target's features read at the
right positions, its cache holding only what it computed from them, and the engine exact with it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from draftverify.engine import DecodeConfig, Decoder, generate_batch
from draftverify.models.feature_draft import FeatureDraft, FeatureHead, _Backend, _Slots, is_feature_draft
from draftverify.models.ggml_blocks import int8_activations_compiled
from draftverify.models.hf import TransformersModel
from draftverify.probs import warp
from draftverify.testing import goodness_of_fit
from draftverify.train.feature_draft import residual_streams
from tests.engine.test_draft_length import sometimes_ar
from tests.factories import tiny_feature_pair
from tests.verify.broken_twins import AcceptAll

VOCAB = 11
SUBSET = torch.tensor([0, 2, 3, 5, 7, 8, 10])


def test_the_draft_law_is_zero_outside_the_subset():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    target_cache = target.new_cache(1)
    target.forward(target_cache, torch.tensor([[1, 4, 6]]))
    logits = draft.forward(draft.new_cache(1, target_cache), torch.tensor([[1, 4, 6, 9]]), None, 4)  # [1, 4, V]
    probs = torch.softmax(logits, -1)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[SUBSET] = False
    assert torch.all(probs[..., outside] == 0)
    assert torch.allclose(probs[..., SUBSET].sum(-1), torch.ones(1, 4))


def test_the_logits_over_its_support_are_the_subsets_columns():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    assert torch.equal(draft.support, SUBSET)
    logits = []
    for on_support in (False, True):  # the same forward twice, from fresh caches
        target_cache = target.new_cache(1)
        target.forward(target_cache, torch.tensor([[1, 4, 6]]))
        logits.append(draft.forward(draft.new_cache(1, target_cache), torch.tensor([[1, 4, 6, 9]]), None, 2,
                                    on_support=on_support))
    assert logits[1].shape == (1, 2, len(SUBSET)) and torch.equal(logits[0][..., SUBSET], logits[1])


@pytest.mark.parametrize("vocab", [[2, 0, 3], [0, 2, 2], [], [0, VOCAB], [-1, 3]], ids=["unsorted", "repeated", "empty",
                                                                                        "too-high", "negative"])
def test_a_head_needs_distinct_sorted_token_ids(vocab):
    target, _ = tiny_feature_pair(VOCAB, SUBSET)
    with pytest.raises(ValueError, match="vocab"):
        FeatureHead(target.model.config, torch.tensor(vocab, dtype=torch.int64))


def test_the_draft_runs_q8_products_where_they_run_compiled_else_int8():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    head = draft.head_module
    assert FeatureDraft(head, target).quantize == ("q8" if int8_activations_compiled() else "int8")
    assert FeatureDraft(head, target, kernel="eager").quantize == "int8"  # q8 only where it runs compiled
    assert FeatureDraft(head, target, quantize=None).quantize is None


def test_a_head_needs_a_decoder_layer():
    target, _ = tiny_feature_pair(VOCAB, SUBSET)
    with pytest.raises(ValueError, match="layers"):
        FeatureHead(target.model.config, SUBSET, 0)


@pytest.mark.parametrize("warping", [{}, {"temperature": 0.7, "top_k": 4}, {"top_p": 0.8}, {"temperature": 0.0}])
def test_drafting_over_the_support_draws_what_the_whole_vocabulary_draws(warping):
    # the decoder warps and samples over the support, then writes zeros elsewhere: the same laws
    # and, the support being sorted, the same tokens from the same uniforms as over all V columns
    drafted = []
    for support in (SUBSET, None):
        target, draft = tiny_feature_pair(VOCAB, SUBSET)
        if support is None:  # the same draft without a support: -inf logits outside the subset, warped over V
            draft.support = None
            draft.forward = lambda *args, on_support, draft=draft: torch.full((*args[1].shape[:1], 1, VOCAB), -math.inf) \
                .index_copy_(2, SUBSET, FeatureDraft.forward(draft, *args))
            draft.sample_block = lambda *args: None  # the loop, through this forward (the block calls the kernels)
        decoder = Decoder(target, draft, [[1, 4], [6, 0, 2]], DecodeConfig("sd", draft_length=4, seed=3, **warping))
        decoder.step()  # the draft reads the target's features from the second step on
        drafted.append(decoder.draft_block(*decoder.pending(decoder.draft_cache), 4))
    (tokens, probs), (full_tokens, full_probs) = drafted
    assert torch.equal(tokens, full_tokens) and torch.allclose(probs, full_probs, atol=1e-6)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[SUBSET] = False
    assert torch.all(probs[..., outside] == 0) and bool(torch.isin(tokens, SUBSET).all())


@pytest.mark.parametrize("layers,fusion", [(1, ()), (2, ()), (1, (1,))])
def test_the_draft_reads_the_targets_features_of_the_previous_position(layers, fusion):
    # through the caches, position j reads the target's feature at j - 1: the same logits as the
    # head's teacher-forced forward over the target's own final hidden states (and, fused, its
    # residual stream after the first layer, as transformers computes it)
    target, draft = tiny_feature_pair(VOCAB, SUBSET, layers=layers, fusion=fusion)
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    target_cache = target.new_cache(1)
    target.forward(target_cache, tokens[:, :-1])  # the target has scored all but the last token
    logits = draft.forward(draft.new_cache(1, target_cache), tokens, None, tokens.shape[1])[0][:, SUBSET]  # [S, N]
    with torch.no_grad():
        features = target.model.model(input_ids=tokens).last_hidden_state  # [1, S, E]
        if fusion:
            assert float(draft.head_module.fuse.weight.abs().min()) > 0  # the streams count
            features = torch.cat([features, residual_streams(target.model, tokens, fusion)], -1)  # [1, S, 2E]
        assert target_cache.backend.features.shape[2] == features.shape[2]
        assert torch.allclose(target_cache.backend.features, features[:, :-1], atol=1e-5)
        previous = torch.nn.functional.pad(draft.head_module.fused(features)[:, :-1], (0, 0, 1, 0))
        expected = draft.head_module.head(draft.head_module(target.model.get_input_embeddings()(tokens), previous))[0]
    # float32 rounding, in other orders of summation, grows through each layer of these large random
    # weights, and the fusion's product [2E -> E] is one more (logits up to 23 here; reading another
    # position's feature moves them by units)
    assert torch.allclose(logits, expected, atol=1e-4 if layers == 1 and not fusion else 5e-4)


@pytest.mark.parametrize("seed", range(20))
def test_one_drafted_position_reads_what_the_block_path_reads(seed):
    # the host-side path for S = 1 against the tensor path over the same positions: every mix of
    # rows reading the target's feature, the draft's own, or zero (a position neither has)
    gen = torch.Generator().manual_seed(seed)
    rows, slots_width, width = 4, 6, 5
    backend = _Backend(None, None, rows, width)
    backend.last = torch.randn(rows, width, generator=gen)
    backend.last_position = torch.randint(-1, 9, (rows,), generator=gen).tolist()
    holes = torch.rand(2, slots_width, generator=gen) < 0.7 if seed % 2 else None  # a batch's left padding
    streams = seed % 3  # what the target keeps: its final states, then 0-2 streams a fused draft reads with them
    read = (lambda kept: kept[..., :width] + kept[..., width:].unflatten(-1, (streams, width)).sum(-2)) if streams else None
    kept = torch.randn(2, slots_width, (1 + streams) * width, generator=gen)  # two target rows: rows read 0, 0, 1, 1
    slots = _Slots(kept, holes, read or (lambda kept: kept))
    held = torch.randint(0, slots_width + 1, (2,), generator=gen).tolist()
    positions = torch.randint(0, 9, (rows, 1), generator=gen)
    if seed % 4 == 0:  # every row one past the position it fed: the draft's own features
        positions = torch.tensor(backend.last_position)[:, None].clamp(min=-1) + 1
    target_rows = [0, 0, 1, 1]
    one = FeatureDraft._position_features(backend, slots, held, target_rows, positions[:, 0].tolist())
    block = FeatureDraft._block_features(backend, slots, held, target_rows, positions)
    assert torch.equal(one[0], block[0]) and torch.equal(one[1], block[1])


@pytest.mark.parametrize("fusion", [(), (1,)])
def test_one_prompts_features_are_the_slots_the_block_path_reads(fusion):
    # one prompt's positions read as a view of the target's slots where all were scored (exact None):
    # the same features as the tensor path's gather; elsewhere (position 0, past what the target
    # scored) the tensor path itself
    target, draft = tiny_feature_pair(VOCAB, SUBSET, fusion=fusion)
    target_cache = target.new_cache(1)
    target.forward(target_cache, torch.tensor([[3, 1, 4, 1, 5, 9]]))
    cache = draft.new_cache(1, target_cache)
    backend, source = cache.backend, target_cache
    slots = _Slots(source.backend.features, None, draft._read)
    viewed = 0
    for start, size in itertools.product(range(8), range(1, 5)):
        positions = torch.arange(start, start + size)[None]
        with torch.inference_mode():
            features, exact = draft._features(cache, positions)
            expected, from_target = FeatureDraft._block_features(backend, slots, source.held, [0], positions)
        assert torch.equal(features, expected)
        assert (exact is None) == (0 < start and start + size - 1 <= source.held[0])
        assert exact is None and bool(from_target.all()) or torch.equal(exact, from_target)
        viewed += exact is None
    assert viewed == 18  # starts 1..6, each of its sizes whose last position reads slot 5 at most


def test_features_are_read_by_position_through_the_holes_of_a_batch():
    """Position i of a target row is its i-th valid slot: the same as reordering every row's valid
    slots first (what the draft did before reading only the slots it needs)."""
    gen = torch.Generator().manual_seed(0)
    features, valid = torch.randn(3, 7, 4, generator=gen), torch.rand(3, 7, generator=gen) < 0.6
    reordered = torch.stack([torch.cat([row[ok], row[~ok]]) for row, ok in zip(features, valid)])
    rows, positions = torch.tensor([[0], [2], [1]]), torch.tensor([[0, 1, 2], [3, 0, 6], [5, 4, 1]])
    assert torch.equal(_Slots(features, valid, lambda kept: kept).at(rows, positions), reordered[rows, positions])
    assert torch.equal(_Slots(features, None, lambda kept: kept).at([1, 2], [3, 0]), features[[1, 2], [3, 0]])


def test_positions_drafted_from_its_own_features_are_dropped_at_the_next_crop():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    target_cache = target.new_cache(1)
    target.forward(target_cache, torch.tensor([[1, 4, 6]]))
    cache = draft.new_cache(1, target_cache)
    draft.forward(cache, torch.tensor([[1, 4, 6, 9]]))  # positions 0..3 read the target's features
    draft.forward(cache, torch.tensor([[2]]))  # position 4 reads the draft's own
    draft.forward(cache, torch.tensor([[5]]))
    assert cache.held == [6]
    draft.crop(cache, [6])
    assert cache.held == [4] and draft.backend_length(cache) == 4


def test_a_fused_draft_needs_streams_its_target_has_and_keeps():
    target, _ = tiny_feature_pair(VOCAB, SUBSET)
    head = FeatureHead(target.model.config, SUBSET, 1, (2,))  # the tiny target has two decoder layers
    with pytest.raises(ValueError, match="streams: increasing layer counts in \\(0, 2\\)"):
        FeatureDraft(head, target)
    plain = FeatureDraft(FeatureHead(target.model.config, SUBSET), target)
    fused = FeatureDraft(FeatureHead(target.model.config, SUBSET, 1, (1,)), target)  # beside a plain one: both read
    cache = target.new_cache(1)
    target.forward(cache, torch.tensor([[3, 1, 4]]))
    assert cache.backend.features.shape[2] == 2 * target.config.hidden_size
    for draft in (plain, fused):
        draft.forward(draft.new_cache(1, cache), torch.tensor([[3, 1, 4, 1]]))


def test_a_feature_draft_needs_the_targets_cache():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    with pytest.raises(ValueError, match="target_cache"):
        draft.new_cache(1)


def test_only_a_decoding_the_feature_draft_reads_keeps_the_targets_states():
    """The target keeps its hidden states for the draft (keep_features) in the caches of a decoding
    with that draft, not in ``ar``'s: its calls skip them there, the same logits to the bit and the
    same tokens, so the baseline pays nothing for a draft it does not run. A draft refuses a
    target cache without them."""
    target, draft = tiny_feature_pair(VOCAB, SUBSET, fusion=(1,))
    plain = target.new_cache(1, features=False)
    assert plain.backend.hidden is None
    with pytest.raises(ValueError, match="target_cache: it keeps no hidden states"):
        draft.new_cache(1, plain)
    kept = target.new_cache(1)
    tokens = torch.tensor([[1, 4, 6, 2, 9]])
    assert torch.equal(target.forward(plain, tokens, num_logits=5), target.forward(kept, tokens, num_logits=5))
    assert kept.backend.features.shape == (1, 5, 2 * target.config.hidden_size)
    prompts = [[1], [2, 0, 5]]
    ar = Decoder(target, draft, prompts, DecodeConfig("ar", max_new_tokens=6, ignore_eos=True))
    sd = Decoder(target, draft, prompts, DecodeConfig("sd", draft_length=3, max_new_tokens=6, ignore_eos=True))
    assert ar.target_cache.backend.hidden is None and sd.target_cache.backend.hidden is not None
    with_states = Decoder(target, draft, prompts, DecodeConfig("ar", max_new_tokens=6, ignore_eos=True))
    with_states.target_cache = target.new_cache(2)
    for decoder in (ar, with_states):
        while not decoder.done:
            decoder.step()
    assert [ar.generated(i) for i in range(2)] == [with_states.generated(i) for i in range(2)]


@pytest.mark.parametrize("layers,fusion", [(1, ()), (2, ()), (1, (1,))])
def test_save_and_load_keep_the_head(tmp_path, layers, fusion):
    _, draft = tiny_feature_pair(VOCAB, SUBSET, layers=layers, fusion=fusion)
    draft.head_module.save(tmp_path)
    assert is_feature_draft(tmp_path) and not is_feature_draft(tmp_path / "nothing")
    loaded = FeatureHead.load(tmp_path)
    assert torch.equal(loaded.vocab, SUBSET) and len(loaded.layers) == layers and loaded.fusion == fusion
    for name, value in draft.head_module.state_dict().items():
        if value.is_floating_point():  # stored as float16
            assert torch.allclose(loaded.state_dict()[name], value.half().float())


@pytest.mark.parametrize("method,num_drafts", [("sd", None), ("bv", None), ("kseq", 2)])
def test_ragged_batches_keep_the_cache_invariant(method, num_drafts):
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    prompts = [[1], [2, 0, 5], [0, 3, 1, 2, 7, 7]]
    decoder = Decoder(target, draft, prompts, DecodeConfig(method, num_drafts=num_drafts, draft_length=3, max_new_tokens=10))
    while not decoder.done:
        decoder.step()
        decoder.check_caches()
    assert all(len(decoder.generated(i)) == 10 for i in range(len(prompts)))


def test_steps_of_the_target_alone_leave_the_draft_to_catch_up_from_the_targets_features():
    """L = 0 steps (a draft-length policy's ar steps) between drafting steps: the draft then reads
    several pending tokens with the features the target kept for them; the caches hold throughout."""
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    prompts = [[1], [2, 0, 5], [0, 3, 1, 2, 7, 7]]
    decoder = Decoder(target, draft, prompts, DecodeConfig("sd", draft_length=sometimes_ar(4), max_new_tokens=24))
    lengths = []
    while not decoder.done:
        lengths += [s.stats.draft_length for s in decoder.step()]
        decoder.check_caches()
    assert 0 in lengths and max(lengths) >= 1


def test_the_first_step_is_the_targets_alone_then_the_draft_reads_the_prompt_with_its_features():
    """Before the target's first call there is no feature to draft from (``reads_target``): the first
    step samples one token from the target and leaves the draft unfed; the next step's draft reads
    the prompt and that token with the target's features, so its cache keeps all of them."""
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    prompts = [[1], [2, 0, 5]]
    decoder = Decoder(target, draft, prompts, DecodeConfig("sd", draft_length=3, max_new_tokens=8, ignore_eos=True))
    assert draft.reads_target and not target.reads_target
    first = decoder.step()
    assert [(s.stats.drafted, s.stats.target_calls, len(s.tokens)) for s in first] == [(0, 1, 1)] * 2
    assert decoder.draft_cache.held == [0, 0] and decoder.target_cache.held == [1, 3]
    second = decoder.step()
    decoder.check_caches()
    assert all(s.stats.drafted == 3 for s in second)
    assert all(held >= len(p) + 1 for held, p in zip(decoder.draft_cache.held, prompts))


def _target_law(target: TransformersModel, prompt: list[int], num_tokens: int, vocab: int) -> np.ndarray:
    """The target's exact law [V ** n] of the n tokens after ``prompt``, enumerated."""
    law = []
    with torch.no_grad():
        for tail in itertools.product(range(vocab), repeat=num_tokens):
            sequence = torch.tensor([prompt + list(tail)])
            probs = torch.softmax(target.model(input_ids=sequence).logits[0].double(), -1)  # [S, V]
            law.append(float(np.prod([probs[len(prompt) - 1 + i, t] for i, t in enumerate(tail)])))
    return np.array(law)


@pytest.mark.parametrize("method,draft_length,quantize", [("sd", 2, "int8"), (AcceptAll(), 2, "int8"),
                                                           ("sd", "ar-steps", "int8"), ("sd", 2, "q8"), (AcceptAll(), 2, "q8"),
                                                           ("sd", 2, "fused"), (AcceptAll(), 2, "fused")],
                         ids=["sd", "accept-all", "sd-with-ar-steps", "sd-q8", "accept-all-q8", "sd-fused", "accept-all-fused"])
def test_the_engine_with_a_feature_draft_samples_the_targets_law(method, draft_length, quantize):
    vocab, num_tokens, samples = 3, 3, 2000
    fusion = (1,) if quantize == "fused" else ()  # a draft fusing the target's stream after its first layer
    target, draft = tiny_feature_pair(vocab, torch.tensor([0, 2]), seed=4, quantize="int8" if fusion else quantize,
                                      fusion=fusion)  # the shipped drafts' products
    draft_length = sometimes_ar(2) if draft_length == "ar-steps" else draft_length
    results = generate_batch(target, draft, [[1]] * samples, method, draft_length=draft_length, max_new_tokens=num_tokens, seed=0)
    weights = vocab ** np.arange(num_tokens - 1, -1, -1)
    counts = np.bincount([int(np.dot(r.tokens, weights)) for r in results], minlength=vocab**num_tokens)
    p_value = goodness_of_fit(counts, _target_law(target, [1], num_tokens, vocab))[0]
    assert (p_value > 1e-3) if method == "sd" else (p_value < 1e-3)


@pytest.mark.parametrize("method,num_drafts", [("gbv", 1), ("spectr-gbv", 2)])
def test_the_engine_refuses_a_verifier_exact_only_for_a_prefix_draft(method, num_drafts):
    """gbv's target modification assumes a draft whose law depends on the prefix alone; a feature
    draft's depends on its depth within a step (tests/verify/test_exactness.py: TV 0.095)."""
    target, draft = tiny_feature_pair(3, torch.tensor([0, 2]), seed=4)
    assert draft.depth_dependent
    with pytest.raises(ValueError, match=f"method '{method}'.*depth within a step"):
        generate_batch(target, draft, [[1]], method, num_drafts=num_drafts, draft_length=2, max_new_tokens=3)


ONE, RAGGED = [[1, 4, 2, 9]], [[1, 4, 2, 9], [3, 5], [7, 1, 1, 6, 2, 8]]  # a ragged batch: holes in both caches


@pytest.mark.parametrize("method,num_drafts,temperature,warping,prompts,layers", [
    ("sd", None, 1.0, {}, ONE, 1), ("bv", None, 0.7, {}, ONE, 1), ("kseq", 2, 1.0, {}, ONE, 1),
    ("sd", None, 1.0, dict(top_k=3), ONE, 1), ("bv", None, 0.8, dict(top_p=0.6), ONE, 1),
    ("kseq", 2, 0.9, dict(top_k=4, top_p=0.8), ONE, 1), ("sd", None, 1.0, {}, RAGGED, 1), ("bv", None, 0.8, {}, RAGGED, 1),
    ("kseq", 2, 0.9, dict(top_p=0.8), RAGGED, 1), ("sd", None, 1.0, {}, ONE, 2), ("bv", None, 0.8, {}, RAGGED, 3),
    ("sd", None, 1.0, dict(top_p=0.6), ONE, "wide"), ("sd", None, 3.0, dict(top_p=0.97), RAGGED, "wide"),
    ("sd", None, 1.0, {}, RAGGED, "q8"), ("kseq", 2, 0.8, dict(top_k=4), ONE, "q8"),
    ("sd", None, 1.0, {}, RAGGED, "fused"), ("bv", None, 0.8, dict(top_p=0.6), ONE, "fused")])
def test_the_compiled_block_draws_what_the_loop_of_forwards_draws(method, num_drafts, temperature, warping, prompts,
                                                                  layers, monkeypatch):
    """csrc/feature_draft.cpp against the decoder's loop over draft.forward: the same drafted tokens
    and laws bit for bit, step after step, and the caches left alike; top-k and top-p warp as
    probs.warp does (over the draft's 7 tokens: top-k 3 and top-p 0.6 zero some of every law; over
    "wide" drafts' 300 tokens the nucleus is sorted over its first candidates, or more of them at
    temperature 3); a ragged batch's rows (positions, masks and padding of their own) as forward
    takes them; a head of several decoder layers; the Q8_0 x 8-bit activation products ("q8"); a
    head fusing the target's residual stream after its first layer ("fused")."""
    vocab, subset = (VOCAB, SUBSET) if layers != "wide" else (400, torch.arange(0, 400, 4).repeat_interleave(3)
                                                                   + torch.arange(3).repeat(100))
    if layers == "q8" and not int8_activations_compiled():
        pytest.skip("the Q8_0 x 8-bit product runs compiled on AVX-512 VNNI only")
    target, draft = tiny_feature_pair(vocab, subset, quantize="q8" if layers == "q8" else "int8",
                                      layers=layers if isinstance(layers, int) else 1,
                                      fusion=(1,) if layers == "fused" else ())
    assert draft.compiled_block is not None
    compiled_calls, runs = [], []
    sample_block, draft_block = FeatureDraft.sample_block, Decoder.draft_block

    def counted(self, *args):
        block = sample_block(self, *args)
        compiled_calls.append(block is not None)
        return block

    for compiled in (True, False):
        monkeypatch.setattr(FeatureDraft, "sample_block", counted if compiled else lambda self, *args: None)
        blocks = []
        monkeypatch.setattr(Decoder, "draft_block",
                            lambda self, *args: blocks.append(draft_block(self, *args)) or blocks[-1])
        decoder = Decoder(target, draft, prompts, DecodeConfig(method, num_drafts=num_drafts, draft_length=3,
                                                               temperature=temperature, max_new_tokens=40, **warping))
        padded = []
        while not decoder.done:
            padded.append(decoder.pending(decoder.draft_cache)[1] is not None)
            decoder.step()
            decoder.check_caches()
        backend = decoder.draft_cache.backend
        runs.append(([decoder.generated(p) for p in range(len(prompts))], blocks, backend.exact, backend.last_position,
                     backend.last))
    assert compiled_calls and all(compiled_calls)
    assert (decoder.draft_cache.holes and any(padded)) == (prompts is RAGGED)  # padded chunks met where ragged
    (tokens, blocks, exact, last_position, last), (tokens_loop, blocks_loop, *rest) = runs
    assert tokens == tokens_loop and len(blocks) == len(blocks_loop) > 5
    for (drafted, laws), (drafted_loop, laws_loop) in zip(blocks, blocks_loop):
        assert torch.equal(drafted, drafted_loop) and torch.equal(laws, laws_loop)
    zeros = torch.cat([laws[..., subset] == 0 for _, laws in blocks]).sum(-1)  # zeroed tokens of the subset, per law
    if layers == "wide":
        kept = len(subset) - zeros
        assert bool((zeros > 0).all()) and (int(kept.max()) > 64) == (temperature == 3.0)  # past the first candidates
    elif "top_k" in warping or warping.get("top_p") == 0.6:
        assert bool((zeros > 0).all())
    elif not warping:
        assert not bool(zeros.any())
    assert [exact, last_position] == rest[:2] and torch.equal(last, rest[2])


@pytest.mark.parametrize("method,num_drafts", [("sd", None), ("kseq", 2)])
def test_prompts_that_open_alike_are_drafted_from_their_opening_once(method, num_drafts, monkeypatch):
    """The draft's first forward over a batch (its catch-up on the prompts, in the compiled block)
    computes a position that repeats an earlier row's opening once (``repeats``, as the target's
    prompts' call does: :func:`~draftverify.models.base.chunk_repeats`): two samples of one prompt,
    one sharing its opening, one that opens otherwise, and with K = 2 each row's two draft rows. The
    decoding is the one that computes every position, to the bit: tokens, drafted blocks and laws,
    the draft's last features; a twin that copies from the position before its source fails."""
    from draftverify.models import feature_draft

    target, draft = tiny_feature_pair(VOCAB, SUBSET, quantize="int8")
    prompts = [[1, 4, 2, 9, 3, 5], [1, 4, 2, 9, 3, 5], [1, 4, 2, 7], [6, 1, 1]]
    real, draft_block, copied = feature_draft.chunk_repeats, Decoder.draft_block, []

    def counted(tokens, valid):
        repeats = real(tokens, valid)
        copied.append(0 if repeats is None else int((repeats >= 0).sum()))
        return repeats

    def shifted(tokens, valid):  # the twin: a copy of row 0 (never padded here) from the slot before its source
        repeats = real(tokens, valid)
        return repeats if repeats is None else torch.where((repeats > 0) & (repeats < tokens.shape[1]), repeats - 1, repeats)

    def decode(repeats):
        monkeypatch.setattr(feature_draft, "chunk_repeats", repeats)
        blocks = []
        monkeypatch.setattr(Decoder, "draft_block", lambda self, *args: blocks.append(draft_block(self, *args)) or blocks[-1])
        decoder = Decoder(target, draft, prompts, DecodeConfig(method, num_drafts=num_drafts, draft_length=3,
                                                               max_new_tokens=12, seed=3))
        while not decoder.done:
            decoder.step()
            decoder.check_caches()
        return [decoder.generated(p) for p in range(len(prompts))], blocks, decoder.draft_cache.backend.last

    once, every, twin = decode(counted), decode(lambda tokens, valid: None), decode(shifted)
    k = num_drafts or 1
    # at the draft's one opening: the second sample's prompt and the third's opening of three, with K = 2 each row's
    # second copy (its prompt and first token) whole
    assert len(copied) == 1 and copied[0] >= 6 + 3 + sum(len(p) + 1 for p in prompts) * (k - 1)
    assert once[0] == every[0] and len(once[1]) == len(every[1]) > 3 and torch.equal(once[2], every[2])
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(once[1], every[1]))
    assert not all(torch.equal(la, lb) for (_, la), (_, lb) in zip(twin[1], every[1]))


def test_a_draft_state_of_nan_is_refused_by_the_block_as_by_the_loop():
    # the block's warp checks its rows after the softmax as probs.warp does
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    assert draft.compiled_block is not None
    target_cache = target.new_cache(1)
    target.forward(target_cache, torch.tensor([[1, 4, 6]]))
    draft.norm_weight.fill_(float("nan"))  # the final norm's weight: NaN states, NaN logits
    with pytest.raises(RuntimeError, match="a row has a NaN"):
        draft.sample_block(draft.new_cache(1, target_cache), torch.tensor([[1, 4, 6]]), 2, 1.0, torch.Generator())
    with pytest.raises(ValueError, match="a row has a NaN"):
        warp(draft.forward(draft.new_cache(1, target_cache), torch.tensor([[1, 4, 6]]), None, 1, on_support=True))


def test_the_compiled_block_is_left_out_where_a_hook_reads_the_output_layer():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    plain = Decoder(target, draft, [[1, 2]], DecodeConfig("sd", draft_length=2, max_new_tokens=4))
    handle = draft.get_output_embeddings().register_forward_hook(lambda *args: None)
    chunk, _ = plain.pending(plain.draft_cache)
    try:
        assert draft.sample_block(plain.draft_cache, chunk, 2, 1.0, None) is None
    finally:
        handle.remove()
    assert plain.draft_cache.held == [0]  # untouched
    assert draft.sample_block(plain.draft_cache, chunk, 2, 1.0, None) is not None


def test_no_compiled_block_where_the_angles_follow_the_positions_of_a_call():
    """transformers' dynamic and longrope types rescale their frequencies by a call's positions, so
    one rotary call over a whole block could give other angles than the loop's calls."""
    from transformers import LlamaConfig

    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    assert draft.compiled_block is not None
    theta = target.model.config.rope_parameters["rope_theta"]
    config = LlamaConfig(**{**target.model.config.to_dict(),
                            "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": theta}})
    assert FeatureDraft(FeatureHead(config, SUBSET), target).compiled_block is None


@pytest.mark.parametrize("tokens,length,temperature,warping,match", [
    ([[1], [2]], 2, 1.0, {}, "tokens"), ([[1]], 0, 1.0, {}, "length"), ([[1]], 2, 0.0, {}, "temperature"),
    ([[1]], 2, float("nan"), {}, "temperature"), ([[1]], 2, 1.0, dict(top_k=0), "top_k"),
    ([[1]], 2, 1.0, dict(top_p=1.5), "top_p"), ([[1]], 2, 1.0, dict(valid=torch.tensor([[True, True]])), "valid")])
def test_a_compiled_block_with_bad_arguments_is_a_value_error(tokens, length, temperature, warping, match):
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    cache = draft.new_cache(1, target.new_cache(1))
    with pytest.raises(ValueError, match=match):
        draft.sample_block(cache, torch.tensor(tokens), length, temperature, None, **warping)
    assert cache.held == [0]  # untouched

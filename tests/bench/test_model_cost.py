"""bench model-cost's timing loop on a tiny model: every call kind for every draft length, ratios
r(L + 1) and c from the medians, and a draft-less target; the floor of r from float32 arithmetic."""

from __future__ import annotations

import pytest
import torch

from draftverify.bench.model_cost import call_costs, multiply_adds, r_floor, ratios
from draftverify.models.hf import TransformersModel
from draftverify.models.panel_mm import fma_peak, kernel
from draftverify.models.toy import tiny_causal_lm


@pytest.fixture(scope="module")
def target():
    return TransformersModel(tiny_causal_lm(40, arch="llama", width=32, layers=2, seed=1, dtype=torch.float32))


def test_call_costs_time_every_kind_and_ratios_divide_by_the_one_token_call(target):
    draft = TransformersModel(tiny_causal_lm(40, arch="gpt2", width=16, layers=1, seed=2, dtype=torch.float32))
    costs = call_costs({"a": (target, draft), "b": (target, None)}, list(range(10)), repeats=2,
                       draft_lengths=[1, 4], accepted=1)
    assert set(costs["a"]) == {"target_1", "target_2", "target_5", "draft_1", "draft_phase_1", "draft_phase_4"}
    assert set(costs["b"]) == {"target_1", "target_2", "target_5"}
    r = ratios(costs["a"])
    assert set(r) == {"r_2", "r_5", "draft_cost_c"}
    assert r["r_5"] == costs["a"]["target_5"] / costs["a"]["target_1"]
    assert r["draft_cost_c"] == costs["a"]["draft_1"] / costs["a"]["target_1"]
    assert "draft_cost_c" not in ratios(costs["b"])


def test_more_accepted_tokens_than_the_shortest_draft_is_an_error(target):
    with pytest.raises(ValueError, match="accepted"):
        call_costs({"a": (target, None)}, [1, 2], repeats=1, draft_lengths=[1, 4], accepted=2)


def test_multiply_adds_count_every_linear_weight_once(target):
    model = target.model  # llama, width 32, 2 layers, vocabulary 40, tied output layer
    config = model.config
    attention = 2 * 32 * 32 + 2 * 32 * config.num_key_value_heads * (32 // config.num_attention_heads)
    layer = attention + 3 * 32 * config.intermediate_size
    assert multiply_adds(model) == 2 * layer + 32 * 40


def test_the_floor_of_r_is_arithmetic_time_over_the_one_token_call_and_never_below_1():
    # 1M multiply-adds a token at 100 GFLOP/s: 20 us a token of arithmetic
    assert r_floor(17, 10**6, 100e9, 170e-6) == pytest.approx(2.0)  # 340 us of arithmetic / 170 us
    assert r_floor(2, 10**6, 100e9, 170e-6) == 1.0  # 40 us of arithmetic: the weight stream bounds it
    for bad in ((0, 10**6, 1e9, 1e-3), (2, 10**6, 0.0, 1e-3), (2, 10**6, 1e9, 0.0), (2, 0, 1e9, 1e-3)):
        with pytest.raises(ValueError, match="tokens and weights"):
            r_floor(*bad)


@pytest.mark.skipif(not kernel().compiled, reason=f"panel kernel unavailable: {kernel().reason}")
def test_fma_peak_measures_each_instruction_set_the_cpu_runs_and_refuses_others():
    for isa in kernel().isas:
        assert 1e9 < fma_peak(isa, rounds=1) < 1e13  # FLOP/s of one core
    with pytest.raises(ValueError, match="isa"):
        fma_peak("sse2")
    with pytest.raises(ValueError, match="rounds"):
        fma_peak(rounds=0)


def test_every_target_variant_keeps_the_streams_a_fused_draft_reads():
    """bench model-cost wraps the target once per kernel; each wrapper must keep what the draft
    reads (a fused draft: the streams too; before 2026-11-27 it kept the final states alone and the
    fused draft's product failed on a wrongly shaped input)."""
    from draftverify.bench.model_cost import _variants, call_costs
    from tests.factories import tiny_feature_pair

    target, draft = tiny_feature_pair(11, torch.tensor([0, 2, 3, 5, 7]), fusion=(1,))
    variants, _ = _variants(target.model, None, draft, "static")
    assert all(variant.feature_streams == (1,) for variant, _ in variants.values())
    costs = call_costs({name: variants[name] for name in list(variants)[:2]}, list(range(6)), repeats=1,
                       draft_lengths=[2], accepted=1)
    assert all("draft_phase_2" in cost for cost in costs.values())
    plain = TransformersModel(target.model)
    plain.keep_features()  # the final states alone
    scored = plain.new_cache(1)
    plain.forward(scored, torch.tensor([[1, 2, 3]]))
    cache = draft.new_cache(1, scored)
    with pytest.raises(ValueError, match="target: it keeps 32 features a position; this draft fuses the streams"):
        draft.forward(cache, torch.tensor([[1, 2, 3]]))


@pytest.mark.skipif(not kernel().compiled, reason=f"panel kernel unavailable: {kernel().reason}")
def test_a_draft_phase_is_timed_as_the_decoder_drafts_and_leaves_the_cache_where_it_was(target, monkeypatch):
    """A feature draft's step and phase run its compiled block, draws included, as the engine runs
    them (before 2026-11-30 they ran its Python forwards: c read twice the engine's); a draft
    without a block runs its forwards. Either way each timed call crops back to the prompt."""
    from tests.factories import tiny_feature_pair

    feature_target, feature = tiny_feature_pair(11, torch.tensor([0, 2, 3, 5, 7]), quantize="int8")
    plain = TransformersModel(tiny_causal_lm(40, arch="gpt2", width=16, layers=1, seed=2, dtype=torch.float32))
    blocks, forwards, lengths = [], [], []
    for model in (feature, plain):
        sample_block, forward, crop = model.sample_block, model.forward, model.crop

        def block(cache, tokens, length, *args, sample_block=sample_block, model=model):
            out = sample_block(cache, tokens, length, *args)
            blocks.append((model, length, out is not None))
            return out

        def counted(cache, tokens, *args, forward=forward, model=model, **kwargs):
            forwards.append((model, tokens.shape[1]))
            return forward(cache, tokens, *args, **kwargs)

        def cropped(cache, length, crop=crop, model=model):
            crop(cache, length)
            lengths.append((model, tuple(torch.as_tensor(length).flatten().tolist())))

        monkeypatch.setattr(model, "sample_block", block)
        monkeypatch.setattr(model, "forward", counted)
        monkeypatch.setattr(model, "crop", cropped)
    call_costs({"feature": (feature_target, feature), "plain": (target, plain)}, list(range(6)), repeats=2,
               draft_lengths=[3], accepted=1)
    assert {(length, ran) for model, length, ran in blocks if model is feature} == {(1, True), (3, True)}
    assert {(length, ran) for model, length, ran in blocks if model is plain} == {(1, False), (3, False)}
    assert {m for model, m in forwards if model is feature} == {6}  # the prompt alone: every step drafted in its block
    timed_plain = [m for model, m in forwards if model is plain][1:]  # after the prompt: one token a forward
    assert set(timed_plain) == {1} and len(timed_plain) == 7 * (1 + 3)  # 5 warm-up and 2 timed rounds of 1 + 3
    assert {length for model, length in lengths if model is feature} == {(6,)}  # every crop back to the prompt
    assert {length for model, length in lengths if model is plain} == {(6,)}

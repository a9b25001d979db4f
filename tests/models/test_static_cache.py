"""The static KV cache against the dynamic one and the model itself (GPT-2 and Llama), in float32
at 1e-5: one random sequence of ragged chunks, crops, reorders and tree scoring drives both caches."""

from __future__ import annotations

import pytest
import torch

from draftverify.models.hf import TransformersModel
from draftverify.models.toy import tiny_causal_lm

VOCAB = 50
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def raw(request):
    return tiny_causal_lm(VOCAB, arch=request.param, width=32, layers=2, seed=5, dtype=torch.float32)


def alone(raw, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return raw(torch.tensor([tokens])).logits[0, -1]  # [V]


def test_static_and_dynamic_caches_agree_with_the_model_through_a_random_run(raw):
    gen = torch.Generator().manual_seed(0)
    models = [TransformersModel(raw, kv_cache="static", static_length=16), TransformersModel(raw, kv_cache="dynamic")]
    caches = [m.new_cache(3) for m in models]
    rows = [[], [], []]  # what each row holds
    for step in range(12):
        batch = len(rows)
        size = int(torch.randint(1, 4, (1,), generator=gen))
        tokens = torch.randint(0, VOCAB, (batch, size), generator=gen)
        valid = torch.ones(batch, size, dtype=torch.bool)
        if step % 3 == 0:  # left padding on row 0
            valid[0, : size - 1] = False
        outs = [m.forward(c, tokens, valid, 1)[:, 0] for m, c in zip(models, caches)]  # [B, V] each
        for b in range(batch):
            rows[b] += tokens[b][valid[b]].tolist()
            torch.testing.assert_close(outs[0][b], alone(raw, rows[b]), **TOL)
        torch.testing.assert_close(outs[0], outs[1], **TOL)
        if step % 2 == 1:  # a rejection in some rows: they keep different lengths
            keep = [max(1, len(r) - int(torch.randint(0, 3, (1,), generator=gen))) for r in rows]
            for m, c in zip(models, caches):
                m.crop(c, torch.tensor(keep))
            rows = [r[:k] for r, k in zip(rows, keep)]
        if step % 4 == 2:  # reorder, repeat and drop rows
            order = torch.tensor([2, 0, 0] if batch == 3 else [1, 0, 1])
            for m, c in zip(models, caches):
                m.reindex(c, order)
            rows = [list(rows[i]) for i in order.tolist()]
        for m, c in zip(models, caches):
            assert [c.row(b) for b in range(len(rows))] == rows
            assert m.backend_length(c) == c.width
    assert caches[0].backend.capacity > 16  # the run outgrew the preallocated slots: buffers doubled


def test_tree_scoring_and_keep_draft_agree_with_the_dynamic_cache(raw):
    models = [TransformersModel(raw, kv_cache="static"), TransformersModel(raw, kv_cache="dynamic")]
    logits, nexts = [], []
    for m in models:
        cache = m.new_cache(2)
        m.forward(cache, torch.tensor([[1, 2, 3, 4], [0, 5, 6, 7]]), torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]]).bool())
        drafts = torch.tensor([[[8, 9], [10, 11], [12, 13]], [[14, 15], [16, 17], [18, 19]]])  # [B=2, K=3, L=2]
        logits.append(m.score_drafts(cache, torch.tensor([[20], [21]]), None, drafts))
        m.keep_draft(cache, torch.tensor([2, 1]), torch.tensor([1, 2]))
        assert cache.row(0) == [1, 2, 3, 4, 20, 12] and cache.row(1) == [5, 6, 7, 21, 16, 17]
        nexts.append(m.forward(cache, torch.tensor([[22], [23]]))[:, 0])
    torch.testing.assert_close(logits[0], logits[1], **TOL)
    torch.testing.assert_close(logits[0][0, 2, 1], alone(raw, [1, 2, 3, 4, 20, 12]), **TOL)
    torch.testing.assert_close(nexts[0][1], alone(raw, [5, 6, 7, 21, 16, 17, 23]), **TOL)
    torch.testing.assert_close(nexts[0], nexts[1], **TOL)


def test_crop_moves_a_pointer_and_reindex_copies_only_when_rows_change(raw):
    model = TransformersModel(raw, static_length=32)
    cache = model.new_cache(2)
    model.forward(cache, torch.randint(0, VOCAB, (2, 10)))
    keys = cache.backend.keys[0]
    model.crop(cache, torch.tensor([6, 6]))
    assert cache.backend.length == cache.width == 6 and cache.backend.keys[0] is keys
    model.reindex(cache, torch.tensor([0, 1]))
    assert cache.backend.keys[0] is keys
    model.reindex(cache, torch.tensor([1, 1]))
    assert cache.backend.keys[0] is not keys and cache.backend.capacity == 32


@pytest.mark.parametrize("kernel", ["eager", "panel"])
def test_hooks_on_the_output_layer_see_its_input_and_the_packed_kernels_agree(raw, kernel):
    from draftverify.models.gpt2 import onednn_packing
    from draftverify.models.panel_mm import PanelLinear
    from draftverify.models.panel_mm import kernel as panel_kernel

    if kernel == "panel" and not panel_kernel().compiled:
        pytest.skip(f"panel kernel unavailable: {panel_kernel().reason}")
    model = TransformersModel(raw, kernel=kernel)
    if kernel == "eager":
        assert (model._lean.head.packed is not None) == onednn_packing()  # float32: packed when possible
    else:
        assert isinstance(model._lean.head, PanelLinear)
    tokens = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(2))
    plain = model.forward(model.new_cache(2), tokens, None, 3)  # [B, 3, V]: packed kernels (6 rows per call)
    seen = []
    handle = raw.lm_head.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    try:
        hooked = model.forward(model.new_cache(2), tokens, None, 3)
    finally:
        handle.remove()
    assert seen[0].shape == (2, 3, 32)
    torch.testing.assert_close(hooked, plain, **TOL)
    for b in range(2):
        torch.testing.assert_close(plain[b, -1], alone(raw, tokens[b].tolist()), **TOL)

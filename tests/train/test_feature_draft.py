"""Training a feature draft: the later passes of the training-time test compute what the draft
computes when it decodes, drafted position by drafted position; a deepened head drafts as the head
it grew from."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from draftverify.train.feature_draft import deepen, draft_ahead_mask, draft_passes, residual_streams, with_fusion
from tests.factories import tiny_feature_pair

VOCAB = 11
SUBSET = torch.tensor([0, 2, 3, 5, 7, 8, 10])
TOKENS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 0, 7]])


@pytest.mark.parametrize("ahead,layers,fusion", [(1, 1, ()), (2, 1, ()), (3, 1, ()), (2, 2, ()), (2, 1, (1,))])
def test_a_later_pass_is_the_draft_drafting_that_many_positions_ahead(ahead, layers, fusion):
    target, draft = tiny_feature_pair(VOCAB, SUBSET, layers=layers, fusion=fusion)
    j = TOKENS.shape[1] - 1  # the position drafted `ahead` steps after the target's last scored one
    target_cache = target.new_cache(1)
    target.forward(target_cache, TOKENS[:, : j - ahead])  # the target has scored positions < j - ahead
    cache = draft.new_cache(1, target_cache)
    draft.forward(cache, TOKENS[:, : j - ahead + 1])  # up to j - ahead: the target's features
    for i in range(j - ahead + 1, j + 1):  # then one drafted position at a time: its own features
        logits = draft.forward(cache, TOKENS[:, i: i + 1])[0, -1, SUBSET]
    with torch.no_grad():
        kept = target.model.model(input_ids=TOKENS).last_hidden_state
        if fusion:
            kept = torch.cat([kept, residual_streams(target.model, TOKENS, fusion)], -1)
        embedded = target.model.get_input_embeddings()(TOKENS)
        previous = F.pad(draft.head_module.fused(kept)[:, :-1], (0, 0, 1, 0))  # what training's first pass reads (no noise)
        trained = draft.head_module.head(draft_passes(draft.head_module, embedded, previous, ahead + 1)[ahead][0, j])
    torch.testing.assert_close(logits, trained, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("layers", [1, 2])
def test_the_passes_cache_what_the_passes_before_computed_values_and_gradients_alike(layers):
    """Pass q + 1 computes its own positions against the cached keys and values of the passes before
    (their graph kept): what the layer gives when it runs every pass's inputs side by side under
    :func:`draft_ahead_mask`, and the gradients of a loss over all passes alike."""
    _, draft = tiny_feature_pair(VOCAB, SUBSET, layers=layers)
    head, size, passes = draft.head_module, TOKENS.shape[1], 3
    torch.manual_seed(0)
    embedded, previous = torch.randn(2, size, head.config.hidden_size), torch.randn(2, size, head.config.hidden_size)
    cached = draft_passes(head, embedded, previous, passes)
    torch.stack(cached).square().mean().backward()
    grads = [p.grad.clone() for p in head.parameters() if p.grad is not None]
    head.zero_grad()
    inputs, side_by_side = [previous], []
    for q in range(passes):  # every pass recomputed beside the ones before
        both = head(embedded.repeat(1, q + 1, 1), torch.cat(inputs, 1), torch.arange(size).repeat(q + 1)[None],
                    draft_ahead_mask(size, q + 1)[None, None])
        side_by_side.append(both[:, q * size:])
        inputs.append(F.pad(side_by_side[-1][:, :-1].detach(), (0, 0, 1, 0)))
    torch.stack(side_by_side).square().mean().backward()
    for a, b in zip(cached, side_by_side):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, [p.grad for p in head.parameters() if p.grad is not None]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert len(grads) == sum(1 for _ in head.parameters()) - 1  # all but the output layer, which no loss here reads


def test_the_first_pass_is_causal_and_each_query_sees_its_own_key():
    mask = draft_ahead_mask(4, 3)
    assert torch.equal(mask[:4, :4], torch.ones(4, 4).tril().bool()) and not mask[:4, 4:].any()
    assert bool(mask.diagonal().all())
    assert mask[4 + 2].nonzero().flatten().tolist() == [0, 1, 6]  # one ahead at 2: target keys 0..1, itself
    assert mask[8 + 3].nonzero().flatten().tolist() == [0, 1, 6, 11]  # two ahead at 3: 0..1, pass 1 at 2, itself
    with pytest.raises(ValueError, match="passes"):
        draft_ahead_mask(4, 0)


def test_a_deepened_head_drafts_as_the_head_it_grew_from_until_trained():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    head = draft.head_module
    deeper = deepen(head, 3, seed=1)
    assert len(deeper.layers) == 3 and torch.equal(deeper.vocab, head.vocab)
    embedded = target.model.get_input_embeddings()(TOKENS).detach()
    previous = torch.randn(*embedded.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(deeper(embedded, previous), head(embedded, previous))  # the new layers pass x through
        new = deeper.layers[1]
        assert new.self_attn.q_proj.weight.abs().sum() > 0 and new.mlp.up_proj.weight.abs().sum() > 0  # the rest drawn
    with torch.no_grad():
        deeper.layers[2].mlp.down_proj.weight.normal_()  # trained: the new layers count
        assert not torch.allclose(deeper(embedded, previous), head(embedded, previous))
    assert deepen(head, 1) is head
    with pytest.raises(ValueError, match="layers: the head has 3"):
        deepen(deeper, 2)


def test_a_head_grown_a_fusion_drafts_as_the_head_until_trained():
    target, draft = tiny_feature_pair(VOCAB, SUBSET)
    head = draft.head_module
    fused = with_fusion(head, (1,))
    assert fused.fusion == (1,) and not fused.fuse.weight.detach().any()
    with torch.no_grad():
        final = target.model.model(input_ids=TOKENS).last_hidden_state
        kept = torch.cat([final, residual_streams(target.model, TOKENS, (1,))], -1)  # [1, S, 2E]
        embedded = target.model.get_input_embeddings()(TOKENS)
        assert torch.equal(fused.fused(kept), final)  # g = f while the fusion is zero
        assert torch.equal(fused(embedded, fused.fused(kept)), head(embedded, final))
        fused.fuse.weight.normal_()  # trained: the stream counts
        assert not torch.allclose(fused.fused(kept), final)
    assert with_fusion(fused, (1,)) is fused and with_fusion(head, ()) is head
    with pytest.raises(ValueError, match="fusion: the head fuses the streams after layers \\(1,\\) already"):
        with_fusion(fused, (2,))
    assert deepen(fused, 2).fusion == (1,) and torch.equal(deepen(fused, 2).fuse.weight, fused.fuse.weight)
    with pytest.raises(ValueError, match="fusion: increasing"):
        type(head)(head.config, head.vocab, 1, (2, 1))

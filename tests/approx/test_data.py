"""SPRINTER's training data (seed 003, section 3.2): four prefix kinds in equal shares, each kind's
continuation drawn from its model at the collection's temperature, and each row's features and
true ratio D(x) / T(x) recomputed by hand from one plain forward of each model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.approx import FeatureSpec
from draftverify.approx import data as data_module
from draftverify.approx.data import PREFIX_KINDS, collect

PREFIX, POSITIONS, TEMPERATURE = 5, 4, 0.7


def test_collect_equal_shares_and_reproducible(tiny):
    target, draft = tiny
    rng = np.random.default_rng(0)
    documents = [rng.integers(0, 30, size=40).tolist() for _ in range(5)]
    data = collect(target, draft, documents, sequences_per_kind=3, prefix_length=5, positions=4, batch_size=2, seed=3)
    assert len(data) == 4 * 3 * 4 and np.bincount(data.kind).tolist() == [12] * len(PREFIX_KINDS)
    assert data.hidden.shape == (48, 16) and len(np.unique(data.group)) == 12
    assert np.all(np.isfinite(data.features(FeatureSpec()))) and np.all(data.ratio > 0)
    again = collect(target, draft, documents, sequences_per_kind=3, prefix_length=5, positions=4, batch_size=2, seed=3)
    np.testing.assert_array_equal(again.ratio, data.ratio)
    with pytest.raises(ValueError, match="no document"):
        collect(target, draft, documents, sequences_per_kind=1, prefix_length=50, positions=4)


def laws(model, sequences: torch.Tensor) -> torch.Tensor:
    """The model's law of each next token, [B, S, V] float64, at TEMPERATURE: one plain forward of
    the transformers model over the whole rows, no cache."""
    with torch.no_grad():
        return torch.softmax(model.model(sequences).logits.double() / TEMPERATURE, -1)


@pytest.fixture(scope="module")
def collected(tiny):
    """One collection with every draw recorded: each batch's scored sequences, and the laws and
    tokens of the draws made while continuing and while scoring it."""
    target, draft = tiny
    rng = np.random.default_rng(1)
    documents = [rng.integers(0, 30, size=30).tolist() for _ in range(4)]
    batches: list[dict] = []
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []
    real_sample, real_score = data_module.sample, data_module._score

    def sample(probs, generator):
        drawn = real_sample(probs, generator)
        pending.append((probs.detach().double().clone(), drawn.clone()))
        return drawn

    def score(draft_, target_, sequences, positions, generator, temperature):
        batches.append(dict(sequences=sequences.clone(), continued=list(pending)))
        pending.clear()
        part = real_score(draft_, target_, sequences, positions, generator, temperature)
        batches[-1]["scored"] = pending.pop()
        return part

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data_module, "sample", sample)
        patch.setattr(data_module, "_score", score)
        data = collect(target, draft, documents, sequences_per_kind=12, prefix_length=PREFIX, positions=POSITIONS,
                       batch_size=6, temperature=TEMPERATURE, seed=2)
    return data, batches, documents


def test_each_kind_continues_its_prefix_from_its_model(tiny, collected):
    """(a) windows of the documents as they are; (b) every continuation token drawn from the draft's
    law of its prefix; (c) from the target's; (d) each from one or the other, about half each."""
    target, draft = tiny
    data, batches, documents = collected
    kinds = [PREFIX_KINDS[k] for k in data.kind[:: 6 * POSITIONS]]  # one kind per batch of 6 sequences
    assert kinds == [kind for kind in PREFIX_KINDS for _ in range(2)]
    from_target = []
    for kind, batch in zip(kinds, batches):
        sequences = batch["sequences"]
        assert sequences.shape == (6, PREFIX + POSITIONS)
        if kind == "original":
            assert batch["continued"] == []
            for row in sequences.tolist():
                assert any(row == doc[i : i + len(row)] for doc in documents for i in range(len(doc))), row
            continue
        assert len(batch["continued"]) == POSITIONS
        target_laws, draft_laws = laws(target, sequences), laws(draft, sequences)
        for j, (probs, drawn) in enumerate(batch["continued"]):
            position = PREFIX + j  # the drawn token's place in the row; its law is read at the slot before
            assert torch.equal(drawn, sequences[:, position])
            is_target = (probs - target_laws[:, position - 1]).abs().amax(-1) < 1e-5
            is_draft = (probs - draft_laws[:, position - 1]).abs().amax(-1) < 1e-5
            assert bool((is_target | is_draft).all()) and not bool((is_target & is_draft).any())
            if kind != "mixed":
                assert bool((is_target if kind == "target" else is_draft).all()), kind
            else:
                from_target += is_target.tolist()
    assert 12 <= sum(from_target) <= 36, sum(from_target)  # 48 tokens, each from the target with 1/2


def test_each_row_is_a_fresh_draft_token_with_its_true_ratio_and_features(tiny, collected):
    """Row (b, p) of a batch: x ~ D(. | the row's first PREFIX + p tokens) (a fresh draw, not the
    row's next token), ratio D(x) / T(x), log D(x), the entropy of D there, and the draft's last
    hidden state at that slot (its output layer gives back D's logits). Tolerances: the engine's
    float32 forward against transformers' own, on rows as peaked as entropy 3e-4."""
    target, draft = tiny
    data, batches, _ = collected
    for index, batch in enumerate(batches):
        rows = slice(index * 6 * POSITIONS, (index + 1) * 6 * POSITIONS)
        sequences = batch["sequences"]
        slots = slice(PREFIX - 1, PREFIX - 1 + POSITIONS)  # the slots whose next token the rows draft
        draft_law = laws(draft, sequences)[:, slots].reshape(-1, 30)
        target_law = laws(target, sequences)[:, slots].reshape(-1, 30)
        probs, drawn = batch["scored"]
        torch.testing.assert_close(probs, draft_law, rtol=1e-5, atol=1e-6)
        x = drawn
        at = torch.arange(len(x))
        np.testing.assert_allclose(data.ratio[rows], (draft_law[at, x] / target_law[at, x]).numpy(), rtol=1e-4)
        np.testing.assert_allclose(data.log_draft_prob[rows], torch.log(draft_law[at, x]).numpy(), atol=1e-5)
        entropy = -(draft_law * torch.log(draft_law)).sum(-1)
        np.testing.assert_allclose(data.entropy[rows], entropy.numpy(), rtol=1e-4, atol=1e-6)
        with torch.no_grad():
            logits = draft.model.lm_head(torch.from_numpy(data.hidden[rows])).double()
        torch.testing.assert_close(torch.softmax(logits / TEMPERATURE, -1), draft_law, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(data.group[rows], np.repeat(np.arange(6 * index, 6 * index + 6), POSITIONS))

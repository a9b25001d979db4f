"""Distilling a draft towards a frozen target by total variation (train/distill.py): the loss, the
held-out probe and three optimizer steps by hand, the gain and the resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.train.distill import DistillConfig, distill_draft, heldout_acceptance, total_variation
from draftverify.train.lm import ModelShape, lr_factor, sample_batch
from draftverify.train.measure import acceptance


def test_total_variation_is_one_minus_the_acceptance_rate():
    generator = torch.Generator().manual_seed(0)
    target_logits, draft_logits = torch.randn(2, 3, 7, generator=generator), torch.randn(2, 3, 7, generator=generator)
    rates = acceptance(torch.softmax(target_logits.double(), -1).reshape(6, 7),
                       torch.softmax(draft_logits.double(), -1).reshape(6, 7))
    assert total_variation(target_logits, draft_logits).item() == pytest.approx(1 - rates.mean().item(), abs=1e-6)
    assert total_variation(target_logits, target_logits).item() == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="shapes differ"):
        total_variation(target_logits, draft_logits[..., :6])


def test_config_validation():
    for bad in (dict(steps=0), dict(context=1), dict(lr=0.0), dict(min_lr_ratio=2.0), dict(warmup=-1)):
        with pytest.raises(ValueError):
            DistillConfig(**bad)


def _models():
    target = ModelShape(1, 16, 2).build(40, 32, 0, seed=0).eval()
    with torch.no_grad():  # a peaked target, far from the near-uniform draft at initialisation
        target.transformer.ln_f.weight.mul_(20.0)
    draft = ModelShape(1, 8, 1).build(40, 32, 0, seed=1)
    return target, draft


def test_distillation_raises_the_acceptance_rate_and_resumes(tmp_path):
    tokens = (np.arange(4000) * 7 % 40).astype(np.uint16)
    target, draft = _models()
    config = DistillConfig(steps=40, batch_size=4, context=16, lr=1e-2, warmup=2, checkpoint_every=20, log_every=20)
    trained, summary = distill_draft(target, draft, tokens, tokens[:200], config, tmp_path, log=lambda _: None)
    assert summary["steps"] == 40 and summary["tokens"] == 40 * 4 * 16
    # the loss is the acceptance rate's complement: forty steps on a fixed target must raise it
    assert summary["heldout_acceptance_after"] > summary["heldout_acceptance_before"] + 0.05
    assert all(not p.requires_grad for p in target.parameters())
    # rerunning finds the finished checkpoint and returns the same weights without training
    again, second = distill_draft(target, _models()[1], tokens, tokens[:200], config, tmp_path, log=lambda _: None)
    for a, b in zip(trained.parameters(), again.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert second["heldout_acceptance_before"] == summary["heldout_acceptance_before"]
    with pytest.raises(ValueError, match="different configuration"):
        distill_draft(target, _models()[1], tokens, tokens[:200], DistillConfig(**{**config.__dict__, "lr": 1e-3}),
                      tmp_path, log=lambda _: None)


def test_heldout_acceptance_is_one_minus_tv_over_consecutive_windows():
    target, draft = _models()
    tokens = (np.arange(100) * 7 % 40).astype(np.int64)
    with torch.no_grad():
        windows = [torch.from_numpy(tokens[i * 16 : (i + 1) * 16])[None] for i in range(3)]
        tv = [total_variation(target(input_ids=w).logits, draft(input_ids=w).logits).item() for w in windows]
    assert heldout_acceptance(target, draft, tokens, 16, 3) == pytest.approx(1 - np.mean(tv), rel=1e-6)
    with pytest.raises(ValueError, match="shorter than 7 windows"):
        heldout_acceptance(target, draft, tokens, 16, 7)


def test_three_distillation_steps_replayed_by_hand(tmp_path):
    """Each step: the (seed, step) batch of context - 1 + 1 tokens, TV to the frozen target's law,
    the gradient reset, clipped at norm 1, the warmup-cosine learning rate, one AdamW step."""
    tokens = (np.arange(4000) * 7 % 40).astype(np.uint16)
    config = DistillConfig(steps=3, batch_size=2, context=12, lr=0.03, warmup=2, min_lr_ratio=0.3, weight_decay=0.05,
                           seed=4, checkpoint_every=10, log_every=10)

    def draft_with_large_gradients():
        draft = _models()[1]
        with torch.no_grad():
            draft.transformer.ln_f.weight.mul_(200.0)  # logits 200 times the hidden state: gradients above 1
        return draft

    target = _models()[0]
    trained, _ = distill_draft(target, draft_with_large_gradients(), tokens, tokens[:200], config, tmp_path,
                               log=lambda _: None)
    draft = draft_with_large_gradients().train()
    optimizer = torch.optim.AdamW(draft.parameters(), lr=0.03, betas=(0.9, 0.95), weight_decay=0.05)
    norms = []
    for step in range(3):
        inputs = sample_batch(tokens, 2, 11, 4, step)  # [2, 12]
        with torch.no_grad():
            target_logits = target(input_ids=inputs).logits
        optimizer.zero_grad()
        total_variation(target_logits, draft(input_ids=inputs).logits).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)))
        for group in optimizer.param_groups:
            group["lr"] = 0.03 * lr_factor(step, 3, 2, 0.3)
        optimizer.step()
    assert min(norms) > 1.5, norms  # the clipping acted at every step
    for a, b in zip(trained.parameters(), draft.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

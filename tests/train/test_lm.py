"""The joint run: its schedule and batches, its three losses and the held-out loss by hand, and
three of its optimizer steps replayed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import torch.nn.functional as F

from draftverify.train.lm import (
    MODEL_NAMES, ModelShape, TrainConfig, _losses, heldout_loss, lr_factor, sample_batch, train_joint,
)


def test_lr_warmup_then_cosine():
    assert lr_factor(0, 100, 10, 0.1) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(10, 100, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, 0.1) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)))
    assert lr_factor(100, 100, 10, 0.1) == pytest.approx(0.1)
    assert lr_factor(500, 100, 10, 0.1) == pytest.approx(0.1)  # never below the floor
    factors = [lr_factor(s, 100, 10, 0.1) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(factors, factors[1:]))


def test_batches_depend_only_on_seed_and_step():
    tokens = np.arange(1000, dtype=np.uint16)
    a, b = sample_batch(tokens, 3, 16, seed=0, step=5), sample_batch(tokens, 3, 16, seed=0, step=5)
    assert a.shape == (3, 17) and a.dtype == torch.int64
    torch.testing.assert_close(a, b)
    assert not torch.equal(a, sample_batch(tokens, 3, 16, seed=0, step=6))
    assert torch.all(a[:, 1:] - a[:, :-1] == 1)  # contiguous windows of the stream
    with pytest.raises(ValueError):
        sample_batch(tokens[:10], 1, 16, seed=0, step=0)


def test_config_validation():
    with pytest.raises(ValueError):
        ModelShape(2, 30, 4)
    with pytest.raises(ValueError):
        TrainConfig(steps=0)
    with pytest.raises(ValueError):
        TrainConfig(minutes=0)
    with pytest.raises(ValueError):
        TrainConfig(min_lr_ratio=1.5)


def test_resume_from_checkpoint_and_refuse_other_configs(tmp_path):
    from draftverify.train.lm import train_joint

    tokens = (np.arange(3000) * 7 % 50).astype(np.uint16)
    config = TrainConfig(target_shape=ModelShape(1, 16, 2), draft_shape=ModelShape(1, 8, 1),
                         drafts=("draft_kd", "draft_ce"), short_context=8, steps=2,
                         batch_size=2, context=16, warmup=1, checkpoint_every=1,
                         log_every=1)
    models, first = train_joint(tokens, tokens[:100], 50, 0, config, tmp_path, log=lambda _: None)
    assert first.steps == 2 and first.resumed_at == ()
    again, second = train_joint(tokens, tokens[:100], 50, 0, config, tmp_path, log=lambda _: None)
    assert second.steps == 2 and second.resumed_at == (2,)
    for name in models:
        for a, b in zip(models[name].parameters(), again[name].parameters()):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    with pytest.raises(ValueError, match="different configuration"):
        train_joint(tokens, tokens[:100], 50, 0, TrainConfig(**{**config.__dict__, "batch_size": 3}),
                    tmp_path, log=lambda _: None)


def test_window_schedule_keeps_tokens_per_step():
    config = TrainConfig(batch_size=4, context=512, short_context=256, long_every=4)
    assert config.window(0) == (4, 512) and config.window(4) == (4, 512)
    assert config.window(1) == config.window(3) == (8, 256)
    assert TrainConfig(short_context=None).window(1) == (4, 512)
    with pytest.raises(ValueError, match="short_context"):
        TrainConfig(context=512, short_context=300)
    with pytest.raises(ValueError, match="long_every"):
        TrainConfig(long_every=0)


def test_drafts_choose_the_trained_models():
    assert TrainConfig().model_names == ("target", "draft_ce")
    assert TrainConfig(drafts=("draft_ce", "draft_kd")).model_names == ("target", "draft_kd",
                                                                        "draft_ce")
    for bad in ((), ("target",), ("draft_xx",)):
        with pytest.raises(ValueError, match="drafts"):
            TrainConfig(drafts=bad)


def tiny_models(names=MODEL_NAMES) -> dict:
    """Models 16 wide over V = 50, context 16, seeded by their index in ``names``."""
    return {name: ModelShape(1, 16, 2).build(50, 16, 0, seed=i) for i, name in enumerate(names)}


def test_the_three_losses_by_hand():
    """Cross-entropy of the next token for the target and draft_ce; KL(target || draft_kd) per
    position against the target's law, averaged over positions."""
    models = tiny_models()
    batch = sample_batch((np.arange(500) * 7 % 50).astype(np.int64), 2, 8, seed=0, step=0)  # [2, 9]
    losses = _losses(models, batch)
    logits = {name: model(input_ids=batch[:, :-1]).logits.double() for name, model in models.items()}  # [2, 8, V]
    labels = batch[:, 1:]

    def cross_entropy(rows):
        return -torch.log_softmax(rows, -1).gather(-1, labels[..., None]).mean()

    target = torch.softmax(logits["target"], -1)
    kl = (target * (torch.log(target) - torch.log_softmax(logits["draft_kd"], -1))).sum(-1).mean()
    for name, expected in (("target", cross_entropy(logits["target"])), ("draft_kd", kl),
                           ("draft_ce", cross_entropy(logits["draft_ce"]))):
        assert losses[name].item() == pytest.approx(expected.item(), rel=1e-5), name
    losses["draft_kd"].backward()  # the target is the teacher here: no gradient reaches it
    assert all(p.grad is None for p in models["target"].parameters())


def test_heldout_loss_scores_consecutive_windows_once_each():
    model = tiny_models(("target",))["target"]
    tokens, context = (np.arange(90) * 11 % 50).astype(np.int64), 16  # 5 whole windows, 9 tokens left over
    total = 0.0
    with torch.no_grad():
        for j in range(5):
            window = torch.from_numpy(tokens[j * context : (j + 1) * context + 1])[None]
            total += F.cross_entropy(model(input_ids=window[:, :-1]).logits[0], window[0, 1:], reduction="sum").item()
    assert heldout_loss(model, tokens, context) == pytest.approx(total / (5 * context), rel=1e-6)
    assert model.training  # left as found
    first_two = heldout_loss(model, tokens, context, max_windows=2)
    assert first_two == pytest.approx(heldout_loss(model, tokens[: 2 * context + 1], context), rel=1e-6)


def test_three_training_steps_replayed_by_hand(tmp_path):
    """Each step: the (seed, step) batch of that step's window, gradients reset, summed losses
    back-propagated, each model's gradient clipped at norm 1, its learning rate at its peak times
    the warmup-cosine factor, one AdamW step."""
    tokens = (np.arange(3000) * 7 % 50).astype(np.uint16)
    config = TrainConfig(target_shape=ModelShape(1, 16, 2), draft_shape=ModelShape(1, 16, 2),
                         drafts=("draft_kd", "draft_ce"), short_context=8, long_every=2, steps=3,
                         batch_size=2, context=16, warmup=2, min_lr_ratio=0.2, target_lr=0.05, draft_lr=0.08,
                         checkpoint_every=10, log_every=10)
    trained, _ = train_joint(tokens, tokens[:100], 50, 0, config, tmp_path, log=lambda _: None)
    models = tiny_models()  # seeded config.seed + the name's index, as train_joint builds them
    peak = {"target": 0.05, "draft_kd": 0.08, "draft_ce": 0.08}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=peak[name], betas=(0.9, 0.95), weight_decay=0.1)
                  for name, m in models.items()}
    norms = []
    for step in range(3):
        batch = sample_batch(tokens, *config.window(step), config.seed, step)
        for optimizer in optimizers.values():
            optimizer.zero_grad()
        sum(_losses(models, batch).values()).backward()
        for name, model in models.items():
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            for group in optimizers[name].param_groups:
                group["lr"] = peak[name] * lr_factor(step, 3, 2, 0.2)
            optimizers[name].step()
    assert max(norms) > 1.5  # the clipping acted
    for name in MODEL_NAMES:
        for a, b in zip(trained[name].parameters(), models[name].parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

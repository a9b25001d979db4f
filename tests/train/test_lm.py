"""The training schedule and batches of the joint run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from draftverify.train.lm import ModelShape, TrainConfig, lr_factor, sample_batch


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

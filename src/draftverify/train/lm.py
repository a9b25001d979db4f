"""Training the transformer target and its drafts together, on one token stream.

One loop trains three GPT-2-architecture models (Radford et al. 2019) on the same batches:

* ``target``: next-token cross-entropy on the data;
* ``draft_kd``: distilled online from the target, loss ``KL(target || draft)`` per position
  against the target's (detached) distribution on the same batch, the forward-KL choice of
  DistillSpec (Zhou et al. 2024, section 3); the target's forward is already paid for;
* ``draft_ce``: the same architecture as ``draft_kd`` trained on the data alone, the control that
  says whether distillation raises the SD acceptance rate (the pipeline ships the better draft).

``TrainConfig.drafts`` chooses which drafts train: the default is ``draft_ce`` alone, because on
this CPU the distilled twin costs 40% of the joint step (its full-vocabulary KL) and lost to
``draft_ce`` on acceptance in the run that shipped before (0.694 against 0.742).
Most steps use ``short_context`` windows (attention is cheaper, 30% more tokens per second here);
every ``long_every``-th step uses full ``context`` windows with the same number of tokens, so
every position embedding the shipped models have is trained.

AdamW, linear warmup then cosine decay to ``min_lr_ratio`` of the peak, gradient clipping at 1.
Batches are windows drawn by a generator seeded with ``(seed, step)``, so a run resumed from a
checkpoint sees the same batches as an uninterrupted one."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

MODEL_NAMES = ("target", "draft_kd", "draft_ce")


@dataclass(frozen=True)
class ModelShape:
    """Size of a GPT-2 model: layers, width, heads (``n_embd`` divisible by ``n_head``)."""

    n_layer: int
    n_embd: int
    n_head: int

    def __post_init__(self) -> None:
        if min(self.n_layer, self.n_embd, self.n_head) < 1 or self.n_embd % self.n_head:
            raise ValueError(f"invalid model shape {self}")

    def build(self, vocab_size: int, context: int, eos_id: int, seed: int):
        """A freshly initialised ``GPT2LMHeadModel`` (tied embeddings, no dropout)."""
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=vocab_size, n_positions=context, n_embd=self.n_embd,
                            n_layer=self.n_layer, n_head=self.n_head, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eos_id,
                            eos_token_id=eos_id, pad_token_id=eos_id)
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config)


@dataclass(frozen=True)
class TrainConfig:
    """Schedule of the joint run. ``steps=None`` fits the step count to about ``minutes`` of wall
    clock: it is estimated after the first warmup steps and re-estimated at every checkpoint from
    the recent step time (the machine is shared, so throughput drifts); the steps actually run are
    recorded in the result."""

    target_shape: ModelShape = ModelShape(6, 256, 4)
    draft_shape: ModelShape = ModelShape(1, 128, 2)
    drafts: tuple[str, ...] = ("draft_ce",)
    steps: int | None = None
    minutes: float = 60.0
    batch_size: int = 4
    context: int = 512
    short_context: int | None = 256
    long_every: int = 4
    target_lr: float = 2e-3
    draft_lr: float = 3e-3
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    seed: int = 0
    checkpoint_every: int = 50
    log_every: int = 10

    def __post_init__(self) -> None:
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.steps is None and not self.minutes > 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes}")
        if self.batch_size < 1 or self.context < 2 or self.warmup < 0:
            raise ValueError("batch_size >= 1, context >= 2 and warmup >= 0 are required")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if not self.drafts or not set(self.drafts) <= set(MODEL_NAMES[1:]):
            raise ValueError(f"drafts must be a non-empty subset of {MODEL_NAMES[1:]}, "
                             f"got {self.drafts}")
        if self.short_context is not None and not (
                2 <= self.short_context <= self.context and self.context % self.short_context == 0):
            raise ValueError(f"short_context must divide context ({self.context}) and be >= 2, "
                             f"got {self.short_context}")
        if self.long_every < 1:
            raise ValueError(f"long_every must be >= 1, got {self.long_every}")

    @property
    def model_names(self) -> tuple[str, ...]:
        """The models this run trains: the target, then the chosen drafts."""
        return ("target",) + tuple(n for n in MODEL_NAMES[1:] if n in self.drafts)

    def window(self, step: int) -> tuple[int, int]:
        """``(rows, length)`` of the batch at ``step``: full-context windows every
        ``long_every``-th step, ``short_context`` windows of the same token count otherwise."""
        if self.short_context is None or step % self.long_every == 0:
            return self.batch_size, self.context
        return self.batch_size * self.context // self.short_context, self.short_context


@dataclass(frozen=True)
class TrainResult:
    """What the joint run did: steps, tokens seen per model, wall-clock seconds, the steps at
    which it was resumed from a checkpoint and the time budgets it ran under."""

    steps: int
    tokens: int
    seconds: float
    final_losses: dict[str, float]
    resumed_at: tuple[int, ...] = ()
    budgets_minutes: tuple[float, ...] = ()


def lr_factor(step: int, total_steps: int, warmup: int, min_lr_ratio: float) -> float:
    """Multiplier of the peak learning rate at ``step``: linear warmup, then cosine decay."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def sample_batch(tokens: np.ndarray, batch_size: int, context: int, seed: int,
                 step: int) -> torch.Tensor:
    """``[B, context + 1]`` int64 windows of ``tokens`` at positions drawn from ``(seed, step)``."""
    if len(tokens) <= context + 1:
        raise ValueError(f"{len(tokens)} tokens are too few for windows of {context + 1}")
    starts = np.random.default_rng([seed, step]).integers(0, len(tokens) - context - 1, batch_size)
    return torch.from_numpy(np.stack([tokens[s:s + context + 1] for s in starts]).astype(np.int64))


def _losses(models: dict, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    inputs, labels = batch[:, :-1], batch[:, 1:]                  # [B, T]
    target_logits = models["target"](input_ids=inputs).logits     # [B, T, V]
    vocab = target_logits.shape[-1]
    losses = {"target": F.cross_entropy(target_logits.reshape(-1, vocab), labels.reshape(-1))}
    if "draft_kd" in models:
        target_logp = F.log_softmax(target_logits.detach(), dim=-1)   # [B, T, V]
        kd_logp = F.log_softmax(models["draft_kd"](input_ids=inputs).logits, dim=-1)
        # KL(target || draft) = sum_x target(x) (log target(x) - log draft(x)), mean over positions
        losses["draft_kd"] = (target_logp.exp() * (target_logp - kd_logp)).sum(-1).mean()
    if "draft_ce" in models:
        ce_logits = models["draft_ce"](input_ids=inputs).logits
        losses["draft_ce"] = F.cross_entropy(ce_logits.reshape(-1, vocab), labels.reshape(-1))
    return losses


@torch.no_grad()
def heldout_loss(model, tokens: np.ndarray, context: int, max_windows: int | None = None) -> float:
    """Mean next-token cross-entropy (nats) of ``model`` over consecutive non-overlapping windows
    of the held-out stream (every token after the first of a window is predicted once)."""
    num = (len(tokens) - 1) // context
    if num < 1:
        raise ValueError(f"held-out stream of {len(tokens)} tokens is shorter than one window")
    num = num if max_windows is None else min(num, max_windows)
    total, count = 0.0, 0
    model.eval()
    for i in range(0, num, 4):
        rows = [tokens[j * context:(j + 1) * context + 1] for j in range(i, min(num, i + 4))]
        batch = torch.from_numpy(np.stack(rows).astype(np.int64))          # [b, T + 1]
        logits = model(input_ids=batch[:, :-1]).logits                     # [b, T, V]
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                 reduction="sum").item()
        count += batch[:, 1:].numel()
    model.train()
    return total / count


def train_joint(train_tokens: np.ndarray, heldout_tokens: np.ndarray, vocab_size: int,
                eos_id: int, config: TrainConfig, workdir: Path,
                log: Callable[[str], None] = print) -> tuple[dict, TrainResult]:
    """Train the target and ``config.drafts``; resume from ``workdir/checkpoint.pt`` if present.

    Returns the models (train mode) and a :class:`TrainResult`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint_path = workdir / "checkpoint.pt"
    shapes = {"target": config.target_shape, "draft_kd": config.draft_shape,
              "draft_ce": config.draft_shape}
    names = config.model_names
    models = {name: shapes[name].build(vocab_size, config.context, eos_id,
                                       config.seed + MODEL_NAMES.index(name))
              for name in names}
    peak = {"target": config.target_lr, "draft_kd": config.draft_lr, "draft_ce": config.draft_lr}
    optimizers = {name: torch.optim.AdamW(models[name].parameters(), lr=peak[name],
                                          betas=(0.9, 0.95), weight_decay=config.weight_decay)
                  for name in names}
    step, total_steps, elapsed = 0, config.steps, 0.0
    resumed_at, budgets = [], [config.minutes]
    if checkpoint_path.exists():
        state = torch.load(checkpoint_path, weights_only=False)
        # the time budget may change on resume (the schedule re-fits at the next checkpoint)
        if {**state["config"], "minutes": config.minutes} != asdict(config):
            raise ValueError(f"{checkpoint_path} was written by a different configuration; "
                             "remove it or pass a fresh --workdir")
        for name in names:
            models[name].load_state_dict(state["models"][name])
            optimizers[name].load_state_dict(state["optimizers"][name])
        step, total_steps, elapsed = state["step"], state["total_steps"], state["seconds"]
        resumed_at = state.get("resumed_at", []) + [step]
        budgets = state.get("budgets_minutes", [state["config"]["minutes"]]) + [config.minutes]
        log(f"resumed from {checkpoint_path} at step {step}/{total_steps}")
    for model in models.values():
        model.train()
    adaptive = config.steps is None
    calibrate_at = max(1, min(3, config.warmup))
    losses: dict[str, torch.Tensor] = {}
    started = time.perf_counter() - elapsed
    window_started, window_step = time.perf_counter(), step
    while total_steps is None or step < total_steps:
        if adaptive and step > window_step and (step == calibrate_at
                                                 or step % config.checkpoint_every == 0):
            # recent seconds per step (step 0 pays one-off costs and is left out)
            per_step = (time.perf_counter() - window_started) / (step - window_step)
            remaining = config.minutes * 60 - (time.perf_counter() - started)
            total_steps = max(step + 1, step + int(remaining / per_step))
            log(f"schedule: {per_step:.2f} s/step -> {total_steps} steps")
            window_started, window_step = time.perf_counter(), step
        if step == 1 and window_step == 0:
            window_started, window_step = time.perf_counter(), 1
        horizon = total_steps if total_steps is not None else 10 ** 9
        factor = lr_factor(step, horizon, config.warmup, config.min_lr_ratio)
        batch = sample_batch(train_tokens, *config.window(step), config.seed, step)
        losses = _losses(models, batch)
        for name in names:
            optimizers[name].zero_grad(set_to_none=True)
        sum(losses.values()).backward()          # the graphs are disjoint (target detached)
        for name in names:
            torch.nn.utils.clip_grad_norm_(models[name].parameters(), 1.0)
            for group in optimizers[name].param_groups:
                group["lr"] = peak[name] * factor
            optimizers[name].step()
        step += 1
        if step % config.log_every == 0 or step == total_steps:
            text = " ".join(f"{n}={v.item():.3f}" for n, v in losses.items())
            log(f"step {step}/{total_steps} lr_factor={factor:.3f} {text} "
                f"elapsed={time.perf_counter() - started:.0f}s")
        if total_steps is not None and (step % config.checkpoint_every == 0 or step == total_steps):
            state = {"config": asdict(config), "step": step, "total_steps": total_steps,
                     "seconds": time.perf_counter() - started, "resumed_at": resumed_at,
                     "budgets_minutes": budgets,
                     "models": {n: m.state_dict() for n, m in models.items()},
                     "optimizers": {n: o.state_dict() for n, o in optimizers.items()}}
            torch.save(state, workdir / "checkpoint.tmp")
            (workdir / "checkpoint.tmp").replace(checkpoint_path)
            probe = heldout_loss(models["target"], heldout_tokens, config.context, max_windows=4)
            log(f"checkpoint at step {step}; target held-out loss (4 windows) {probe:.3f}")
    seconds = time.perf_counter() - started
    result = TrainResult(steps=step, tokens=step * config.batch_size * config.context,
                         seconds=seconds, final_losses={n: v.item() for n, v in losses.items()},
                         resumed_at=tuple(resumed_at), budgets_minutes=tuple(budgets))
    return models, result

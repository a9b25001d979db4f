"""Distilling a trained draft towards a frozen target, for the acceptance rate itself.

At temperature 1 a drafted token is accepted with probability ``1 - TV(target, draft)`` (Leviathan
et al. 2023, theorem 3.5), so the loss here is the total variation distance between the target's
and the draft's next-token distributions, averaged over the positions of training windows:
``TV = 1/2 sum_x |target(x) - draft(x)|``. DistillSpec (Zhou et al. 2024, section 3 and
its table of divergences) shows that TVD is the divergence whose minimiser maximises that
acceptance rate; we use its off-policy variant (windows of the training stream, not draft-generated
sequences, which would cost a decode per batch on this CPU). The draft starts from its
cross-entropy-trained weights, the target is frozen and run without gradients. The held-out
probe logs ``1 - TV`` under teacher forcing, the training signal's own scale.

AdamW, linear warmup then cosine decay (:func:`~draftverify.train.lm.lr_factor`), gradient
clipping at 1; batches come from :func:`~draftverify.train.lm.sample_batch` seeded by
``(seed, step)``, so a run resumed from its checkpoint sees the batches an uninterrupted one
would."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .. import formulas
from .lm import lr_factor, sample_batch


@dataclass(frozen=True)
class DistillConfig:
    """A fixed number of distillation steps of ``batch_size`` windows of ``context`` tokens."""

    steps: int = 1000
    batch_size: int = 8
    context: int = 256
    lr: float = 1e-3
    warmup: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    seed: int = 0
    checkpoint_every: int = 50
    log_every: int = 10

    def __post_init__(self) -> None:
        if min(self.steps, self.batch_size, self.checkpoint_every, self.log_every) < 1:
            raise ValueError("steps, batch_size, checkpoint_every and log_every must be >= 1")
        if self.context < 2 or self.warmup < 0 or not self.lr > 0:
            raise ValueError("context >= 2, warmup >= 0 and lr > 0 are required")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")


def total_variation(target_logits: torch.Tensor, draft_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of ``TV(softmax(target_logits), softmax(draft_logits))``; logits are
    ``[..., V]``. ``1 -`` this is the mean SD acceptance probability at temperature 1."""
    if target_logits.shape != draft_logits.shape:
        raise ValueError(f"shapes differ: {tuple(target_logits.shape)} vs "
                         f"{tuple(draft_logits.shape)}")
    return formulas.total_variation(F.softmax(target_logits.float(), dim=-1), F.softmax(draft_logits.float(), dim=-1)).mean()


@torch.no_grad()
def heldout_acceptance(target, draft, tokens: np.ndarray, context: int, windows: int) -> float:
    """``1 - TV`` averaged over every position of the first ``windows`` consecutive held-out
    windows of ``context`` tokens (teacher forcing)."""
    rows = [tokens[i * context:(i + 1) * context] for i in range(windows)]
    if len(rows[-1]) < context:
        raise ValueError(f"held-out stream of {len(tokens)} tokens is shorter than {windows} "
                         f"windows of {context}")
    total = 0.0
    for row in rows:
        ids = torch.from_numpy(np.asarray(row, dtype=np.int64))[None]
        total += total_variation(target(input_ids=ids).logits, draft(input_ids=ids).logits).item()
    return 1.0 - total / len(rows)


def distill_draft(target, draft, train_tokens: np.ndarray, heldout_tokens: np.ndarray,
                  config: DistillConfig, workdir: Path,
                  log: Callable[[str], None] = print) -> tuple[object, dict]:
    """Train ``draft`` (in place) to minimise the TV distance to the frozen ``target``; resume
    from ``workdir/checkpoint.pt`` if present. Returns the draft (eval mode) and a summary:
    steps, tokens, seconds, held-out acceptance (teacher forced, 8 windows) before and after."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint_path = workdir / "checkpoint.pt"
    target.eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=config.lr, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    step, elapsed, before = 0, 0.0, None
    if checkpoint_path.exists():
        state = torch.load(checkpoint_path, weights_only=False)
        if state["config"] != asdict(config):
            raise ValueError(f"{checkpoint_path} was written by a different configuration; "
                             "remove it or pass a fresh --workdir")
        draft.load_state_dict(state["draft"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed, before = state["step"], state["seconds"], state["before"]
        log(f"distill: resumed from {checkpoint_path} at step {step}/{config.steps}")
    if before is None:
        before = heldout_acceptance(target, draft.eval(), heldout_tokens, config.context, 8)
        log(f"distill: held-out acceptance before {before:.4f}")
    draft.train()
    started = time.perf_counter() - elapsed
    while step < config.steps:
        factor = lr_factor(step, config.steps, config.warmup, config.min_lr_ratio)
        inputs = sample_batch(train_tokens, config.batch_size, config.context - 1, config.seed,
                              step)
        with torch.no_grad():
            target_logits = target(input_ids=inputs).logits
        loss = total_variation(target_logits, draft(input_ids=inputs).logits)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = config.lr * factor
        optimizer.step()
        step += 1
        if step % config.log_every == 0 or step == config.steps:
            log(f"distill step {step}/{config.steps} lr_factor={factor:.3f} "
                f"tv={loss.item():.4f} elapsed={time.perf_counter() - started:.0f}s")
        if step % config.checkpoint_every == 0 or step == config.steps:
            state = {"config": asdict(config), "step": step, "before": before,
                     "seconds": time.perf_counter() - started, "draft": draft.state_dict(),
                     "optimizer": optimizer.state_dict()}
            torch.save(state, workdir / "checkpoint.tmp")
            (workdir / "checkpoint.tmp").replace(checkpoint_path)
            probe = heldout_acceptance(target, draft.eval(), heldout_tokens, config.context, 2)
            draft.train()
            log(f"distill checkpoint at step {step}; held-out acceptance (2 windows) {probe:.4f}")
    draft.eval()
    after = heldout_acceptance(target, draft, heldout_tokens, config.context, 8)
    log(f"distill: held-out acceptance after {after:.4f} (before {before:.4f})")
    return draft, {"steps": step, "tokens": step * config.batch_size * config.context,
                   "seconds": time.perf_counter() - started, "heldout_acceptance_before": before,
                   "heldout_acceptance_after": after}

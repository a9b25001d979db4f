"""A small Llama draft for a real target, distilled on the target's own answers.

The draft shares the target's tokenizer and vocabulary (49152 for SmolLM2) with a tied embedding
of width ``hidden``: its output layer is most of a draft step's cost, so the width sets ``c``, the
draft step's cost as a fraction of a target call (seed 002's ``c``). It starts from the target:
the embedding is the target's tied embedding projected on its ``hidden`` leading principal
directions, so the draft's first logits already rank tokens as the target's embedding geometry
does. Training data comes from :mod:`.teacher`: the target's sampled answers with the top-k of the
distribution each answer token was drawn from.

Loss per answer position, with ``T_k`` the teacher's top-k probabilities, ``r = 1 - sum_k T_k`` the
rest of its mass, and ``D`` the draft's distribution: cross-entropy against the teacher with the
rest as one bucket, ``-sum_k T_k log D_k - r log(1 - sum_k D_k)``, plus the total variation over the
same buckets, ``1/2 (sum_k |T_k - D_k| + |r - (1 - sum_k D_k)|)``. At temperature 1 a drafted token
is accepted with probability ``1 - TV(T, D)`` (Leviathan et al. 2023, theorem 3.5) and DistillSpec
(Zhou et al. 2024) finds TV the divergence whose minimiser maximises it; the cross-entropy term
keeps gradients on tokens the draft gives almost nothing."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from ..formulas import overlap

__all__ = ["DraftConfig", "distill_draft", "draft_model", "load_shards", "shard_rows", "resume", "save_checkpoint", "set_learning_rate",
           "subset_losses", "teacher_batch"]


@dataclass(frozen=True)
class DraftConfig:
    """Shape of the draft and its training schedule."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 30
    steps: int = 2000
    seed: int = 0
    checkpoint_every: int = 25

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must be a multiple of heads, and heads of kv_heads")
        if min(self.hidden, self.layers, self.batch_size, self.steps, self.checkpoint_every) < 1 or not self.lr > 0:
            raise ValueError("sizes, steps and lr must be positive")


def draft_model(target, config: DraftConfig):
    """A ``LlamaForCausalLM`` draft for ``target`` (a transformers Llama), initialised from it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    t = target.config
    draft_config = LlamaConfig(
        vocab_size=t.vocab_size, hidden_size=config.hidden, intermediate_size=config.intermediate,
        num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.kv_heads,
        head_dim=config.hidden // config.heads, max_position_embeddings=t.max_position_embeddings,
        rms_norm_eps=t.rms_norm_eps, rope_parameters=dict(t.rope_parameters), tie_word_embeddings=True,
        bos_token_id=t.bos_token_id, eos_token_id=t.eos_token_id, pad_token_id=t.pad_token_id,
    )
    torch.manual_seed(config.seed)
    draft = LlamaForCausalLM(draft_config).to(torch.float32)
    with torch.no_grad():
        embedding = target.get_input_embeddings().weight.float()  # [V, E]
        _, _, directions = torch.linalg.svd(embedding - embedding.mean(0), full_matrices=False)  # [E, E]
        projected = embedding @ directions[: config.hidden].T  # [V, hidden]
        draft.get_input_embeddings().weight.copy_(projected)  # dot products of the target's embedding, in its leading subspace
    return draft


def shard_rows(paths: Iterable[Path]) -> Iterator[tuple[np.ndarray, int, np.ndarray, np.ndarray]]:
    """Every answered prompt of the teacher shards ``paths``, each shard's arrays read once: (prompt
    and answer tokens, answer start, top ids [A, k], top probabilities [A, k] float32)."""
    for path in paths:
        with np.load(path) as data:
            tokens, starts, lengths = data["tokens"], data["answer_start"], data["answer_length"]
            top_ids, top_probs = data["top_ids"], data["top_probs"]
        for b, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
            yield tokens[b, : start + length], start, top_ids[b, :length], top_probs[b, :length].astype(np.float32)


def load_shards(folder: Path, pattern: str = "shard-*.npz") -> list[tuple[np.ndarray, int, np.ndarray, np.ndarray]]:
    """Every answered prompt of the teacher shards in ``folder`` (those matching ``pattern``), as
    :func:`shard_rows` gives them."""
    rows = list(shard_rows(sorted(Path(folder).glob(pattern))))
    if not rows:
        raise FileNotFoundError(f"{folder}: no teacher shards (shard-*.npz)")
    return rows


def teacher_batch(rows, indices: list[int]):
    """Rows ``indices`` of :func:`load_shards` rows (or rows that extend them): right-padded tokens
    [B, S], the positions (b, j) that predict answer tokens [N, 2], and the teacher's top-k ids and
    probabilities at those positions [N, k]."""
    width = max(len(rows[i][0]) for i in indices)
    tokens = torch.zeros(len(indices), width, dtype=torch.int64)
    where, ids, probs = [], [], []
    for b, i in enumerate(indices):
        seq, start, top_ids, top_probs = rows[i][:4]
        tokens[b, : len(seq)] = torch.from_numpy(seq.astype(np.int64))
        positions = torch.arange(start - 1, start - 1 + len(top_ids))  # the position before each answer token
        where.append(torch.stack([torch.full_like(positions, b), positions], 1))
        ids.append(torch.from_numpy(top_ids.astype(np.int64)))
        probs.append(torch.from_numpy(top_probs))
    return tokens, torch.cat(where), torch.cat(ids), torch.cat(probs)


def subset_losses(draft_logits: torch.Tensor, target_probs: torch.Tensor, bucket: int = 0):
    """(cross-entropy, total variation), each a mean over positions, of a draft whose law lives on a
    subset of the vocabulary (``draft_logits`` [N, n]) against the target's exact probabilities of
    those n tokens (``target_probs`` [N, n], summing to at most 1). The variation is exact and counts
    the target's mass outside the subset, which no such draft reaches, so that 1 - variation is the
    acceptance sum_x min(T(x), D(x)). The cross-entropy reads the target's ``bucket`` most probable
    tokens of the subset and the rest of both masses as one bucket (:func:`bucket_losses`), or with
    ``bucket`` 0 all n tokens (the mass outside the subset, a constant there, left out)."""
    log_draft = torch.log_softmax(draft_logits, -1)
    variation = 1 - overlap(target_probs, log_draft.exp()).mean()
    if bucket:
        top = torch.topk(target_probs, bucket, -1)
        return bucket_losses(draft_logits, top.indices, top.values)[0], variation
    return -(target_probs * log_draft).sum(1).mean(), variation


def bucket_losses(draft_logits: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor):
    """(cross-entropy, total variation), each a mean over positions, of the draft against the
    teacher's top-k with the rest of both masses as one bucket (module doc). Shapes: draft_logits
    [N, V], top_ids and top_probs [N, k]."""
    log_draft = torch.log_softmax(draft_logits, -1).gather(1, top_ids)  # [N, k]
    draft_top = log_draft.exp()
    draft_rest = (1 - draft_top.sum(1)).clamp(min=1e-12)  # [N]
    teacher_rest = (1 - top_probs.sum(1)).clamp(min=0)
    cross_entropy = -(top_probs * log_draft).sum(1) - teacher_rest * draft_rest.log()
    variation = 0.5 * ((top_probs - draft_top).abs().sum(1) + (teacher_rest - draft_rest).abs())
    return cross_entropy.mean(), variation.mean()


def distill_draft(draft, rows, config: DraftConfig, workdir: Path, log: Callable[[str], None] = print,
                  deadline: float | None = None) -> dict:
    """Train ``draft`` on teacher ``rows`` (:func:`load_shards`), resuming from ``workdir/checkpoint.pt``;
    stops after ``config.steps`` or at ``deadline``. Returns the last logged figures."""
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = workdir / "checkpoint.pt"
    optimizer = torch.optim.AdamW(draft.parameters(), lr=config.lr, weight_decay=0.0, betas=(0.9, 0.98))
    step = resume(checkpoint, draft, optimizer, log)
    draft.train()
    figures: dict = {"step": step}  # a run resumed at its last step trains no more
    began = time.time()
    while step < config.steps and (deadline is None or time.time() < deadline):
        order = np.random.default_rng(config.seed * 100_003 + step).choice(len(rows), config.batch_size, replace=False)
        tokens, where, top_ids, top_probs = teacher_batch(rows, order.tolist())
        set_learning_rate(optimizer, config.lr, step, config.warmup, config.steps)
        hidden = draft.model(input_ids=tokens).last_hidden_state  # [B, S, hidden]
        logits = draft.lm_head(hidden[where[:, 0], where[:, 1]])  # [N, V]: answer positions only
        cross_entropy, variation = bucket_losses(logits, top_ids, top_probs)
        optimizer.zero_grad(set_to_none=True)
        (cross_entropy + variation).backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        optimizer.step()
        step += 1
        figures = {"step": step, "cross_entropy": cross_entropy.item(), "acceptance_bound": 1 - variation.item(),
                   "positions": int(len(where)), "seconds": round(time.time() - began)}
        if step % 5 == 0:
            log(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
        if step % config.checkpoint_every == 0:
            save_checkpoint(checkpoint, draft, optimizer, step, config)
    save_checkpoint(checkpoint, draft, optimizer, step, config)
    draft.eval()
    return figures


def resume(checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, log: Callable[[str], None]) -> int:
    """Load ``model`` and ``optimizer`` from ``checkpoint`` when it exists; the step to go on from."""
    if not checkpoint.exists():
        return 0
    state = torch.load(checkpoint, weights_only=False)
    model.load_state_dict(state["model"]), optimizer.load_state_dict(state["optimizer"])
    log(f"resumed at step {state['step']}")
    return state["step"]


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float, step: int, warmup: int, steps: int) -> None:
    """Linear warmup over ``warmup`` steps (0: none), then a cosine from ``lr`` to 0.1 ``lr`` at ``steps``."""
    factor = min(1.0, (step + 1) / max(warmup, 1)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
    for group in optimizer.param_groups:
        group["lr"] = lr * factor


def save_checkpoint(checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    config: object) -> None:
    """Model, optimizer, step and the settings dataclass ``config``, written atomically."""
    partial = checkpoint.with_suffix(".partial")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "config": asdict(config)}, partial)
    partial.replace(checkpoint)

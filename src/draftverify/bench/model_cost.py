"""Per-call cost of the models the engine calls: the target scoring L + 1 tokens against one token,
and one draft step against one target token (the draft/target cost ratio c of seed 002's speedup
formula), for each KV cache backend, interleaved in one run.

Each call is timed as the engine makes it, cache upkeep included: a one-token forward then the crop
back to the same length (``ar``, and a draft step); ``score_drafts`` of the pending token plus L
drafted tokens, ``keep_draft`` with ``accepted`` tokens, and the crop back (a speculative step). The
cache holds the prompt and stays at that length, so every repeat sees the same work. Variants take
turns call by call, so load drifts hit all alike; medians over ``--repeats``.
Goals (issue 13): target call of L + 1 = 5 tokens <= 1.3x a one-token call; c <= 0.12.

Run: ``draftverify bench model-cost`` (JSON then a table).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..models.base import LanguageModel
from .output import emit_json
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["call_costs", "ratios", "run"]

KV_CACHES = ("dynamic", "static")


def _one_token(model: LanguageModel, cache: Any, generator: torch.Generator) -> Callable[[], None]:
    def call() -> None:  # one token on each of the cache's rows
        model.forward(cache, torch.randint(0, model.vocab_size, (cache.batch_size, 1), generator=generator), None, 1)
        model.crop(cache, model.lengths(cache) - 1)

    return call


def _draft_phase(model: LanguageModel, cache: Any, generator: torch.Generator, length: int) -> Callable[[], None]:
    def call() -> None:  # L one-token forwards on each row, then one crop back (the engine's draft phase)
        for _ in range(length):
            model.forward(cache, torch.randint(0, model.vocab_size, (cache.batch_size, 1), generator=generator), None, 1)
        model.crop(cache, model.lengths(cache) - length)

    return call


def _score(model: LanguageModel, cache: Any, generator: torch.Generator, length: int, accepted: int,
           num_drafts: int) -> Callable[[], None]:
    def call() -> None:
        pending = torch.randint(0, model.vocab_size, (1, 1), generator=generator)  # [B=1, m=1]
        drafts = torch.randint(0, model.vocab_size, (1, num_drafts, length), generator=generator)  # [B=1, K, L]
        model.score_drafts(cache, pending, None, drafts)
        model.keep_draft(cache, torch.tensor([0]), torch.tensor([accepted]))
        model.crop(cache, model.lengths(cache) - 1 - accepted)

    return call


def call_costs(variants: dict[str, tuple[LanguageModel, LanguageModel]], prompt: list[int], *, repeats: int,
               draft_length: int, accepted: int, num_drafts: int = 1, seed: int = 0,
               progress: Progress | None = None) -> dict[str, dict[str, float]]:
    """Median seconds per call of each kind (``target_1``, ``target_{L+1}``, ``draft_1``, and
    ``draft_phase_{L}``: L draft forwards then one crop, as a step drafts) for each
    variant (name -> (target, draft)), calls interleaved across variants and kinds; ``progress``
    (see :mod:`.progress`) follows the rounds. With K = ``num_drafts`` > 1 the target scores K
    drafts of L tokens and a draft step runs on K rows, as the engine's step does."""
    generator = torch.Generator().manual_seed(seed)
    calls: dict[tuple[str, str], Callable[[], None]] = {}
    score_kind = f"target_{draft_length + 1}"
    for name, (target, draft) in variants.items():
        caches = {}
        for role, model in (("target", target), ("draft", draft)):
            caches[role] = model.new_cache(1)
            model.forward(caches[role], torch.tensor([prompt]), None, 1)
        draft.reindex(caches["draft"], [0] * num_drafts)  # the engine's K draft rows
        calls[name, "target_1"] = _one_token(target, caches["target"], generator)
        calls[name, score_kind] = _score(target, caches["target"], generator, draft_length, accepted, num_drafts)
        calls[name, "draft_1"] = _one_token(draft, caches["draft"], generator)
        calls[name, f"draft_phase_{draft_length}"] = _draft_phase(draft, caches["draft"], generator, draft_length)
    for call in calls.values():  # warm-up
        for _ in range(5):
            call()
    seconds: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in track(progress, range(repeats), "timed rounds"):
        for key, call in calls.items():
            start = time.perf_counter()
            call()
            seconds[key].append(time.perf_counter() - start)
    out: dict[str, dict[str, float]] = {}
    for (name, kind), values in seconds.items():
        out.setdefault(name, {})[kind] = statistics.median(values)
    return out


def ratios(costs: dict[str, float], draft_length: int) -> dict[str, float]:
    """The issue's two ratios from one variant's median costs."""
    one = costs["target_1"]
    return {"score_vs_one_token": costs[f"target_{draft_length + 1}"] / one, "draft_cost_c": costs["draft_1"] / one}


def run(args: argparse.Namespace, progress: Progress | None = None) -> int:
    from transformers.utils import logging as hf_logging

    from ..models.hf import TransformersModel
    from ..models.pair import load_pair

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    pair = load_pair()
    variants = {
        kv: (TransformersModel(pair.target.model, pair.tokenizer, kv_cache=kv),
             TransformersModel(pair.draft.model, kv_cache=kv))
        for kv in KV_CACHES
    }
    prompt = torch.randint(0, pair.target.vocab_size, (args.prompt_length,),
                           generator=torch.Generator().manual_seed(1)).tolist()
    costs = call_costs(variants, prompt, repeats=args.repeats, draft_length=args.draft_length, accepted=args.accepted,
                       progress=progress)
    rows = [dict(variant=name, **{f"{k}_ms": v * 1e3 for k, v in c.items()}, **ratios(c, args.draft_length))
            for name, c in costs.items()]
    report = dict(settings=dict(repeats=args.repeats, prompt_length=args.prompt_length, draft_length=args.draft_length,
                                accepted=args.accepted, threads=torch.get_num_threads()),
                  goals=dict(score_vs_one_token=1.3, draft_cost_c=0.12), variants=rows)
    emit_json(report, args.json)
    score = f"target_{args.draft_length + 1}_ms"
    print(f"\n{'variant':>8}  {'target 1 ms':>11}  {score.replace('_', ' '):>11}  {'draft 1 ms':>10}  "
          f"{'score/one':>9}  {'c':>6}")
    for r in rows:
        print(f"{r['variant']:>8}  {r['target_1_ms']:11.3f}  {r[score]:11.3f}  {r['draft_1_ms']:10.3f}  "
              f"{r['score_vs_one_token']:9.2f}  {r['draft_cost_c']:6.3f}")
    return 0


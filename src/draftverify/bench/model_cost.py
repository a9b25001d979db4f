"""Per-call cost of the models the engine calls: the target scoring L + 1 tokens against one token
(r), and one draft step against one target token (the draft/target cost ratio c of seed 002's
speedup formula), for each matrix kernel of the lean forwards (the panel kernel in float32 and
int8, its GGUF block product where the target's weights are GGML blocks, torch's eager kernels),
interleaved in one run; and the one-token call's weight stream in
bytes per second against a copy bandwidth measured in the same run.

Each call is timed as the engine makes it, cache upkeep included: a one-token forward then the crop
back to the same length (``ar``, on a cache that keeps no hidden states for a draft); a draft
phase of L tokens as the decoder drafts them (a draft with a compiled block,
:meth:`~draftverify.models.base.LanguageModel.sample_block`, in that block at temperature 1, its
draws included; else L one-token forwards), then the crop back, a draft step being the phase of one
token; ``score_drafts`` of the pending token plus L
drafted tokens, ``keep_draft`` with ``accepted`` tokens, and the crop back (a speculative step). The
cache holds the prompt and stays at that length, so every repeat sees the same work. Variants take
turns call by call, so load drifts hit all alike; medians (or ``--statistic min``) over ``--repeats``,
on the wall clock or (``--clock cpu``, one thread) the thread's CPU clock (:mod:`.panel_mm`). A speculative step
keeps ``--accepted`` drafted tokens. The bytes a one-token call streams are its linear and output
layers' weights as the kernel stores them (int8: a quarter; GGUF blocks: 5 / 32 in the linear
layers, 8.5 / 32 in the output layer), attention's cache and the norms left out.
Goals (issue 27, real target, one thread): r(5) <= 1.2, r(9) <= 1.4, r(17) <= 2.0; the one-token
call at >= 85% of the copy bandwidth (issue 13: c <= 0.12).

The floor of r from arithmetic, for the variants whose products are float32 multiply-adds (all but
the 8-bit activation blocks): an n-token call makes n multiply-adds per weight of its linear and
output layers (W a token), so it takes at least 2 n W / F seconds, F the float32 FLOP/s this thread
sustains in registers (:func:`~draftverify.models.panel_mm.fma_peak`, measured in the same run); and
it streams the one-token call's weights. So r(n) >= max(1, 2 n W / (F t_1)) with t_1 the one-token
call's measured time: the cheaper the one-token call (the closer to the copy bandwidth), the higher
the floor.

Run: ``draftverify bench model-cost`` (JSON then a table).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..models.base import LanguageModel
from ..models.feature_draft import FeatureDraft
from ..models.ggml_blocks import NotBlocks, int8_activations_compiled, int8_activations_isa
from ..models.hf import TransformersModel
from ..models.panel_mm import fma_peak, kernel
from ..tables import table_of
from .output import emit_json
from .panel_mm import CLOCKS, STATISTICS, copy_bandwidth
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["ModelCostSettings", "call_costs", "multiply_adds", "r_floor", "ratios", "run"]

FLOAT32_ARITHMETIC = ("eager", "panel_avx2", "panel_avx2_int8", "panel_avx512", "panel_avx512_int8", "panel_avx512_gguf")


@dataclass(frozen=True)
class ModelCostSettings:
    """What ``draftverify bench model-cost`` times, as its flags of the same names give it (the
    defaults are the command's)."""

    repeats: int = 200
    prompt_length: int = 150
    draft_length: tuple[int, ...] = (1, 4, 8, 16)
    accepted: int = 1
    threads: int = 1
    target: str | None = None
    draft: str | None = None
    kv_cache: str = "static"
    statistic: str = "median"
    clock: str = "wall"
    json: str | None = None


def _one_token(model: LanguageModel, cache: Any, generator: torch.Generator) -> Callable[[], None]:
    def call() -> None:  # one token on each of the cache's rows (logits over its support, as the engine drafts)
        model.forward(cache, torch.randint(0, model.vocab_size, (cache.batch_size, 1), generator=generator), None, 1,
                      on_support=True)
        model.crop(cache, model.lengths(cache) - 1)

    return call


def _draft_phase(model: LanguageModel, cache: Any, generator: torch.Generator, length: int) -> Callable[[], None]:
    def call() -> None:  # the engine's draft phase of L tokens on each row, then one crop back
        chunk = torch.randint(0, model.vocab_size, (cache.batch_size, 1), generator=generator)
        # a draft with a compiled block drafts in it, draws included, as the decoder's draft_block does at
        # temperature 1 (before 2026-11-30 this timed L Python forwards: the feature draft's c read 0.050
        # where the engine's block costs 0.024, and tune priced every L at that cost)
        if model.sample_block(cache, chunk, length, 1.0, generator) is None:
            model.forward(cache, chunk, None, 1, on_support=True)
            for _ in range(length - 1):
                model.forward(cache, torch.randint(0, model.vocab_size, (cache.batch_size, 1), generator=generator),
                              None, 1, on_support=True)
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


def call_costs(variants: dict[str, tuple[LanguageModel, LanguageModel | None]], prompt: list[int], *, repeats: int,
               draft_lengths: list[int], accepted: int, num_drafts: int = 1, seed: int = 0,
               statistic: str = "median", clock: str = "wall",
               progress: Progress | None = None) -> dict[str, dict[str, float]]:
    """Seconds per call (``statistic`` of the repeats: median or min, on ``clock``) of each kind (``target_1``, ``target_{L+1}`` for each L, and when the
    variant has a draft ``draft_1`` and ``draft_phase_{L}``: a draft phase of 1 and of L tokens then one
    crop, as the decoder drafts: module doc) for each variant (name -> (target, draft or None)), calls interleaved across variants and
    kinds; ``progress`` (see :mod:`.progress`) follows the rounds. With K = ``num_drafts`` > 1 the
    target scores K drafts of L tokens and a draft step runs on K rows, as the engine's step does."""
    if accepted > min(draft_lengths):
        raise ValueError(f"accepted must be <= every draft_length, got {accepted} > {min(draft_lengths)}")
    generator = torch.Generator().manual_seed(seed)
    now = CLOCKS[clock]
    calls: dict[tuple[str, str], Callable[[], None]] = {}
    for name, (target, draft) in variants.items():
        caches = {}
        reads = draft is not None and draft.reads_target  # as the decoder: the target's states kept where a draft reads them
        for role, model in (("target", target), ("draft", draft)):
            if model is not None:
                caches[role] = model.new_cache(1, caches.get("target"), features=reads)  # a feature draft reads the target's
                model.forward(caches[role], torch.tensor([prompt]), None, 1)
        if reads:  # ar's cache keeps none
            caches["ar"] = target.new_cache(1, features=False)
            target.forward(caches["ar"], torch.tensor([prompt]), None, 1)
        calls[name, "target_1"] = _one_token(target, caches.get("ar", caches["target"]), generator)
        for length in draft_lengths:
            calls[name, f"target_{length + 1}"] = _score(target, caches["target"], generator, length, accepted, num_drafts)
        if draft is not None:
            draft.reindex(caches["draft"], [0] * num_drafts)  # the engine's K draft rows
            calls[name, "draft_1"] = _draft_phase(draft, caches["draft"], generator, 1)  # one draft step: c
            for length in draft_lengths:
                calls[name, f"draft_phase_{length}"] = _draft_phase(draft, caches["draft"], generator, length)
    for call in calls.values():  # warm-up
        for _ in range(5):
            call()
    seconds: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in track(progress, range(repeats), "timed rounds"):
        for key, call in calls.items():
            start = now()
            call()
            seconds[key].append(now() - start)
    out: dict[str, dict[str, float]] = {}
    for (name, kind), values in seconds.items():
        out.setdefault(name, {})[kind] = STATISTICS[statistic](values)
    return out


def ratios(costs: dict[str, float]) -> dict[str, float]:
    """r(L + 1) of every scoring call (``r_5``: five tokens against one) and c (when a draft ran)
    from one variant's median costs."""
    one = costs["target_1"]
    out = {f"r_{kind.split('_')[1]}": value / one for kind, value in costs.items()
           if kind.startswith("target_") and kind != "target_1"}
    if "draft_1" in costs:
        out["draft_cost_c"] = costs["draft_1"] / one
    return out


def multiply_adds(model: torch.nn.Module) -> int:
    """Multiply-adds one token makes in a model's linear and output layers: the weights of its
    ``nn.Linear`` modules (a tied output layer counted once as the layer it is)."""
    return sum(module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear))


def r_floor(tokens: int, weights: int, flops: float, one_token_seconds: float) -> float:
    """The least r(tokens) float32 arithmetic allows (module doc): max(1, 2 n W / (F t_1))."""
    if min(tokens, weights) < 1 or flops <= 0 or one_token_seconds <= 0:
        raise ValueError(f"tokens and weights must be >= 1 and flops, one_token_seconds > 0, got "
                         f"{tokens}, {weights}, {flops}, {one_token_seconds}")
    return max(1.0, 2 * tokens * weights / (flops * one_token_seconds))


def _variants(model: Any, tokenizer: Any, draft: LanguageModel | None,
              kv_cache: str) -> tuple[dict[str, tuple[TransformersModel, LanguageModel | None]], dict[str, str]]:
    """The target model under each matrix kernel (the panel kernel, float32 and int8, where it runs;
    its GGUF block product where the weights are GGML blocks and the CPU has AVX-512, and those blocks
    times 8-bit activations where that product runs compiled, named by its instruction set (VNNI:
    avx512, else avx2): :mod:`~draftverify.models.ggml_blocks`),
    and the variants left out with the reason."""
    kinds = {"eager": dict(kernel="eager")}
    for isa in kernel().isas:  # each instruction set the CPU runs
        kinds |= {f"panel_{isa}": dict(kernel=f"panel-{isa}"), f"panel_{isa}_int8": dict(kernel=f"panel-{isa}", quantize="int8")}
    variants = {name: (TransformersModel(model, tokenizer, kv_cache=kv_cache, **options), draft)
                for name, options in kinds.items()}
    left_out = {}
    blocks = {}
    if "avx512" in kernel().isas:
        blocks["panel_avx512_gguf"] = "gguf"
    else:
        left_out["panel_avx512_gguf"] = "the GGUF block product runs on AVX-512 CPUs only"
    if int8_activations_compiled():
        blocks[f"panel_{int8_activations_isa()}_gguf_q8"] = "gguf-q8"
    else:
        left_out["panel_avx2_gguf_q8"] = "the 8-bit activation block product runs compiled on AVX2 with F16C or AVX-512 VNNI CPUs only"
    for name, quantize in blocks.items():
        try:
            variants[name] = (TransformersModel(model, tokenizer, kv_cache=kv_cache, quantize=quantize), draft)
        except NotBlocks as error:  # a target not converted from a GGUF file of Q4_1 / Q8_0 blocks
            left_out[name] = str(error)
    if isinstance(draft, FeatureDraft):  # every target variant keeps the hidden states (and streams) the draft reads
        for target, _ in variants.values():
            target.keep_features(draft.head_module.fusion)
    return variants, left_out


def run(args: ModelCostSettings, progress: Progress | None = None) -> int:
    from transformers.utils import logging as hf_logging

    from ..models.pair import load_draft, load_pair

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    status = kernel()
    if args.target is None:
        pair = load_pair(None, args.draft)
        target, draft = pair.target, pair.draft
    else:  # another target: a draft only when one is named
        target = TransformersModel.from_pretrained(args.target, kv_cache="dynamic", kernel="eager")
        draft = None if args.draft is None else load_draft(args.draft, target)
    variants, left_out = _variants(target.model, target.tokenizer, draft, args.kv_cache)
    prompt = torch.randint(0, target.vocab_size, (args.prompt_length,),
                           generator=torch.Generator().manual_seed(1)).tolist()
    before = copy_bandwidth(clock=args.clock)
    costs = call_costs(variants, prompt, repeats=args.repeats, draft_lengths=args.draft_length,
                       accepted=args.accepted, statistic=args.statistic, clock=args.clock, progress=progress)
    # the better of a copy before and one after the calls: a shared machine's bandwidth drifts within
    # a run (22.7 to 27.5 GB/s between runs here), and a slow moment must not flatter the calls
    copies = (before, copy_bandwidth(clock=args.clock))
    bandwidth = max(copies)
    flops = fma_peak() if status.compiled else None
    weights = multiply_adds(target.model)
    lengths = [length + 1 for length in args.draft_length]
    rows = []
    for name, c in costs.items():
        streamed = variants[name][0].product_bytes
        floors = {f"r_floor_{n}": r_floor(n, weights, flops, c["target_1"])
                  for n in lengths if flops is not None and name in FLOAT32_ARITHMETIC}
        rows.append(dict(variant=name, **{f"{k}_ms": v * 1e3 for k, v in c.items()}, **ratios(c), **floors,
                         one_token_gb_s=streamed / c["target_1"] / 1e9,
                         bandwidth_fraction=streamed / c["target_1"] / bandwidth))
    default = "default pair"  # load_pair's: SmolLM2
    report = dict(settings=dict(target=args.target or default, draft=args.draft or (default if draft else None),
                                repeats=args.repeats, statistic=args.statistic, clock=args.clock, prompt_length=args.prompt_length, draft_lengths=args.draft_length,
                                accepted=args.accepted, kv_cache=args.kv_cache, threads=torch.get_num_threads()),
                  kernel=dict(name=status.name, reason=status.reason, load_seconds=status.load_seconds,
                              built=status.built),
                  copy_bandwidth_gb_s=bandwidth / 1e9, copy_bandwidth_before_after_gb_s=[c / 1e9 for c in copies],
                  fma_peak_gflop_s=None if flops is None else flops / 1e9, multiply_adds_per_token=weights,
                  goals=dict(r_5=1.2, r_9=1.4, r_17=2.0, bandwidth_fraction=0.85, draft_cost_c=0.12), variants=rows,
                  variants_left_out=left_out)
    emit_json(report, args.json)
    print(f"\ncopy bandwidth {bandwidth / 1e9:.1f} GB/s; panel kernel: {status.name}"
          + (f" ({status.reason})" if status.reason else f" (loaded in {status.load_seconds:.1f} s)")
          + ("" if flops is None else f"; float32 FMA peak {flops / 1e9:.1f} GFLOP/s, {weights / 1e6:.1f}M multiply-adds "
             "a token (floor: the least r float32 arithmetic allows)"))
    columns = [("variant", "variant", ""), ("target_1_ms", "target 1 ms", ".3f")]
    columns += [(f"r_{n}", f"r({n})", ".2f") for n in lengths]
    columns += [(f"r_floor_{n}", f"floor({n})", ".2f") for n in lengths if n > 2]
    columns += [("one_token_gb_s", "GB/s", ".1f"), ("bandwidth_fraction", "of copy", ".2f"), ("draft_cost_c", "c", ".3f")]
    print(table_of(rows, columns, markdown=False))
    for name, reason in left_out.items():
        print(f"{name} left out: {reason}")
    return 0

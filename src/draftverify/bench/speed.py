"""`draftverify bench speed`: tokens/s of ar, sd, bv (transformer and n-gram drafts) and of
``transformers``' own assisted generation, on HumanEval prompts, in one run.

Rows ``kseq(K=4)`` add K i.i.d. drafts (SpecTr K-SEQ) scored by one target forward.
Methods run one after the other on each prompt (so load drifts hit all of them alike), seeded per
prompt. Reported per method: tokens/s and its ratio to ``ar`` measured in the same run, acceptance
(accepted / (steps L)), tokens per target call, the draft/target cost ratio c = seconds per
draft forward / seconds per target forward of ``ar``, and the cost of the method's target call
(it scores K (L + 1) tokens) relative to that of ``ar``. For assisted generation, forward hooks count
and time the calls of both models (its acceptance is (tokens per target call - 1) / L); the row
``hf-generate`` is ``transformers``' own ``generate`` sampling from the target alone (``ar``'s twin).
Rows ``llama.cpp`` (sampled at the temperature) and ``llama.cpp-greedy``: llama.cpp on the target's
GGUF file, when ``llama-cpp-python`` is installed (:mod:`.llama_cpp`; timed as ``ar``).

Decode tokens/s: the same runs without their first step (the prompt's prefill and the first
token; llama.cpp: without the time to its first token), the rate of steady decoding that drafting
changes; ``tokens/s`` is end to end, the prefill included, and the goals read it. ``vs ar 95%``:
the 95% bootstrap interval of ``vs ar`` over the prompts (:func:`~.metrics.bootstrap_ratio`, each
prompt's runs resampled with ``ar``'s on it): how far another set of prompts, or other draws on
these, may move the figure.

Engine efficiency: measured tokens/s over the ideal tokens/s of a loop that spends no time outside
the model calls, seed 002's expected speedup with the measured costs: block efficiency b (tokens per
target call) over the time of the calls, ``ideal = b / (n_d t_d + t_T)`` with ``n_d`` draft calls
per target call, ``t_d`` seconds per draft call (sampling included) and ``t_T`` per target call
(warping included); equivalently ``(draft seconds + target seconds) / wall seconds``. The column
``predicted vs ar`` is seed 002's speedup ``k(a, L) / (L c + r)`` from the measured acceptance a,
draft cost c and target call cost r (one draft), i.e. what the i.i.d. acceptance model predicts.
``step_ms`` splits the mean wall time of one step into draft, target, verify and the rest
(commit, cache crops). The costs (``draft/target cost`` c, ``target call cost`` r against
``ar``'s one-token call), ``step_ms`` and so ``predicted vs ar`` describe the steady decoding: each
run's first step is left out, as decode tokens/s leaves it out (before 2026-11-27 they kept it, and
the prompt's prefill, one call of the prompt's length, spread over fewer calls in a speculative run
than in ``ar``, read as r = 1.14-1.18 where the calls themselves cost 1.03-1.05).
Batch rows (``--batch N``): ``generate_batch`` on the first N prompts beside N single ``generate``
calls on the same prompts, same seeds, in two rounds of opposite order (:func:`batch_speed`).
With ``--draft-length auto`` our speculative rows choose each step's L from the decoding's past
(:class:`~draftverify.engine.draft_length.AutoDraftLength`, L = 0 among its choices) and the
assisted row runs transformers' own dynamic schedule (``"heuristic"``, from L = 4); acceptance
is then pooled over each step's own L and ``predicted vs ar`` is left out (it assumes one L).
``copy_gb_s``: the copy bandwidth (:func:`.panel_mm.copy_bandwidth`) before and after the timed
runs, the memory speed the memory-bound calls met.

Goals (issues 5, 13, 24, 27): best exact method >= 2.0x ``ar``; our ``sd`` >= 2x assisted
generation with the same pair (issue 24; issue 5 asked 1.2x); ``ar`` >= 1.5x ``hf-generate``; engine
efficiency >= 0.95; a batch of 8 >= 4x one prompt's tokens/s; best exact method >= 1.5x ``llama.cpp``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import torch

from ..engine import AR
from ..engine.draft_length import AUTO
from ..models.pair import PAIRS
from ..tables import table_of
from ..theory import speedup
from ..verify import verifiers
from ..verify.acceptance import pooled_acceptance
from .compare import run_spec, run_spec_batch
from .llama_cpp import LlamaCpp, available as llama_cpp_available
from .metrics import bootstrap_ratio
from .models import ModelSettings, load_models
from .output import command_line, emit_json
from .panel_mm import copy_bandwidth
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress

SPECS = (AR, "sd", "bv", "sd@ngram", "bv@ngram")
_ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
ASSISTED = "hf-assisted"
GENERATE = "hf-generate"
LLAMA_CPP, LLAMA_CPP_GREEDY = "llama.cpp", "llama.cpp-greedy"
BATCH_SPECS = (AR, "sd")
BATCH_ROUNDS = 2  # batch, singles; singles, batch (see batch_speed)

__all__ = ["SpeedSettings", "assisted", "batch_speed", "hf_generate", "run"]


@dataclass(frozen=True)
class SpeedSettings:
    """What ``draftverify bench speed`` measures, as its flags of the same names give it (the defaults
    are the command's): ``num_prompts`` HumanEval prompts, ``max_new_tokens`` each, at one
    ``temperature`` and ``draft_length``; ``multi`` the K of the kseq rows (0: none), ``batch`` the
    prompts of the batch rows (0: none); ``threads`` 0: torch's choice; ``quantize`` our target's
    weights (:func:`~draftverify.models.pair.load_pair`'s: None picks the GGUF blocks for a GGUF
    target on an AVX-512 CPU; transformers' rows keep its float32 model). The models: see
    :attr:`models`."""

    num_prompts: int = 8
    max_new_tokens: int = 128
    temperature: float = 1.0
    draft_length: int | str = 4
    seed: int = 0
    target: str | None = None
    draft: str | None = None
    ngram: str | None = None
    no_ngram: bool = False
    multi: int = 4
    tiny: bool = False
    threads: int = 1
    batch: int = 8
    quantize: str | None = None
    json: str | None = None

    def __post_init__(self) -> None:
        if self.draft_length != AUTO and not (isinstance(self.draft_length, int) and self.draft_length >= 1):
            raise ValueError(f"draft_length: expected an int >= 1 or {AUTO!r}, got {self.draft_length!r}")
        self.models  # the model settings refuse bad combinations here, before anything loads

    @property
    def models(self) -> ModelSettings:
        """The target, its draft, the transformers draft of assisted generation (not with ``tiny``),
        and the n-gram drafter unless ``no_ngram`` or ``tiny`` drop it: a named pair's own (the
        default pair's or the tiny pair's) or a named ``ngram``."""
        kinds = ("draft",) if self.tiny else ("draft", "assistant")
        if not (self.no_ngram or self.tiny) and (self.ngram is not None or self.target in (None, *PAIRS)):
            kinds += ("ngram",)
        return ModelSettings(target=self.target, draft=self.draft, ngram=self.ngram, tiny=self.tiny, drafts=kinds,
                             quantize=self.quantize)


@contextmanager
def _forward_meter(module: torch.nn.Module) -> Iterator[dict[str, float]]:
    """Count and time ``module``'s forward calls while the block runs; ``first_seconds`` is the
    first call's (the prompt's prefill)."""
    meter = {"calls": 0, "seconds": 0.0, "first_seconds": 0.0}
    started: list[float] = []
    pre = module.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))

    def post(*_):
        seconds = time.perf_counter() - started.pop()
        meter["calls"] += 1
        meter["seconds"] += seconds
        meter["first_seconds"] = meter["first_seconds"] or seconds

    hook = module.register_forward_hook(post)
    try:
        yield meter
    finally:
        pre.remove()
        hook.remove()


def assisted(target, draft, prompt_ids: list[int], *, max_new_tokens: int, temperature: float,
             draft_length: int | str, seed: int) -> dict[str, float]:
    """``transformers`` assisted generation: sampling, constant L (``"auto"``: its heuristic
    schedule from L = 4), no confidence early exit, no EOS stop (as ``ignore_eos`` in our runs)."""
    input_ids = torch.tensor([prompt_ids])
    torch.manual_seed(seed)
    # transformers 5 reads these from the assistant's own generation config
    assistant_config = draft.model.generation_config
    saved = {k: getattr(assistant_config, k, None) for k in _ASSISTANT_SETTINGS}
    schedule = ("heuristic", 4) if draft_length == AUTO else ("constant", draft_length)
    assistant_config.update(num_assistant_tokens=schedule[1], num_assistant_tokens_schedule=schedule[0],
                            assistant_confidence_threshold=0.0)
    try:
        with _forward_meter(target.model) as target_meter, _forward_meter(draft.model) as draft_meter:
            start = time.perf_counter()
            with torch.inference_mode():
                out = target.model.generate(
                    input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=draft.model,
                    do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                    eos_token_id=None, pad_token_id=target.eos_token_id,
                )
            seconds = time.perf_counter() - start
    finally:
        assistant_config.update(**saved)
    return dict(tokens=out.shape[1] - len(prompt_ids), seconds=seconds, target_calls=target_meter["calls"],
                target_seconds=target_meter["seconds"], draft_calls=draft_meter["calls"],
                draft_seconds=draft_meter["seconds"], **_first_calls(target=target_meter, draft=draft_meter))


def hf_generate(target, prompt_ids: list[int], *, max_new_tokens: int, temperature: float,
                seed: int) -> dict[str, float]:
    """``transformers``' ``generate`` sampling from the target alone (no EOS stop), timed as ``ar``."""
    input_ids = torch.tensor([prompt_ids])
    torch.manual_seed(seed)
    with _forward_meter(target.model) as meter:
        start = time.perf_counter()
        with torch.inference_mode():
            out = target.model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), do_sample=True, temperature=temperature,
                top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, eos_token_id=None,
                pad_token_id=target.eos_token_id,
            )
        seconds = time.perf_counter() - start
    return dict(tokens=out.shape[1] - len(prompt_ids), seconds=seconds, target_calls=meter["calls"],
                target_seconds=meter["seconds"], **_first_calls(target=meter))


def _first_calls(**meters: dict[str, float]) -> dict[str, float]:
    """Each meter's first call (its prefill), under the keys :func:`_report` subtracts."""
    return {key: value for name, meter in meters.items() if meter["calls"]
            for key, value in ((f"first_{name}_calls", 1), (f"first_{name}_seconds", meter["first_seconds"]))}


def batch_speed(target, drafts: dict[str, Any], prompts: list[list[int]], specs: tuple[str, ...],
                seed: int, rounds: int = BATCH_ROUNDS, **settings: Any) -> list[dict[str, Any]]:
    """Tokens/s of ``generate_batch`` on all ``prompts`` beside one ``generate`` call per prompt
    (same seed), for each method of ``specs``, over ``rounds`` rounds whose order alternates: an
    even round runs the batch call, then the single calls, an odd one the single calls first (round
    i seeds ``seed + i``). The machine's speed drifts over the minutes a round takes (the same code
    gave 4.25x and 3.83x in two runs of one round, the single prompts' speed moving with the
    machine's); two rounds in this order give a linear drift to both sides alike. Also without the first step (the
    prompts' prefill, one call for the batch, one per prompt alone), as ``decode tokens/s`` leaves
    it out: the prefill is bound by the arithmetic, which a batch does not share; None where
    nothing was decoded after it. ``round_ratios``: each round's batch over single tokens/s, the
    spread the drift left."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    rows = []
    for spec in specs:
        totals = {side: [0, 0.0, 0, 0.0] for side in ("batch", "single")}  # tokens, seconds, first tokens, first seconds
        round_ratios = []
        for i in range(rounds):
            order = ("batch", "single") if i % 2 == 0 else ("single", "batch")
            measured = {side: (_batch_run if side == "batch" else _single_runs)(spec, target, drafts, prompts, seed + i,
                                                                                settings)
                        for side in order}
            for side, values in measured.items():
                totals[side] = [a + b for a, b in zip(totals[side], values)]
            round_ratios.append((measured["batch"][0] / measured["batch"][1]) / (measured["single"][0] / measured["single"][1]))
        speeds = {side: (tokens / seconds, (tokens - first_tokens) / (seconds - first_seconds) if tokens > first_tokens
                         else None)
                  for side, (tokens, seconds, first_tokens, first_seconds) in totals.items()}
        rows.append(dict(method=spec, prompts=len(prompts), rounds=rounds, batch_tokens_per_second=speeds["batch"][0],
                         single_tokens_per_second=speeds["single"][0],
                         batch_vs_single=speeds["batch"][0] / speeds["single"][0], round_ratios=round_ratios,
                         batch_decode_tokens_per_second=speeds["batch"][1],
                         single_decode_tokens_per_second=speeds["single"][1],
                         decode_batch_vs_single=None if None in (speeds["batch"][1], speeds["single"][1])
                         else speeds["batch"][1] / speeds["single"][1]))
    return rows


def _batch_run(spec: str, target, drafts: dict[str, Any], prompts: list[list[int]], seed: int,
               settings: dict[str, Any]) -> tuple[int, float, int, float]:
    """One ``generate_batch`` call: tokens, wall seconds, and those of its first step (the batch's
    first step, which every row's first step records)."""
    began = time.perf_counter()
    results = run_spec_batch(spec, target, drafts, prompts, seed=seed, **settings)
    seconds = time.perf_counter() - began
    return (sum(len(r.tokens) for r in results), seconds, sum(r.steps[0].committed for r in results),
            _step_seconds(results[0].steps[0]))


def _single_runs(spec: str, target, drafts: dict[str, Any], prompts: list[list[int]], seed: int,
                 settings: dict[str, Any]) -> tuple[int, float, int, float]:
    """One ``generate`` call per prompt: tokens, seconds, and those of their first steps, summed."""
    runs = [run_spec(spec, target, drafts, prompt, seed=seed, **settings).result for prompt in prompts]
    return (sum(len(r.tokens) for r in runs), sum(r.seconds for r in runs), sum(r.steps[0].committed for r in runs),
            sum(_step_seconds(r.steps[0]) for r in runs))


def _step_seconds(step: Any) -> float:
    """A step's draft, target and verification seconds."""
    return step.draft_seconds + step.target_seconds + step.verify_seconds


def run(args: SpeedSettings, progress: Progress | None = None) -> int:
    from transformers.utils import logging as hf_logging

    from ..models.chat import encode_prompt
    from ..train.measure import humaneval_prompts

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    target, drafts, tokenizer = load_models(args.models)
    assistant = drafts.get("assistant", drafts["draft"])  # the draft transformers' assisted generation runs
    if assistant is drafts["draft"]:  # the pair's own draft: no second run of our methods on it
        drafts.pop("assistant", None)
    # sd@assistant: our sd on the pair transformers runs, for the same-pair comparison
    specs = list(SPECS) + (["sd@assistant"] if "assistant" in drafts else [])
    if args.multi > 1 and "kseq" in {info.name for info in verifiers()}:
        specs += [f"kseq(K={args.multi})", f"kseq(K={args.multi})@ngram"]
    specs = [s for s in specs if s.partition("@")[2] in ("", *drafts)]
    prompts = [encode_prompt(tokenizer, p) for p in humaneval_prompts(args.num_prompts)]  # chat where there is a template
    settings = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, draft_length=args.draft_length)
    ours = dict(settings, ignore_eos=True)  # every method generates exactly max_new_tokens
    # warm-up, not timed
    for spec in specs:
        run_spec(spec, target, drafts, prompts[0], **{**ours, "max_new_tokens": 4, "seed": 0})
    assisted(target, assistant, prompts[0], **{**settings, "max_new_tokens": 4, "seed": 0})
    plain = {k: settings[k] for k in ("max_new_tokens", "temperature")}
    hf_generate(target, prompts[0], **{**plain, "max_new_tokens": 4, "seed": 0})
    anchor, anchor_note = _llama_cpp(args, prompts)
    anchors = {} if anchor is None else {LLAMA_CPP: args.temperature, LLAMA_CPP_GREEDY: 0.0}
    for temperature in anchors.values():
        anchor.decode(prompts[0], max_new_tokens=4, temperature=temperature, seed=0)

    # the machine's memory speed around the timed runs: memory-bound calls follow it, and a shared
    # machine's drifts within and between runs (11.5-13.2 GB/s on the Xeon of 2026-11-29, 40 on the EPYC before)
    copy_before = copy_bandwidth()
    totals: dict[str, dict[str, float]] = {}
    for i, prompt_ids in enumerate(track(progress, prompts, "prompts")):
        for spec in specs:
            r = run_spec(spec, target, drafts, prompt_ids, seed=args.seed + i, **ours).result
            first = r.steps[0]  # the prefill's step
            _add(totals, spec, tokens=len(r.tokens), seconds=r.seconds, target_calls=r.target_calls,
                 first_tokens=first.committed, first_seconds=_step_seconds(first),
                 target_seconds=r.target_seconds, draft_calls=r.draft_calls, draft_seconds=r.draft_seconds,
                 accepted=r.accepted, steps=len(r.steps), rejections=r.rejections, verify_seconds=r.verify_seconds,
                 first_target_calls=first.target_calls, first_target_seconds=first.target_seconds,
                 first_draft_calls=first.draft_calls, first_draft_seconds=first.draft_seconds,
                 first_verify_seconds=first.verify_seconds, runs=1)
        _add(totals, ASSISTED, **assisted(target, assistant, prompt_ids, seed=args.seed + i, **settings))
        _add(totals, GENERATE, **hf_generate(target, prompt_ids, seed=args.seed + i, **plain))
        for name, temperature in anchors.items():
            _add(totals, name, **anchor.decode(prompt_ids, max_new_tokens=args.max_new_tokens, temperature=temperature,
                                               seed=args.seed + i))
    report = _report(totals, args, target)
    report["llama_cpp"] = anchor_note
    if args.batch:
        batch_prompts = [encode_prompt(tokenizer, p) for p in humaneval_prompts(args.batch)]
        report["batch"] = batch_speed(target, drafts, batch_prompts, BATCH_SPECS, args.seed, **ours)
        for row in report["batch"]:  # issue 27's batch goal reads ar's row, the earlier issues' sd's
            report["goals"][f"{row['method']}_batch_vs_single"] = row["batch_vs_single"]
            report["goals"][f"{row['method']}_decode_batch_vs_single"] = row["decode_batch_vs_single"]
    report["copy_gb_s"] = {"before": copy_before / 1e9, "after": copy_bandwidth() / 1e9}
    emit_json(report, args.json)
    print()
    print(_tables(report, args.batch))
    return 0


def _llama_cpp(args: SpeedSettings, prompts: list[list[int]]) -> tuple[LlamaCpp | None, str]:
    """llama.cpp on the target's GGUF file (the default pair's, or ``--target`` FILE.gguf), or None
    and why not."""
    from ..models.gguf import smollm2_gguf

    if args.tiny or not (args.target in (None, "smollm2") or str(args.target).endswith(".gguf")):
        return None, "left out: the target has no GGUF file"
    if not llama_cpp_available():
        return None, "left out: llama-cpp-python is not installed (pip install draftverify[llama])"
    gguf = smollm2_gguf() if args.target in (None, "smollm2") else Path(args.target)
    context = max(map(len, prompts)) + args.max_new_tokens + 1
    return LlamaCpp(gguf, context=context, threads=torch.get_num_threads(), seed=args.seed), f"ran on {gguf.name}"


def _tables(report: dict[str, Any], batch: int) -> str:
    """The console tables of a report (methods, ms per step, batch rows) and the goals line."""
    columns = [("method", "method", "s"), ("tokens_per_second", "tokens/s", ".1f"), ("vs_ar", "vs ar", ".2f"),
               ("vs_ar_95", "vs ar 95%", "s"),
               ("decode_tokens_per_second", "decode tokens/s", ".1f"), ("decode_vs_ar", "decode vs ar", ".2f"),
               ("acceptance", "acceptance", ".2f"), ("tokens_per_target_call", "tokens/target call", ".2f"),
               ("cost_ratio", "draft/target cost", ".3f"), ("target_call_ratio", "target call cost", ".2f"),
               ("predicted_vs_ar", "predicted vs ar", ".2f"), ("engine_efficiency", "efficiency", ".3f"),
               ("tokens", "tokens", "d")]
    methods = [dict(r, vs_ar_95=_interval(r.get("vs_ar_interval"))) for r in report["methods"]]
    parts = [f"our target's weights: {report['settings'].get('weight_format')}", table_of(methods, columns, markdown=False),
             "\nmean ms per step",
             table_of([dict(method=r["method"], **r["step_ms"]) for r in report["methods"] if r.get("step_ms")],
                      [("method", "method", "s")] + [(k, k, ".2f") for k in ("draft", "target", "verify", "other",
                                                                             "total")], markdown=False)]
    if report.get("batch"):
        rows = [dict(row, each_round=" ".join(f"{ratio:.2f}" for ratio in row["round_ratios"])) for row in report["batch"]]
        parts += ["", table_of(rows, [("method", "method", "s"), ("prompts", "prompts", "d"),
                                                 ("batch_tokens_per_second", "batch tokens/s", ".1f"),
                                                 ("single_tokens_per_second", "single tokens/s", ".1f"),
                                                 ("batch_vs_single", "batch vs single", ".2f"),
                                                 ("decode_batch_vs_single", "decoding: batch vs single", ".2f"),
                                                 ("each_round", "each round", "s")],
                                    markdown=False)]
    copies = report["copy_gb_s"]
    parts.append(f"\ncopy bandwidth before / after the timed runs: {copies['before']:.1f} / {copies['after']:.1f} GB/s")
    goals = report["goals"]
    interval = goals.get("best_exact_vs_ar_interval")
    spread = "" if interval is None else f", 95% {interval[0]:.2f}-{interval[1]:.2f} over the prompts"
    parts.append(f"\nbest exact method {goals['best_exact_method']}: {goals['best_exact_vs_ar']:.2f}x ar{spread} (goal 2.0), "
                 f"engine efficiency {goals['engine_efficiency']:.3f} (goal 0.95); sd {goals['sd_vs_assisted']:.2f}x "
                 f"transformers assisted generation (goal 2.0); ar {goals['ar_vs_generate']:.2f}x transformers "
                 f"generate (goal 1.5)" + (f"; batch of {batch}: ar {goals['ar_batch_vs_single']:.2f}x, sd "
                                           f"{goals['sd_batch_vs_single']:.2f}x single calls (goal 4.0; decoding "
                                           f"alone: ar {_times(goals['ar_decode_batch_vs_single'])}, sd "
                                           f"{_times(goals['sd_decode_batch_vs_single'])})"
                                           if "sd_batch_vs_single" in goals else "")
                 + (f"; best {goals['best_exact_vs_llama_cpp']:.2f}x llama.cpp (goal 1.5)"
                    if "best_exact_vs_llama_cpp" in goals else f"; llama.cpp {report['llama_cpp']}"))
    return "\n".join(parts)


def _interval(interval: list[float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _add(totals: dict, name: str, **values: float) -> None:
    """Sum one run's ``values`` into ``name``'s totals, and keep its (tokens, seconds) as a unit of
    the intervals (:func:`_vs_ar_interval`)."""
    bucket = totals.setdefault(name, {})
    bucket.setdefault("units", []).append((values["tokens"], values["seconds"]))
    for key, value in values.items():
        bucket[key] = bucket.get(key, 0) + value


def _vs_ar_interval(t: dict, ar: dict) -> list[float] | None:
    """The 95% bootstrap interval of a method's tokens/s over ``ar``'s, prompts resampled in pairs
    (:func:`~.metrics.bootstrap_ratio`); None with fewer than two prompts recorded (:func:`_add`)."""
    units, ar_units = t.get("units", []), ar.get("units", [])
    if len(units) != len(ar_units):
        raise ValueError(f"units: {len(units)} prompts against ar's {len(ar_units)}; the interval pairs them")
    if len(units) < 2:
        return None
    (tokens, seconds), (ar_tokens, ar_seconds) = zip(*units), zip(*ar_units)
    interval = bootstrap_ratio(tokens, seconds, baseline=(ar_tokens, ar_seconds))
    return [interval.low, interval.high]


def _per_call(t: dict, kind: str) -> float:
    """Seconds per ``kind`` ("target" or "draft") call of the steady decoding: each run's first
    step (the prompt's prefill, and a feature draft's first pass over the prompt) left out, as
    decode tokens/s leaves it out; a method that made no other call keeps its first one."""
    calls = t[f"{kind}_calls"] - t.get(f"first_{kind}_calls", 0)
    if calls <= 0:
        return t[f"{kind}_seconds"] / t[f"{kind}_calls"]
    return (t[f"{kind}_seconds"] - t.get(f"first_{kind}_seconds", 0.0)) / calls


def _step_ms(t: dict) -> dict[str, float]:
    """Mean milliseconds per step of the steady decoding (every run's first step left out), split
    into draft, target, verify and the rest (commit, cache crops, the engine's bookkeeping)."""
    steps = t["steps"] - t["runs"]
    if steps <= 0:
        return {}
    parts = {kind: 1e3 * (t[f"{kind}_seconds"] - t[f"first_{kind}_seconds"]) / steps for kind in ("draft", "target", "verify")}
    total = 1e3 * (t["seconds"] - t["first_seconds"]) / steps
    return {**parts, "other": total - sum(parts.values()), "total": total}


def _report(totals: dict, args: SpeedSettings, target) -> dict[str, Any]:
    ar = totals[AR]
    ar_speed = ar["tokens"] / ar["seconds"]
    ar_decode = (ar["tokens"] - ar["first_tokens"]) / (ar["seconds"] - ar["first_seconds"])
    target_call = _per_call(ar, "target")
    rows, fixed = [], args.draft_length != AUTO  # auto: no one L for the assisted acceptance and the prediction
    for name, t in totals.items():
        speed = t["tokens"] / t["seconds"]
        decode = None if "first_seconds" not in t else \
            (t["tokens"] - t["first_tokens"]) / (t["seconds"] - t["first_seconds"])
        if "target_calls" not in t:  # llama.cpp: tokens and seconds only
            rows.append(dict(method=name, tokens=int(t["tokens"]), seconds=round(t["seconds"], 3),
                             tokens_per_second=speed, vs_ar=speed / ar_speed, vs_ar_interval=_vs_ar_interval(t, ar),
                             decode_tokens_per_second=decode,
                             decode_vs_ar=decode / ar_decode))
            continue
        per_call = t["tokens"] / t["target_calls"]
        if name == ASSISTED:  # transformers reports no rejections: per drafted token, with one L
            acceptance = (per_call - 1) / args.draft_length if fixed else None
        else:
            # pooled over verified tokens (seed 002), over every step of every prompt
            acceptance = pooled_acceptance(t["accepted"], t.get("rejections", 0)) if t.get("draft_calls") else None
        cost = _per_call(t, "draft") / target_call if t.get("draft_calls") else None
        call_ratio = _per_call(t, "target") / target_call
        predicted = None
        if cost is not None and acceptance is not None and name != ASSISTED and fixed:
            # seed 002's S = k / (1 + L rho) with the call priced at r: k / (L c + r) = S(a, c / r, L) / r
            predicted = float(speedup(acceptance, cost / call_ratio, args.draft_length)) / call_ratio
        model_seconds = t.get("draft_seconds", 0.0) + t["target_seconds"]
        steps = t.get("steps")
        rows.append(dict(
            method=name, tokens=int(t["tokens"]), seconds=round(t["seconds"], 3), tokens_per_second=speed,
            vs_ar=speed / ar_speed, vs_ar_interval=_vs_ar_interval(t, ar), decode_tokens_per_second=decode,
            decode_vs_ar=None if decode is None else decode / ar_decode, acceptance=acceptance, tokens_per_target_call=per_call,
            cost_ratio=cost, target_call_ratio=call_ratio, predicted_vs_ar=predicted,
            engine_efficiency=model_seconds / t["seconds"],
            step_ms=None if not steps else _step_ms(t),
        ))
    ours = [r for r in rows if r["method"] not in (AR, ASSISTED, GENERATE, LLAMA_CPP, LLAMA_CPP_GREEDY)]
    best = max(ours, key=lambda r: r["tokens_per_second"])
    speed = {r["method"]: r["tokens_per_second"] for r in rows}
    anchor = {} if LLAMA_CPP not in speed else {"best_exact_vs_llama_cpp": best["tokens_per_second"] / speed[LLAMA_CPP]}
    return dict(
        command=command_line("speed", args, leave_out=("json",)),
        settings=dict(prompts=args.num_prompts, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                      draft_length=args.draft_length, multi=args.multi, tiny=args.tiny, quantize=args.quantize,
                      weight_format=getattr(target, "weight_format", None), threads=torch.get_num_threads()),
        target_seconds_per_call_ar=target_call,
        methods=rows,
        goals=dict(best_exact_method=best["method"], best_exact_vs_ar=best["vs_ar"],
                   best_exact_vs_ar_interval=best["vs_ar_interval"],
                   engine_efficiency=best["engine_efficiency"], sd_vs_assisted=speed.get("sd@assistant", speed["sd"]) / speed[ASSISTED],
                   ar_vs_generate=speed[AR] / speed[GENERATE], **anchor),
    )


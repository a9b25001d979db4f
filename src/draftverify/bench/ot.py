"""`draftverify bench ot`: seed 001 Table 1's grid (top-k x drafts) for the four OTLP methods.

Per cell and method: median and p90 milliseconds per token (process CPU time and wall clock) (``solve`` + ``conditional`` for one
drafted tuple, as seed 001 section 7.2 times it; the fastest of ``--repeats`` solves of the token; the
methods of a cell take turns token by token, so that load drifting on a shared machine hits them
alike), success rate without fallback, mean acceptance
against alpha*, and the plan's L1 deviation from the target (mean and max, computed outside the
timing). Paper numbers (seed 001 Table 1, Llama-3 column) are printed beside ours.

Distributions (``--source``): ``synthetic`` (a), pairs shaped like LM pairs (:func:`synthetic_pair`);
``pair`` (b), next-token distributions of the embedded target and draft at positions of
target-sampled continuations of HumanEval prompts (:func:`model_pairs`). Both feed the same grid.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from .. import ot
from ..ot import NetworkTooLarge
from ..verify import MethodSpec, parse_method
from .output import emit_json
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress


@dataclass(frozen=True)
class OtSettings:
    """The grid of ``draftverify bench ot``, as its flags of the same names give it (the defaults are
    the command's): ``top_k`` x ``num_drafts`` cells of ``tokens`` distribution pairs each, solved by
    ``methods`` (the method grammar: ``ot(solver=gr,tol=1e-3)``); ``max_arcs`` the network limits of
    lp, maxflow and maxflow-cs; ``source`` synthetic (``vocab``, ``noise``) or the embedded pair
    (``num_prompts`` HumanEval prompts); ``json`` / ``markdown`` files to write."""

    top_k: tuple[int, ...] = (10, 100, 1000)
    num_drafts: tuple[int, ...] = (2, 3, 4, 5)
    methods: tuple[str, ...] = ("lp", "maxflow", "maxflow-cs", "ot(solver=gr,tol=0.001)", "ot(solver=gr,tol=0.0001)")
    tokens: int = 40
    cell_seconds: float = 20.0  # a method stops in a cell after this much solve time
    repeats: int = 3  # solves per token; the fastest counts
    max_arcs: tuple[int, int, int] = (300_000, 4_000_000, 4_000_000)
    source: Literal["synthetic", "pair"] = "synthetic"
    num_prompts: int = 4
    vocab: int = 32000
    noise: float = 0.65
    seed: int = 0
    json: str | None = None
    markdown: str | None = None


# seed 001 Table 1, Llama-3 70B/8B: ms per token (GR: success rate in brackets); None = not run
PAPER = {
    (10, 2): {"lp": 4.07, "maxflow": 2.45, "maxflow-cs": 2.51, "ot(solver=gr,tol=0.001)": (5.27, 0.98), "ot(solver=gr,tol=0.0001)": (7.62, 0.93)},
    (10, 3): {"lp": 30.14, "maxflow": 3.80, "maxflow-cs": 3.88, "ot(solver=gr,tol=0.001)": (17.35, 0.98), "ot(solver=gr,tol=0.0001)": (23.95, 0.87)},
    (10, 4): {"lp": ">4000", "maxflow": 74.21, "maxflow-cs": 74.37, "ot(solver=gr,tol=0.001)": (40.30, 0.97), "ot(solver=gr,tol=0.0001)": (54.84, 0.86)},
    (10, 5): {"lp": ">400000", "maxflow": ">10000", "maxflow-cs": ">10000", "ot(solver=gr,tol=0.001)": (70.75, 0.96), "ot(solver=gr,tol=0.0001)": (94.79, 0.85)},
    (100, 2): {"lp": ">4000", "maxflow": 72.28, "maxflow-cs": 63.03, "ot(solver=gr,tol=0.001)": (23.92, 0.38), "ot(solver=gr,tol=0.0001)": (25.47, 0.23)},
    (100, 3): {"lp": ">400000", "maxflow": ">200000", "maxflow-cs": ">200000", "ot(solver=gr,tol=0.001)": (30.52, 0.23), "ot(solver=gr,tol=0.0001)": (38.44, 0.14)},
    (1000, 2): {"lp": "OOM", "maxflow": ">400000", "maxflow-cs": ">400000", "ot(solver=gr,tol=0.001)": (34.94, 0.31), "ot(solver=gr,tol=0.0001)": (47.46, 0.15)},
}


def synthetic_pair(rng: np.random.Generator, vocab_size: int = 32000, noise: float = 0.65) -> tuple[np.ndarray, np.ndarray]:
    """A (target, draft) pair shaped like an LM pair at temperature 1.

    Target logits: Zipf-like -s log(rank) with s ~ U(1, 2), plus N(0, 0.7^2) noise, scaled by
    c ~ U(0.8, 1.6) (contexts range from peaked to flat; heavy tail: the draft's top 10 / 100 / 1000
    hold about 82% / 93% / 97% of the target mass). Draft logits: the target's plus N(0, noise^2), so
    draft and target are correlated; with noise = 0.65 the single-draft acceptance sum_x min(T, D)
    averages about 0.8 at temperature 1 (the bench reports the measured mean).
    """
    rank = np.arange(1, vocab_size + 1)
    logits = rng.uniform(0.8, 1.6) * (-rng.uniform(1.0, 2.0) * np.log(rank) + 0.7 * rng.standard_normal(vocab_size))
    draft_logits = logits + noise * rng.standard_normal(vocab_size)
    target = np.exp(logits - logits.max())
    draft = np.exp(draft_logits - draft_logits.max())
    return target / target.sum(), draft / draft.sum()


def model_pairs(num_positions: int, prompts: int = 4, seed: int = 0, pair=None) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """``num_positions`` (target, draft) pairs of real next-token distributions, float64, temperature 1.

    For the first ``prompts`` HumanEval prompts in file order, sample a continuation of
    ceil(num_positions / prompts) tokens from the target (temperature 1, KV cache, seeded; it stops
    early at eos, so later prompts in file order top up), and take at every position the target's
    distribution it was drawn from and the draft's teacher-forced distribution over the same
    prefix (``draftverify.train.measure``). ``pair``: a ``ModelPair`` with a transformers draft
    (default: ``load_pair("tiny")``, the embedded tiny pair, whose figures the results page holds). Returns the pairs and a description.
    """
    import torch

    from ..models import load_pair
    from ..train.measure import humaneval_prompts, sample_continuation, teacher_forced_probs

    pair = load_pair("tiny") if pair is None else pair
    target, draft, tokenizer = pair.target.model, pair.draft.model, pair.tokenizer
    per_prompt = -(-num_positions // prompts)
    config = pair.target.config
    context = int(getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", 512))
    generator = torch.Generator().manual_seed(seed)
    out, used = [], 0
    for prompt in humaneval_prompts():
        if len(out) >= num_positions:
            break
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-(context - per_prompt):]
        tokens, target_probs = sample_continuation(target, ids, per_prompt, tokenizer.eos_token_id, generator)
        draft_probs = teacher_forced_probs(draft, ids, tokens)
        for t, d in zip(target_probs.numpy(), draft_probs.numpy()):
            out.append((t / t.sum(), d / d.sum()))
        used += 1
    out = out[:num_positions]
    info = {"generator": "draftverify.bench.ot.model_pairs", "pair": f"embedded target + {pair.draft_name}",
            "vocab_size": int(out[0][0].size), "prompts": used, "positions_per_prompt": per_prompt}
    return out, info


def top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """Keep the k most probable tokens and renormalise (top-k drafting, seed 001 appendix N)."""
    keep = np.argpartition(-probs, k - 1)[:k]
    out = np.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def _method(text: str) -> tuple[str, str, float]:
    """A method in the common grammar (:mod:`draftverify.verify.spec`): ``ot(solver=gr,tol=1e-4)``,
    or a solver name alone (``lp``) for ``ot(solver=lp)``. Returns (label, solver, tol): the label is
    the solver's name for the exact solvers, the method written out in full for ``gr``."""
    spec = parse_method(text if "(" in text or text == "ot" else f"ot(solver={text})")
    if spec.name != "ot" or spec.draft is not None or spec.num_drafts is not None or spec.draft_length is not None:
        raise ValueError(f"method {text!r}: expected a solver ({', '.join(ot.METHODS)}) or ot(solver=NAME,tol=TOL)")
    solver, tol = spec.options.get("solver", "gr"), float(spec.options.get("tol", 1e-4))
    if solver not in ot.METHODS:
        raise ValueError(f"unknown solver {solver!r} in {text!r}; known: {', '.join(ot.METHODS)}")
    label = str(MethodSpec("ot", {"solver": solver, "tol": tol})) if solver == "gr" else solver
    return label, solver, tol


def _timed(target, draft, n: int, name: str, tol: float, limits: dict, drafted: np.ndarray, repeats: int):
    """(plan, wall s, CPU s) of ``solve`` + ``conditional(drafted)``, the fastest of ``repeats`` solves."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        plan = ot.solve(target, draft, n, method=name, tol=tol, **limits)
        plan.conditional(drafted)
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    return plan, wall, cpu


def _cell(pairs, k: int, n: int, specs: list[str], args: OtSettings, rng: np.random.Generator) -> list[dict]:
    """Every method of one (top-k, drafts) cell, interleaved token by token: on a shared machine a
    slow minute then hits all methods alike, so their ratios (the figures compared with the paper)
    hold even when absolute times drift. A method stops after ``args.cell_seconds`` of solving."""
    methods = {label: (name, tol) for label, name, tol in map(_method, specs)}
    limits = {spec: {"max_arcs": dict(zip(["lp", "maxflow", "maxflow-cs"], args.max_arcs)).get(name, args.max_arcs[2])}
              for spec, (name, _) in methods.items()}
    keys = ("wall", "cpu", "success", "acceptance", "alpha", "error")
    measured = {spec: {key: [] for key in keys} for spec in methods}
    skipped: dict[str, str] = {}
    for target, draft in pairs:
        drafted = rng.choice(draft.size, size=n, p=draft)
        for spec, (name, tol) in methods.items():
            if spec in skipped or sum(measured[spec]["wall"]) > args.cell_seconds:
                continue
            try:
                plan, wall, cpu = _timed(target, draft, n, name, tol, limits[spec], drafted, args.repeats)
            except NetworkTooLarge as error:
                skipped[spec] = str(error)
                continue
            values = (wall, cpu, plan.converged, plan.acceptance, plan.optimal_acceptance, plan.target_error)
            for key, value in zip(keys, values):  # converged first: the full plan is forced after it
                measured[spec][key].append(value)
    cells = []
    for spec in methods:
        if spec in skipped:
            cells.append({"top_k": k, "drafts": n, "method": spec, "status": "skipped", "reason": skipped[spec]})
            continue
        m = measured[spec]
        ms, cpu_ms = 1e3 * np.array(m["wall"]), 1e3 * np.array(m["cpu"])
        cells.append({
            "top_k": k, "drafts": n, "method": spec, "status": "ok", "tokens": len(ms),
            "median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)),
            "cpu_median_ms": float(np.median(cpu_ms)), "cpu_p90_ms": float(np.percentile(cpu_ms, 90)),
            "success": float(np.mean(m["success"])), "acceptance": float(np.mean(m["acceptance"])),
            "alpha_star": float(np.mean(m["alpha"])),
            "target_l1_mean": float(np.mean(m["error"])), "target_l1_max": float(np.max(m["error"])),
        })
    return cells


def _paper(k: int, n: int, spec: str) -> str:
    value = PAPER.get((k, n), {}).get(spec)
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return f"{value[0]:g} ({value[1]:.0%})"
    return f"{value:g}" if isinstance(value, float) else str(value)


def markdown(results: list[dict], meta: dict) -> str:
    lines = [
        "| top-k | n | method | tokens | CPU ms median / p90 | wall ms median / p90 | success | acceptance / alpha* | target L1 mean / max | paper ms (success) | paper / our CPU median |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        paper = _paper(r["top_k"], r["drafts"], r["method"])
        if r["status"] != "ok":
            lines.append(f"| {r['top_k']} | {r['drafts']} | {r['method']} | skipped (network too large) | | | | | | {paper} | |")
            continue
        value = PAPER.get((r["top_k"], r["drafts"]), {}).get(r["method"])
        number = value[0] if isinstance(value, tuple) else value if isinstance(value, float) else None
        ratio = f"{number / r['cpu_median_ms']:.1f}x" if number else ""
        lines.append(
            f"| {r['top_k']} | {r['drafts']} | {r['method']} | {r['tokens']} | {r['cpu_median_ms']:.2f} / {r['cpu_p90_ms']:.2f} "
            f"| {r['median_ms']:.2f} / {r['p90_ms']:.2f} | {r['success']:.0%} "
            f"| {r['acceptance']:.4f} / {r['alpha_star']:.4f} | {r['target_l1_mean']:.1e} / {r['target_l1_max']:.1e} | {paper} | {ratio} |"
        )
    lines.append("")
    what = "synthetic pairs" if meta.get("source", "synthetic") == "synthetic" else "model pairs"
    lines.append(f"Single-draft acceptance of the {what} (full draft): {meta['single_draft_acceptance']:.3f}. {meta['note']}")
    if meta.get("command"):
        threads = meta.get("openblas_num_threads")
        lines.append(f"Command: `{'OPENBLAS_NUM_THREADS=' + threads + ' ' if threads else ''}{meta['command']}`.")
    lines.append(f"Load average when the run ended: {', '.join(f'{x:.1f}' for x in meta['load_average_at_end'])} on {meta['cpu_count']} CPUs.")
    return "\n".join(lines) + "\n"


def distributions(args: OtSettings) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """The (target, draft) pairs the grid runs on, from ``args.source``, and their description."""
    if args.source == "pair":
        pairs, info = model_pairs(args.tokens, args.num_prompts, args.seed)
        return pairs, {"source": "pair", **info, "tokens": len(pairs), "seed": args.seed}
    rng = np.random.default_rng(args.seed)
    pairs = [synthetic_pair(rng, args.vocab, args.noise) for _ in range(args.tokens)]
    return pairs, {"source": "synthetic", "generator": "draftverify.bench.ot.synthetic_pair",
                   "vocab_size": args.vocab, "noise": args.noise, "tokens": args.tokens, "seed": args.seed}


def run(args: OtSettings, progress: Progress | None = None) -> int:
    full, source = distributions(args)
    truncated = {k: [(target, top_k(draft, k)) for target, draft in full] for k in args.top_k}
    results = []
    cells = list(itertools.product(args.top_k, args.num_drafts))
    for k, n in track(progress, cells, "cells (top-k, drafts)"):
        for cell in _cell(truncated[k], k, n, list(dict.fromkeys(args.methods)), args, np.random.default_rng([args.seed, k, n])):
            results.append(cell)
            print(json.dumps(cell), file=sys.stderr, flush=True)
    meta = {
        "load_average_at_end": list(os.getloadavg()), "cpu_count": os.cpu_count(),
        **source,
        "command": " ".join(["draftverify", *sys.argv[1:]]) if os.path.basename(sys.argv[0]) == "draftverify" else None,
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "single_draft_acceptance": float(np.mean([np.minimum(t, d).sum() for t, d in full])),
        "repeats": args.repeats,
        "note": "ms per token = ot.solve + conditional(one drafted tuple), the fastest of `repeats` solves; methods interleaved token by token; CPU = process CPU time (what a dedicated core would "
        "take: the wall clock of this shared machine includes waiting for a core); paper = seed 001 Table 1 (Llama-3, 32-core Xeon, wall).",
    }
    emit_json({"meta": meta, "results": results}, args.json)
    table = markdown(results, meta)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(table)
    print(table)
    return 0

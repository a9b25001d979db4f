"""`draftverify bench decode`: every method measured on a prompt set, with intervals, theory
beside measurement, a Markdown report and plots (issue 6).

Sweeps methods x K x L x temperature x draft kind over (prompt, seed) units with ``ar`` measured
on the same units in the same run (:mod:`.sweep`); metrics are defined in :mod:`.metrics`. Writes
to ``--out``: ``results.jsonl`` (one raw record per run), ``summary.json``, ``report.md``, the
plots (or under ``--plots-dir``) and ``cache/`` (or ``--cache``: per-configuration records, so
rerunning the same command resumes). Prints the summary JSON and a table. The default sweep (3
mixed prompts x 2 seeds, 32 configurations, 48 tokens: 192 runs) took 6 minutes on the embedded
pair with one thread on this project's shared 2-core machine (256 runs took 15 minutes at nice 19
beside the pair's training job).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import torch

from ..engine import AR
from .plots import plot_all
from .probes import first_token_deviation
from .prompts import fingerprint, load_prompts
from .report import console_table, markdown
from .summary import summarize
from .sweep import RunConfig, Sweep, run_sweep

DEFAULTS = dict(prompts="mixed", num_prompts=3, methods=["ar", "sd", "bv", "gbv", "kseq"], num_drafts=[1, 3],
                draft_lengths=[2, 4, 6], temperatures=[0.0, 1.0], drafts=["draft"], seeds=[0, 1], max_new_tokens=48)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    parser.add_argument("--prompts", default=d["prompts"], help="humaneval, mixed (built in) or a JSONL file (default mixed)")
    parser.add_argument("--field", default="text", help="JSONL field holding the prompt (default text)")
    parser.add_argument("--num-prompts", type=int, default=d["num_prompts"], help="first N prompts of the set (default 3)")
    parser.add_argument("--methods", nargs="+", default=d["methods"],
                        help="ar and verifiers, options in parentheses (e.g. ot(solver=gr,tol=1e-4))")
    parser.add_argument("--num-drafts", type=int, nargs="+", default=d["num_drafts"], help="values of K (single-draft methods use K = 1)")
    parser.add_argument("--draft-lengths", type=int, nargs="+", default=d["draft_lengths"], help="values of L")
    parser.add_argument("--temperatures", type=float, nargs="+", default=d["temperatures"], help="0 adds the greedy equality check")
    parser.add_argument("--drafts", nargs="+", default=d["drafts"], help="draft kinds: draft (transformer), ngram")
    parser.add_argument("--seeds", type=int, nargs="+", default=d["seeds"])
    parser.add_argument("--top-k", type=int, default=None, help="top-k warping of draft and target")
    parser.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"])
    parser.add_argument("--stop-at-eos", action="store_true", help="stop at EOS (default: every run makes max-new-tokens)")
    parser.add_argument("--deviation-samples", type=int, default=128,
                        help="one-token decodings per prompt for the first-token TV of inexact methods (0: skip)")
    parser.add_argument("--deviation-prompts", type=int, default=2, help="prompts used for the deviation (default 2)")
    parser.add_argument("--out", default="decode-results", help="output folder (default ./decode-results)")
    parser.add_argument("--plots-dir", default=None, help="folder for the PNGs (default: --out)")
    parser.add_argument("--cache", default=None, help="folder of the per-configuration run cache (default: OUT/cache)")
    parser.add_argument("--prefix", default="decode", help="file name prefix of the plots (default decode)")
    parser.add_argument("--title", default="Decode benchmark")
    parser.add_argument("--no-resume", action="store_true", help="ignore and overwrite cached runs")
    parser.add_argument("--target", default=None, help="target folder (default: embedded pair)")
    parser.add_argument("--draft", default=None, help="transformer draft folder (default: embedded pair)")
    parser.add_argument("--tiny", action="store_true", help="tiny random models (a smoke run without the pair)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")


def _models(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Any]:
    """Target, drafts by kind and tokenizer, loaded as the speed benchmark loads them."""
    from .speed import _models as load

    return load(argparse.Namespace(tiny=args.tiny, target=args.target, draft=args.draft, no_ngram="ngram" not in args.drafts))


def _model_fingerprint(model: Any) -> str:
    """A cheap hash of a model's parameters (shapes and leading values): retrained models miss the cache."""
    module = getattr(model, "model", None)
    digest = hashlib.sha1(type(model).__name__.encode())
    if isinstance(module, torch.nn.Module):
        for name, tensor in module.state_dict().items():
            digest.update(f"{name}{tuple(tensor.shape)}".encode())
            digest.update(tensor.flatten()[:64].float().numpy().tobytes())
    return digest.hexdigest()[:12]


def command(args: argparse.Namespace) -> str:
    """The full command line that reproduces this run (every sweep option spelled out)."""
    words = ["draftverify", "bench", "decode"]
    for name in ("prompts", "field", "num_prompts", "methods", "num_drafts", "draft_lengths", "temperatures", "drafts",
                 "seeds", "top_k", "max_new_tokens", "deviation_samples", "deviation_prompts", "out", "plots_dir", "cache",
                 "prefix", "title", "target", "draft", "threads"):
        value = getattr(args, name)
        if value is None:
            continue
        words.append("--" + name.replace("_", "-"))
        words.extend(str(v) for v in value) if isinstance(value, list) else words.append(str(value))
    words += [f"--{flag.replace('_', '-')}" for flag in ("stop_at_eos", "tiny") if getattr(args, flag)]
    return shlex.join(words)


def _deviations(args, context: dict[str, Any], configs: list[RunConfig], target, drafts, prompts: list[list[int]], exact: dict[str, bool],
                cache: Path) -> dict[str, dict[str, float]]:
    """First-token TV of every inexact configuration (mean over the first prompts), cached;
    ``{"error": message}`` where the one-token decodings raised."""
    out = {}
    for config in configs:
        if config.method == AR or exact.get(config.method, False) or args.deviation_samples <= 0:
            continue
        path = cache / f"deviation-{config.key(dict(context, samples=args.deviation_samples, deviation_prompts=args.deviation_prompts))}.json"
        if args.no_resume or not path.exists():
            try:
                values = [first_token_deviation(target, drafts[config.draft], ids, samples=args.deviation_samples, seed=0,
                                                **config.settings()) for ids in prompts[: args.deviation_prompts]]
            except Exception as error:  # a bug of the method: say so in the report, not cached
                out[config.label] = {"error": f"{type(error).__name__}: {error}"}
                continue
            mean = {k: sum(v[k] for v in values) / len(values) for k in ("tv", "noise")}
            path.write_text(json.dumps(dict(mean, samples=args.deviation_samples, prompts=len(values))))
        out[config.label] = json.loads(path.read_text())
    return out


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from ..verify import verifiers

    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.max_new_tokens < 1 or args.deviation_samples < 0 or args.deviation_prompts < 1:
        raise ValueError("--max-new-tokens and --deviation-prompts must be >= 1, --deviation-samples >= 0")
    sweep = Sweep(tuple(args.methods), tuple(args.num_drafts), tuple(args.draft_lengths), tuple(args.temperatures),
                  tuple(args.drafts), tuple(args.seeds), args.top_k)
    texts = load_prompts(args.prompts, field=args.field, limit=args.num_prompts)
    target, drafts, tokenizer = _models(args)
    prompts = [tokenizer.encode(text) for text in texts]
    out = Path(args.out)
    cache = Path(args.cache) if args.cache else out / "cache"
    context = dict(prompts=fingerprint(texts), target=_model_fingerprint(target), max_new_tokens=args.max_new_tokens,
                   stop_at_eos=args.stop_at_eos, drafts={k: _model_fingerprint(v) for k, v in drafts.items()})
    result = run_sweep(sweep, target, drafts, prompts, max_new_tokens=args.max_new_tokens,
                       ignore_eos=not args.stop_at_eos, cache_dir=cache, context=context,
                       resume=not args.no_resume, decode=tokenizer.decode)
    records = result.records
    exact = {info.name: info.exact for info in verifiers()}
    rows = summarize(records, exact)
    configs = [c for c in sweep.configs() if c.label not in result.failures]
    deviation = _deviations(args, context, configs, target, drafts, prompts, exact, cache)
    settings = dict(prompts=f"{args.prompts} (first {len(texts)})", seeds=list(args.seeds), max_new_tokens=args.max_new_tokens,
                    stop_at_eos=args.stop_at_eos, top_k=args.top_k, models="tiny random" if args.tiny else (args.target or "embedded pair"),
                    threads=torch.get_num_threads(), machine=f"{platform.machine()}, torch {torch.__version__}")
    meta = dict(title=args.title, command=command(args), settings=settings, failures=result.failures)
    _, plots = build_outputs(rows, meta, out, Path(args.plots_dir or out), args.prefix, deviation)
    with (out / "results.jsonl").open("w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    summary = dict(meta, rows=rows, deviation=deviation, plots=[str(p) for p in plots])
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print()
    print(console_table(rows))
    for row in rows:
        if row.get("exact") and row.get("greedy_equal", row["units"]) < row["units"]:
            print(f"warning: {row['label']} differs from ar at temperature 0 on "
                  f"{row['units'] - row['greedy_equal']} of {row['units']} units", file=sys.stderr)
    print(f"\nreport: {out / 'report.md'}", file=sys.stderr)
    return 0


def build_outputs(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path, plots_dir: Path, prefix: str,
                  deviation: dict[str, dict[str, float]]) -> tuple[str, list[Path]]:
    """Write the plots under ``plots_dir`` and ``report.md`` under ``out``; return both."""
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_all(rows, plots_dir, prefix)
    report = markdown(rows, meta, plots, out, deviation)
    (out / "report.md").write_text(report)
    return report, plots

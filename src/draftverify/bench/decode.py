"""`draftverify bench decode`: every method measured on a prompt set, with intervals, theory
beside measurement, a Markdown report and plots (issue 6).

Sweeps methods x K x L x temperature x draft kind over (prompt, seed) units with ``ar`` measured
on the same units in the same run (:mod:`.sweep`); metrics are defined in :mod:`.metrics`. Writes
to ``--out``: ``results.jsonl`` (one raw record per run), ``summary.json``, ``report.md``, the
plots (or under ``--plots-dir``) and ``cache/`` (or ``--cache``: per-configuration records, so
rerunning the same command resumes). Prints the summary JSON and a table. The default sweep (3
mixed prompts x 2 seeds, 32 configurations, 48 tokens: 192 runs) takes about a minute on the
embedded pair with one thread on this project's 2-core machine when nothing else runs (60 s on
2026-11-23; 6 minutes when it shared the cores with two other sweeps).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..engine import AR
from .models import ModelSettings, load_models
from .output import command_line, emit_json, machine
from .plots import plot_all
from .probes import REFERENCE_DRAWS, first_token_deviation
from .progress import track
from .prompts import fingerprint, load_prompts
from .report import console_table, markdown
from .summary import summarize
from .sweep import RunConfig, Sweep, run_sweep

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["DecodeSettings", "build_outputs", "run"]


@dataclass(frozen=True)
class DecodeSettings:
    """The sweep and its outputs, as ``draftverify bench decode``'s flags of the same names give them
    (the defaults are the command's): ``methods`` x ``num_drafts`` x ``draft_lengths`` x
    ``temperatures`` x ``drafts`` over ``seeds`` and the first ``num_prompts`` prompts of
    ``prompts``; the models by ``target`` / ``draft`` / ``tiny`` (see :attr:`models`)."""

    prompts: str = "mixed"
    field: str = "text"
    num_prompts: int = 3
    methods: tuple[str, ...] = ("ar", "sd", "bv", "kseq")  # gbv: not with the default pair's feature draft
    num_drafts: tuple[int, ...] = (1, 3)
    draft_lengths: tuple[int, ...] = (2, 4, 6)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    drafts: tuple[str, ...] = ("draft",)
    seeds: tuple[int, ...] = (0, 1)
    top_k: int | None = None
    max_new_tokens: int = 48
    stop_at_eos: bool = False
    deviation_samples: int = 128  # one-token decodings per prompt for the first-token TV (0: skip)
    deviation_prompts: int = 2
    out: str = "decode-results"
    plots_dir: str | None = None  # None: out
    cache: str | None = None  # None: out/cache
    prefix: str = "decode"
    title: str = "Decode benchmark"
    no_resume: bool = False
    target: str | None = None
    draft: str | None = None
    tiny: bool = False
    threads: int | None = None  # None: torch's choice

    def __post_init__(self) -> None:
        self.models  # the model settings refuse bad draft kinds here, before anything loads

    @property
    def models(self) -> ModelSettings:
        """The target and drafts to load."""
        return ModelSettings(target=self.target, draft=self.draft, tiny=self.tiny, drafts=self.drafts)


def _model_fingerprint(model: Any) -> str:
    """A cheap hash of a model's parameters (shapes and leading values): retrained models miss the cache."""
    module = getattr(model, "model", None)
    digest = hashlib.sha1(type(model).__name__.encode())
    if isinstance(module, torch.nn.Module):
        for name, tensor in module.state_dict().items():
            digest.update(f"{name}{tuple(tensor.shape)}".encode())
            digest.update(tensor.flatten()[:64].float().numpy().tobytes())
    return digest.hexdigest()[:12]


def _deviations(args: DecodeSettings, context: dict[str, Any], configs: list[RunConfig], target, drafts, prompts: list[list[int]], exact: dict[str, bool],
                cache: Path, progress: Progress | None = None) -> dict[str, dict[str, float]]:
    """First-token TV of every inexact configuration (mean over the first prompts), cached;
    ``{"error": message}`` where the one-token decodings raised."""
    out = {}
    for config in track(progress, configs, "first-token deviation"):
        if config.method == AR or exact.get(config.method, False) or args.deviation_samples <= 0:
            continue
        path = cache / f"deviation-{config.key(dict(context, samples=args.deviation_samples, deviation_prompts=args.deviation_prompts, reference_draws=REFERENCE_DRAWS))}.json"
        if args.no_resume or not path.exists():
            try:
                values = [first_token_deviation(target, drafts[config.draft], ids, samples=args.deviation_samples, seed=0,
                                                **config.settings()) for ids in prompts[: args.deviation_prompts]]
            except Exception as error:  # a bug of the method: say so in the report, not cached
                out[config.label] = {"error": f"{type(error).__name__}: {error}"}
                continue
            mean = {k: sum(v[k] for v in values) / len(values) for k in ("tv", "noise")}
            # one p-value for the prompts together: the smallest, Bonferroni-corrected
            p_value = min(1.0, len(values) * min(v["p_value"] for v in values))
            path.write_text(json.dumps(dict(mean, p_value=p_value, samples=args.deviation_samples, prompts=len(values))))
        out[config.label] = json.loads(path.read_text())
    return out


def run(args: DecodeSettings, progress: Progress | None = None) -> int:
    from transformers.utils import logging as hf_logging

    from ..verify import verifiers

    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    sweep = Sweep(args.methods, args.num_drafts, args.draft_lengths, args.temperatures, args.drafts, args.seeds, args.top_k)
    texts = load_prompts(args.prompts, field=args.field, limit=args.num_prompts)
    target, drafts, tokenizer = load_models(args.models)
    prompts = [tokenizer.encode(text) for text in texts]
    out = Path(args.out)
    cache = Path(args.cache) if args.cache else out / "cache"
    context = dict(prompts=fingerprint(texts), target=_model_fingerprint(target), max_new_tokens=args.max_new_tokens,
                   stop_at_eos=args.stop_at_eos, drafts={k: _model_fingerprint(v) for k, v in drafts.items()})
    result = run_sweep(sweep, target, drafts, prompts, max_new_tokens=args.max_new_tokens,
                       ignore_eos=not args.stop_at_eos, cache_dir=cache, context=context,
                       resume=not args.no_resume, decode=tokenizer.decode, progress=progress)
    records = result.records
    exact = {info.name: info.exact for info in verifiers()}
    rows = summarize(records, exact)
    configs = [c for c in sweep.configs() if c.label not in result.failures]
    deviation = _deviations(args, context, configs, target, drafts, prompts, exact, cache, progress)
    settings = dict(prompts=f"{args.prompts} (first {len(texts)})", seeds=list(args.seeds), max_new_tokens=args.max_new_tokens,
                    stop_at_eos=args.stop_at_eos, top_k=args.top_k, models="tiny random" if args.tiny else (args.target or "embedded pair"),
                    threads=torch.get_num_threads(), machine=f"{machine()['cpu']}, torch {torch.__version__}")
    meta = dict(title=args.title, command=command_line("decode", args, leave_out=("no_resume",)), settings=settings, failures=result.failures)
    _, plots = build_outputs(rows, meta, out, Path(args.plots_dir or out), args.prefix, deviation)
    with (out / "results.jsonl").open("w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)
    summary = dict(meta, rows=rows, deviation=deviation, plots=[str(p) for p in plots])
    emit_json(summary, out / "summary.json")
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

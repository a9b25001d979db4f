"""`draftverify sprinter train|report`: SPRINTER's classifier for a pair, and what it costs."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

__all__ = ["add_parser"]

_DOCS = Path("docs")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sprinter", help="SPRINTER (approximate, seed 003): train its classifier, report its cost")
    commands = parser.add_subparsers(dest="sprinter_command", required=True)

    train = commands.add_parser("train", help="collect data over the four prefix kinds, train the classifier per lambda")
    _pair_arguments(train)
    train.add_argument("--output", default=None, help="classifier folder (default: the embedded pair's sprinter/)")
    train.add_argument("--sequences-per-kind", type=int, default=48)
    train.add_argument("--prefix-length", type=int, default=64)
    train.add_argument("--positions", type=int, default=32, help="drafted tokens recorded per sequence")
    train.add_argument("--files", type=int, default=120, help="corpus files to draw prefixes from")
    train.add_argument("--default-lambda", type=float, default=1.2, help="lambda of the shipped classifier.json")
    train.add_argument("--figure", default=str(_DOCS / "img" / "sprinter_roc.png"), help="ROC figure (PNG)")
    train.add_argument("--data", default=None, help="cache of the collected data (.npz): loaded if it exists, else written")
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(func=_train)

    report = commands.add_parser("report", help="speed, deviation and quality of sprinter vs sd and ar (docs/results/sprinter.md)")
    _pair_arguments(report)
    report.add_argument("--classifier", default=None, help="a saved classifier (default: the shipped one)")
    report.add_argument("--prompts", type=int, default=20)
    report.add_argument("--max-new-tokens", type=int, default=48)
    report.add_argument("--thresholds", type=float, nargs="+", default=None,
                        help="values of tau (default: 0, 1 and those giving 90/70/50/30/10%% yes on held-out tokens)")
    report.add_argument("--draft-length", type=int, default=4, help="sd's L")
    report.add_argument("--sprinter-cap", type=int, default=8, help="the longest SPRINTER run")
    report.add_argument("--results-dir", default=str(_DOCS / "results"))
    report.add_argument("--img-dir", default=str(_DOCS / "img"))
    report.add_argument("--seed", type=int, default=0)
    report.set_defaults(func=_report)


def _pair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None, help="target model folder (default: embedded)")
    parser.add_argument("--draft", default=None, help="draft model folder (default: embedded; must be a transformers model)")


def _load(args):
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from ..models.pair import load_pair

    pair = load_pair(args.target, args.draft)
    if pair.draft_name == "ngram":
        raise ValueError("SPRINTER's classifier reads the draft's hidden state: use a transformers draft")
    return pair


def _command(args: argparse.Namespace, skip: tuple[str, ...] = ("func", "command", "sprinter_command")) -> str:
    """The command line that reproduces this run (every option spelled out)."""
    words = ["draftverify", "sprinter", args.sprinter_command]
    for name, value in vars(args).items():
        if name in skip or value is None:
            continue
        values = value if isinstance(value, list) else [value]
        words += [f"--{name.replace('_', '-')}", *(shlex.quote(str(v)) for v in values)]
    return " ".join(words)


def _train(args: argparse.Namespace) -> int:
    import torch

    from ..approx.data import SprinterData, collect
    from ..models.hidden import HiddenStateTap, draft_fingerprint
    from ..approx.load import DEFAULT_CLASSIFIER
    from ..approx.train import TrainSettings, corpus_documents, plot_roc, train_all

    settings = TrainSettings(sequences_per_kind=args.sequences_per_kind, prefix_length=args.prefix_length,
                             positions=args.positions, files=args.files, default_lambda=args.default_lambda, seed=args.seed)
    pair = _load(args)
    output = Path(args.output) if args.output else DEFAULT_CLASSIFIER.parent
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.data and Path(args.data).exists():
        data = SprinterData.load(args.data)
        print(f"loaded {len(data)} drafted tokens from {args.data}")
    else:
        documents = corpus_documents(pair.tokenizer, settings.files, settings.seed)
        data = collect(pair.target, pair.draft, documents, sequences_per_kind=settings.sequences_per_kind,
                       prefix_length=settings.prefix_length, positions=settings.positions, seed=settings.seed)
        print(f"collected {len(data)} drafted tokens from {len(documents)} files")
        if args.data:
            data.save(args.data)
    summary = train_all(data, HiddenStateTap(pair.draft).hidden_size, output, settings, draft_fingerprint(pair.draft))
    summary["command"] = _command(args)
    (output / "roc.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot_roc(summary, Path(args.figure))
    print(f"classifiers and roc.json in {output}; ROC figure {args.figure}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from ..approx.load import DEFAULT_CLASSIFIER
    from ..approx.render import write_report
    from ..approx.report import ReportSettings, run_report

    settings = ReportSettings(prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                              thresholds=tuple(args.thresholds) if args.thresholds else None,
                              draft_length=args.draft_length, sprinter_cap=args.sprinter_cap, seed=args.seed)
    pair = _load(args)
    result = run_report(pair, settings, classifier=args.classifier)
    embedded = args.target is None and args.draft is None
    result["pair"] = "the embedded pair" if embedded else f"target {args.target or 'embedded'}, draft {args.draft or 'embedded'}"
    result["classifier"] = args.classifier or "the one shipped with the embedded pair"
    roc_path = (Path(args.classifier).parent if args.classifier else DEFAULT_CLASSIFIER.parent) / "roc.json"
    roc = json.loads(roc_path.read_text()) if roc_path.exists() else None
    path = write_report(result, roc, _command(args), Path(args.results_dir), Path(args.img_dir))
    columns = ("method", "tokens_per_second", "speedup_vs_sd", "target_calls_per_token", "rouge_l_vs_sd", "audit_tv_draws")
    print(json.dumps([{k: r.get(k) for k in columns} for r in result["rows"]], indent=1))
    print(f"report: {path}")
    return 0

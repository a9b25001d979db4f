"""`draftverify bench NAME`: benchmarks that print JSON and a table.

Each benchmark is a module ``draftverify.bench.<module>`` with ``add_arguments(parser)`` and
``run(args) -> int``; add yours to ``_BENCHES``."""

from __future__ import annotations

import argparse
import importlib

_BENCHES: dict[str, tuple[str, str]] = {
    "verify": ("verify_speed", "microseconds per verify call against a numpy loop of sd"),
    "speed": ("speed", "tokens/s of ar, sd, bv and transformers assisted generation on HumanEval prompts"),
    "decode": ("decode", "sweep methods x K x L x temperature on a prompt set: acceptance, block efficiency, speedup, report and plots"),
    "ot": ("ot", "seed 001 Table 1 grid: ms per token of lp, maxflow, maxflow-cs and gr against the paper"),
    "model-cost": ("model_cost", "per-call cost of a target scoring L + 1 tokens against one token, and of a draft step"),
    "spectr-gbv": ("spectr_gbv", "SpecTr-GBV (seed 004) as published vs exact multi-draft verifiers, by exact enumeration on toys"),
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run a benchmark (prints JSON and a table)")
    benches = parser.add_subparsers(dest="bench", required=True)
    for name, (module_name, help_text) in _BENCHES.items():
        module = importlib.import_module(f"draftverify.bench.{module_name}")
        bench_parser = benches.add_parser(name, help=help_text)
        module.add_arguments(bench_parser)
        bench_parser.set_defaults(func=module.run)

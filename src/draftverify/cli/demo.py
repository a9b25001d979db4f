"""`draftverify demo`: the main job on the embedded default, then the exactness table.

1. A HumanEval prompt completed by the embedded model pair with ``ar`` and the main methods, with
   tokens/s, speedup over ``ar`` (same run), acceptance and tokens per target call.
2. Every exact verifier decoded through the checker on a seeded known-law Markov pair: tokens per
   target call, acceptance pooled over verified tokens, and the exactness p-value.
"""

from __future__ import annotations

import argparse
import time

from ..testing import check_exactness, random_pair
from ..verify import get_verifier, verifiers


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="compare methods on the embedded pair, then check every verifier's exactness")
    parser.add_argument("--samples", type=int, default=600, help="decoded sequences per verifier in the exactness table")
    parser.add_argument("--draft-length", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--skip-models", action="store_true", help="only the exactness table")
    parser.set_defaults(func=run)


# (verifier, options, K): every exact verifier; `ot` with its fastest exact solver (`gr` is approximate,
# `lp` gives the same plan but is slow for a demo)
EXACTNESS_ROWS = [
    ("sd", {}, 1), ("bv", {}, 1), ("gbv", {}, 1), ("submaximal", {"fraction": 0.5}, 1),
    ("kseq", {}, 2), ("ot", {"solver": "maxflow-cs"}, 2), ("multidraft-bv", {}, 2),
]


def exactness_table(samples: int, draft_length: int, seed: int = 0) -> list[dict]:
    pair = random_pair(vocab_size=4, order=2, seed=seed)
    known = {info.name for info in verifiers()}
    rows = []
    for name, options, num_drafts in EXACTNESS_ROWS:
        if name not in known:
            continue
        start = time.perf_counter()
        report = check_exactness(
            get_verifier(name, **options), pair, num_drafts=num_drafts, draft_length=draft_length,
            num_tokens=4, samples=samples, seed=seed,
        )
        label = name + "".join(f" {v}" for v in options.values())
        rows.append(dict(verifier=label, drafts=num_drafts, report=report, seconds=time.perf_counter() - start))
    return rows


def run(args: argparse.Namespace) -> int:
    if not args.skip_models:
        from transformers.utils import logging as hf_logging

        from ..bench.compare import compare

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()

        print("== the embedded pair on HumanEval/0 (temperature 1) ==")
        compare(max_new_tokens=args.max_new_tokens)
        print()
    print(f"== exactness on a known-law Markov pair (V = 4, order 2, L = {args.draft_length}, {args.samples} sequences) ==")
    print(f"{'verifier':<20}{'K':>3}{'tokens/call':>13}{'acceptance':>12}{'p-value':>10}{'TV':>8}{'seconds':>9}")
    for row in exactness_table(args.samples, args.draft_length):
        r = row["report"]
        print(f"{row['verifier']:<20}{row['drafts']:>3}{r.tokens_per_call:>13.3f}{r.acceptance_rate:>12.3f}"
              f"{r.p_value:>10.3f}{r.tv:>8.3f}{row['seconds']:>9.1f}")
    print("p-value: chi-square test of the law of the first 4 tokens against the target's exact law;"
          " an exact verifier gives p uniform on [0, 1].")
    return 0

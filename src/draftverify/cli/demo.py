"""`draftverify demo`: the main job on the default pair, then the exactness table.

1. A chat prompt answered by the default pair (SmolLM2-135M-Instruct and its draft) with ``ar`` and the main methods, with
   tokens/s, speedup over ``ar`` (same run), acceptance and tokens per target call.
2. Every exact verifier decoded through the checker on a seeded known-law Markov pair: tokens per
   target call, acceptance pooled over verified tokens, the exactness p-value and the checker's result.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.progress import Progress

from ..bench.progress import track
from ..testing import check_exactness, random_pair
from ..verify import get_verifier, verifiers
from ._command import quiet_transformers
from ._progress import progress_bar

__all__ = ["demo", "exactness_table"]

# (verifier, options, K): every exact verifier; `ot` with its fastest exact solver (`gr` is approximate,
# `lp` gives the same plan but is slow for a demo)
EXACTNESS_ROWS = [
    ("sd", {}, 1), ("bv", {}, 1), ("gbv", {}, 1), ("submaximal", {"fraction": 0.5}, 1),
    ("kseq", {}, 2), ("ot", {"solver": "maxflow-cs"}, 2), ("multidraft-bv", {}, 2),
]


NUM_TOKENS = 3  # the law of the first 3 tokens: 64 outcomes, judged (detectable TV <= 0.1) from about 2000 samples


def exactness_table(samples: int, draft_length: int, seed: int = 0, progress: Progress | None = None) -> list[dict]:
    """One row per exact verifier of :data:`EXACTNESS_ROWS`: its checker report and the seconds it took."""
    pair = random_pair(vocab_size=4, order=2, seed=seed)
    known = {info.name for info in verifiers()}
    rows = [row for row in EXACTNESS_ROWS if row[0] in known]
    table = []
    for name, options, num_drafts in track(progress, rows, "exactness table"):
        start = time.perf_counter()
        report = check_exactness(
            get_verifier(name, **options), pair, num_drafts=num_drafts, draft_length=draft_length,
            num_tokens=NUM_TOKENS, samples=samples, seed=seed,
        )
        label = name + "".join(f" {v}" for v in options.values())
        table.append(dict(verifier=label, drafts=num_drafts, report=report, seconds=time.perf_counter() - start))
    return table


def demo(
    ctx: typer.Context,
    samples: Annotated[int, typer.Option(min=1, help="Decoded sequences per verifier in the exactness table.")] = 2000,
    draft_length: Annotated[int, typer.Option(min=1, help="L, tokens per draft in the exactness table.")] = 2,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens each method generates on the prompt.")] = 96,
    skip_models: Annotated[bool, typer.Option("--skip-models", help="Only the exactness table.")] = False,
) -> int:
    """Answer one chat prompt with each method on the default pair, then check every verifier's exactness."""
    with progress_bar(ctx) as progress:
        if not skip_models:
            from ..bench.compare import compare

            quiet_transformers()
            print("== SmolLM2-135M-Instruct with its draft, one chat prompt (temperature 0.6, L chosen while decoding) ==")
            # a 135M model wanders at temperature 1; L from the decoding's own costs and acceptance (--draft-length auto):
            # on the GGUF blocks a target call of several tokens costs more than on float32 weights, and the best L is short
            compare(max_new_tokens=max_new_tokens, temperature=0.6, draft_length="auto", progress=progress)
            print(f"one run of {max_new_tokens} tokens per method on one prompt: tokens/s and speedups move a lot "
                  "from run to run on a shared CPU (sd has read 1.8x, then 0.3x); for repeated runs with "
                  "intervals, run `draftverify bench speed` (docs/results/speed.md).")
            print()
        print(f"== exactness on a known-law Markov pair (V = 4, order 2, L = {draft_length}, {samples} sequences) ==")
        print(f"{'verifier':<20}{'K':>3}{'tokens/call':>13}{'acceptance':>12}{'p-value':>10}{'TV':>8}"
              f"{'detectable':>12}{'result':>14}{'seconds':>9}")
        for row in exactness_table(samples, draft_length, progress=progress):
            r = row["report"]
            print(f"{row['verifier']:<20}{row['drafts']:>3}{r.tokens_per_call:>13.3f}{r.acceptance_rate:>12.3f}"
                  f"{r.p_value:>10.3f}{r.tv:>8.3f}{r.detectable_tv:>12.3f}{r.status:>14}{row['seconds']:>9.1f}")
    print(f"p-value: chi-square test of the law of the first {NUM_TOKENS} tokens against the target's exact law;"
          " an exact verifier gives p uniform on [0, 1]. detectable: the smallest total variation from the target"
          " the test sees (power 0.9); above 0.1 the result is inconclusive, never passed.")
    return 0

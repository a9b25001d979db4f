"""`draftverify bench verify`: microseconds per ``verify`` call, beside a plain numpy loop of `sd`.

For each vocabulary size V and draft length L: random float32 draft/target distributions shaped
like an LM's (softmax of heavy-tailed logits, target and draft correlated), a drafted block
sampled from the draft, and the median over repeated calls of each single-draft verifier, with
input validation (as users call it) and without (``validate=False``, as the engine calls it: its
inputs are valid by construction; the validation passes read all 2L + 1 rows). The baseline is the straightforward per-position numpy
implementation of token-level speculative sampling, timed in the same run on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from ..verify import get_verifier, verifiers


def lm_like_pair(vocab: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draft tokens [1, L], draft probs [1, L, V], target probs [1, L+1, V] (float32)."""
    gen = torch.Generator().manual_seed(seed)
    # heavy-tailed logits (Student t with 3 degrees of freedom), shared by target and draft; the
    # independent noise puts single-token acceptance at 0.8-0.9, as for a good real pair
    chi2 = torch.randn(3, length + 1, vocab, generator=gen).pow(2).mean(0)
    base = torch.randn(length + 1, vocab, generator=gen) / chi2.sqrt()
    target_logits = base + torch.randn(length + 1, vocab, generator=gen)
    draft_logits = base + torch.randn(length + 1, vocab, generator=gen)
    target = torch.softmax(target_logits, -1)[None]
    draft = torch.softmax(draft_logits[:length], -1)[None]
    tokens = torch.multinomial(draft[0], 1, generator=gen).T
    return tokens, draft, target


def numpy_sd(tokens: np.ndarray, draft: np.ndarray, target: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Baseline: token-level speculative sampling, one Python iteration per position."""
    out = []
    for i, x in enumerate(tokens):
        if rng.random() < min(1.0, target[i, x] / draft[i, x]):
            out.append(int(x))
            continue
        residual = np.maximum(target[i] - draft[i], 0)
        out.append(int(rng.choice(len(residual), p=residual / residual.sum())))
        return out
    out.append(int(rng.choice(target.shape[1], p=target[-1] / target[-1].sum(dtype=np.float64))))
    return out


def _median_us(call, repeats: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", type=int, nargs="+", default=[1000, 32000, 128000])
    parser.add_argument("--draft-length", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: per-call latency)")
    parser.add_argument("--output", help="also write the JSON rows to this file")


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    names = [info.name for info in verifiers() if info.exact and not info.multi_draft]
    rows = []
    for vocab in args.vocab:
        for length in args.draft_length:
            tokens, draft, target = lm_like_pair(vocab, length, seed=vocab + length)
            generator = torch.Generator().manual_seed(0)
            np_args = (tokens[0].numpy(), draft[0].numpy(), target[0].numpy(), np.random.default_rng(0))
            baseline = _median_us(lambda: numpy_sd(*np_args), args.repeats)
            row = {"vocab": vocab, "draft_length": length, "numpy_sd_loop_us": round(baseline, 1)}
            for name in names:
                for suffix, validate in (("", True), ("_novalidate", False)):
                    verifier = get_verifier(name, validate=validate)
                    key = f"{name}{suffix}"
                    row[f"{key}_us"] = round(
                        _median_us(lambda: verifier.verify(tokens, draft, target, generator=generator), args.repeats), 1
                    )
                    row[f"{key}_speedup_vs_numpy"] = round(baseline / row[f"{key}_us"], 2)
            rows.append(row)
    print(json.dumps({"benchmark": "verify", "threads": args.threads, "dtype": "float32", "rows": rows}))
    header = ["V", "L", "numpy sd loop"] + names
    print("\nmicroseconds per call, validated / validate=False (speedup over the numpy loop)")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        cells = [str(row["vocab"]), str(row["draft_length"]), f'{row["numpy_sd_loop_us"]:.0f}']
        cells += [
            f'{row[f"{n}_us"]:.0f} / {row[f"{n}_novalidate_us"]:.0f} ({row[f"{n}_novalidate_speedup_vs_numpy"]:.1f}x)'
            for n in names
        ]
        print("| " + " | ".join(cells) + " |")
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0

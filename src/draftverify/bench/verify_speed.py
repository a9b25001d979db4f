"""`draftverify bench verify`: microseconds per verification call, beside a plain numpy loop of `sd`.

Three measurements, each beside the baseline timed in the same run on the same inputs (the
straightforward per-position numpy implementation of token-level speculative sampling):

1. per-row ``verify`` latency of every exact single-draft verifier, with input validation (as users
   call it) and without (``validate=False``, as the engine calls it), at each V and L;
2. batched kernels (:mod:`draftverify.verify.batched`) on a batch of one row at each V and L,
   through ``verify_batch`` validated and unvalidated (``max_draft_len`` given, uniforms drawn
   inside: what a serving engine's call costs);
3. batch throughput in rows per second at ``--batch-vocab`` and ``--batch-draft-length``: one
   batched call for B rows against B numpy loops and B per-row ``verify`` calls.

Inputs: random float32 draft/target distributions shaped like an LM's (softmax of heavy-tailed
logits, target and draft correlated) and a drafted block sampled from the draft. Batched kernels are
also timed on CUDA when ``torch.cuda.is_available()`` (synchronised around each call), through
``verify_batch`` and captured in a CUDA graph (:class:`~draftverify.verify.graphs.GraphedKernel`,
each call drawing its uniforms on the device first); otherwise the CUDA columns are null and the
table says so.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from ..tables import table
from ..verify import get_verifier, verifiers
from ..verify.batched import draw_uniforms
from ..verify.graphs import GraphedKernel
from .output import emit_json
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress


@dataclass(frozen=True)
class VerifySpeedSettings:
    """What ``draftverify bench verify`` times, as its flags of the same names give it (the defaults
    are the command's): latency at each ``vocab`` x ``draft_length``, throughput at each of
    ``batch_sizes`` rows of ``batch_vocab`` x ``batch_draft_length``, medians of ``repeats`` calls."""

    vocab: tuple[int, ...] = (1000, 32000, 128000)
    draft_length: tuple[int, ...] = (4, 8)
    repeats: int = 200
    batch_sizes: tuple[int, ...] = (1, 8, 64)
    batch_vocab: int = 32000
    batch_draft_length: int = 4
    threads: int = 1
    json: str | None = None


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


def flat_batch(rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Per-row (tokens [1, L], draft [1, L, V], target [1, L+1, V]) -> the flattened ragged layout:
    draft_token_ids [num_tokens], draft_probs [num_tokens, V], target_probs [num_tokens + B, V],
    cu_num_draft_tokens [B]."""
    tokens = torch.cat([r[0][0] for r in rows])
    draft = torch.cat([r[1][0] for r in rows])
    target = torch.cat([r[2][0] for r in rows])
    cu = torch.tensor([r[0].shape[1] for r in rows]).cumsum(0)
    return tokens, draft, target, cu


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


def _median_us(call: Callable[[], object], repeats: int, cuda: bool = False) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def batched_names() -> list[str]:
    """The registered verifiers with a batched kernel."""
    return [info.name for info in verifiers() if info.batched]


def _batched_verifier(name: str, validate: bool):
    """Verifier ``name`` as the batched rows time it (``submaximal`` withholding half the overlap)."""
    return get_verifier(name, validate=validate, **({"fraction": 0.5} if name == "submaximal" else {}))


def _batched_call(name: str, arrays, max_len: int, validate: bool, device: str) -> Callable[[], object]:
    tokens, draft, target, cu = (a.to(device) for a in arrays)
    generator = torch.Generator(device=device).manual_seed(0)
    verifier = _batched_verifier(name, validate)
    return lambda: verifier.verify_batch(tokens, draft, target, cu, generator=generator, max_draft_len=max_len)


def _graphed_call(name: str, arrays, max_len: int) -> Callable[[], object]:
    """The batched kernel captured in a CUDA graph (:class:`~draftverify.verify.graphs.GraphedKernel`),
    each call drawing its uniforms on the device first, as a serving step would."""
    tokens, draft, target, cu = (a.to("cuda") for a in arrays)
    generator = torch.Generator(device="cuda").manual_seed(0)
    verifier = _batched_verifier(name, False)

    def uniforms():
        return None if verifier.deterministic else draw_uniforms(tokens.shape[0], cu.shape[0], generator, "cuda")

    graphed = GraphedKernel(verifier, tokens, draft, target, cu, uniforms(), max_len)
    return lambda: graphed(tokens, draft, target, cu, uniforms())


def latency_rows(args: VerifySpeedSettings, names: list[str], cuda: bool, progress: Progress | None = None) -> list[dict]:
    rows = []
    cells = list(itertools.product(args.vocab, args.draft_length))
    for vocab, length in track(progress, cells, "latency at each V and L"):
        pair = lm_like_pair(vocab, length, seed=vocab + length)
        tokens, draft, target = pair
        generator = torch.Generator().manual_seed(0)
        np_args = (tokens[0].numpy(), draft[0].numpy(), target[0].numpy(), np.random.default_rng(0))
        baseline = _median_us(lambda: numpy_sd(*np_args), args.repeats)
        row = {"vocab": vocab, "draft_length": length, "numpy_sd_loop_us": round(baseline, 1)}
        timings = {}
        for name in names:
            for suffix, validate in (("", True), ("_novalidate", False)):
                verifier = get_verifier(name, validate=validate)
                timings[f"{name}{suffix}"] = _median_us(
                    lambda: verifier.verify(tokens, draft, target, generator=generator), args.repeats
                )
        for name in batched_names():
            for suffix, validate in (("", True), ("_novalidate", False)):
                call = _batched_call(name, flat_batch([pair]), length, validate, "cpu")
                timings[f"batched_{name}{suffix}"] = _median_us(call, args.repeats)
            if cuda:
                call = _batched_call(name, flat_batch([pair]), length, False, "cuda")
                timings[f"batched_{name}_cuda_novalidate"] = _median_us(call, args.repeats, cuda=True)
                call = _graphed_call(name, flat_batch([pair]), length)
                timings[f"batched_{name}_cuda_graph"] = _median_us(call, args.repeats, cuda=True)
        for key, value in timings.items():
            row[f"{key}_us"] = round(value, 1)
            row[f"{key}_speedup_vs_numpy"] = round(baseline / value, 2)
        rows.append(row)
    return rows


def throughput_rows(args: VerifySpeedSettings, cuda: bool, progress: Progress | None = None) -> list[dict]:
    """Rows per second: one batched call of B rows against B single calls (numpy, per-row verify)."""
    vocab, length = args.batch_vocab, args.batch_draft_length
    rows = []
    for batch in track(progress, args.batch_sizes, "throughput at each batch size"):
        pairs = [lm_like_pair(vocab, length, seed=1000 + b) for b in range(batch)]
        np_pairs = [(t[0].numpy(), d[0].numpy(), p[0].numpy()) for t, d, p in pairs]
        rng, generator = np.random.default_rng(0), torch.Generator().manual_seed(0)
        timings = {"numpy_sd_loop": _median_us(lambda: [numpy_sd(*a, rng) for a in np_pairs], args.repeats)}
        for name in ("sd", "bv"):
            verifier = get_verifier(name, validate=False)
            timings[f"per_row_{name}"] = _median_us(
                lambda: [verifier.verify(*p, generator=generator) for p in pairs], args.repeats
            )
        arrays = flat_batch(pairs)
        for name in batched_names():
            timings[f"batched_{name}"] = _median_us(_batched_call(name, arrays, length, False, "cpu"), args.repeats)
            if cuda:
                call = _batched_call(name, arrays, length, False, "cuda")
                timings[f"batched_{name}_cuda"] = _median_us(call, args.repeats, cuda=True)
                timings[f"batched_{name}_cuda_graph"] = _median_us(_graphed_call(name, arrays, length), args.repeats, cuda=True)
        row = {"batch": batch, "vocab": vocab, "draft_length": length}
        row.update({f"{key}_rows_per_s": round(batch / (us * 1e-6), 1) for key, us in timings.items()})
        rows.append(row)
    return rows


def run(args: VerifySpeedSettings, progress: Progress | None = None) -> int:
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    names = [info.name for info in verifiers() if info.exact and not info.multi_draft]
    report = {
        "benchmark": "verify",
        "threads": args.threads,
        "dtype": "float32",
        "cuda": torch.cuda.get_device_name() if cuda else None,
        "rows": latency_rows(args, names, cuda, progress),
        "throughput": throughput_rows(args, cuda, progress),
    }
    emit_json(report, args.json)
    _print_tables(report, names)
    return 0


def _print_tables(report: dict, names: list[str]) -> None:
    cuda = report["cuda"] is not None
    batched = batched_names()
    print("\nper-row verify: microseconds per call, validated / validate=False (speedup over the numpy loop)")
    print(_latency_table(["V", "L", "numpy sd loop"] + names, report["rows"], names, ""))
    print("\nbatched kernels, one row: microseconds per call, validated / validate=False (speedup over the numpy loop)")
    print(_latency_table(["V", "L", "numpy sd loop"] + [f"batched {n}" for n in batched], report["rows"], batched, "batched_"))
    if cuda:
        print(f"\nbatched kernels on CUDA ({report['cuda']}), validate=False: microseconds per call")
        print(table(["V", "L"] + [f"{n} cuda / graph" for n in batched],
                    [[str(row["vocab"]), str(row["draft_length"])] + [
                        f'{row[f"batched_{n}_cuda_novalidate_us"]:.0f} / {row[f"batched_{n}_cuda_graph_us"]:.0f}' for n in batched]
                     for row in report["rows"]]))
    else:
        print("\nCUDA: not available on this machine, CUDA columns skipped")
    first = report["throughput"][0] if report["throughput"] else None
    if first is None:
        return
    print(f"\nthroughput at V = {first['vocab']}, L = {first['draft_length']}: rows per second (validate=False)")
    keys = [k[: -len("_rows_per_s")] for k in first if k.endswith("_rows_per_s")]
    print(table(["B"] + [k.replace("_", " ") for k in keys],
                [[str(row["batch"])] + [f'{row[f"{k}_rows_per_s"]:.0f}' for k in keys] for row in report["throughput"]]))


def _latency_table(header: list[str], rows: list[dict], names: list[str], prefix: str) -> str:
    return table(header, [
        [str(row["vocab"]), str(row["draft_length"]), f'{row["numpy_sd_loop_us"]:.0f}'] + [
            f'{row[f"{prefix}{n}_us"]:.0f} / {row[f"{prefix}{n}_novalidate_us"]:.0f} '
            f'({row[f"{prefix}{n}_novalidate_speedup_vs_numpy"]:.1f}x)'
            for n in names
        ]
        for row in rows
    ])

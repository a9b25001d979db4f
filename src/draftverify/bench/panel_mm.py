"""Microseconds per small-row product x [M, K] @ W [K, N] with W out of cache: the panel kernel
(float32 and int8, :mod:`draftverify.models.panel_mm`; on AVX-512 CPUs its product over the GGML Q4_1
blocks the weights are made of, :mod:`draftverify.models.ggml_blocks`, and where its 8-bit activation
product runs compiled (AVX-512 VNNI, or AVX2 with F16C) those blocks times activations rounded to 8
bits, ``_q8``) beside torch.mm (MKL),
oneDNN's prepacked linear (what the eager lean forwards run) and numpy (OpenBLAS), and a copy
bandwidth, in one run. The weights are dequantized from random Q4_1 blocks, as SmolLM2's are (a
float32 kernel sees float32 weights like any other).

``copies`` distinct weights of the shape, cycled (together far larger than the L3 cache), so each
product streams its weights from memory as a model's layers do. Kernels and row counts take turns
within each round, so load drifts hit all alike; the median (or ``--statistic min``: the fastest,
the round least disturbed by other processes on a loaded machine) over ``--repeats`` rounds, on
the wall clock or (``--clock cpu``, one thread only) the thread's CPU clock, which leaves out the time
other processes hold the core (not their share of the memory bus). ``r(M)`` is a
kernel's time for M rows over its own time for one row; ``bandwidth`` its one-row weight bytes per
second over the copy bandwidth (bytes read plus bytes written per second of a large ``copy_``); the
bytes are the kernel's own (int8 a quarter of float32's, Q4_1 blocks 5/32).
Goals (issue 27): r(5) <= 1.2, r(9) <= 1.4, r(17) <= 2.0; one row at >= 85% of copy bandwidth.

Run: ``draftverify bench panel-mm`` (JSON then a table).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from ..models.ggml_blocks import BlockLinear, int8_activations_compiled, int8_activations_isa, random_q4_1
from ..models.panel_mm import PanelLinear, kernel
from ..tables import table_of
from .output import emit_json
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["CLOCKS", "STATISTICS", "PanelMmSettings", "check_clock", "copy_bandwidth", "run", "time_products"]

STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "min": min}  # of the rounds
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}  # seconds

Product = Callable[[torch.Tensor, int], object]  # (x [M, K], weight index) -> x @ W_index


def check_clock(clock: str, threads: int) -> None:
    """ValueError naming --clock (and --threads) unless ``clock`` is one of :data:`CLOCKS` that can
    time ``threads`` threads (the CPU clock counts the calling thread only)."""
    if clock not in CLOCKS:
        raise ValueError(f"--clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    if clock == "cpu" and threads != 1:
        raise ValueError(f"--clock cpu times one thread; it conflicts with --threads {threads}")


def copy_bandwidth(megabytes: int = 256, repeats: int = 5, clock: str = "wall") -> float:
    """Bytes read plus bytes written per second by ``copy_`` of a buffer far larger than the caches
    (the best of ``repeats`` on ``clock``, see :data:`CLOCKS`)."""
    now = CLOCKS[clock]
    source = torch.ones(megabytes * 2**18)  # float32: megabytes MiB
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = now()
        target.copy_(source)
        best = min(best, now() - start)
    return 2 * source.numel() * 4 / best


def _products(weights: list[torch.Tensor]) -> tuple[dict[str, Product], dict[str, int]]:
    """Each kernel as a call on (x, weight index), its weights prepared once as it needs them, and
    the bytes of one weight as it stores them."""
    products: dict[str, Product] = {}
    nbytes = {name: weights[0].numel() * 4 for name in ("torch_mm", "onednn", "numpy")}
    for isa in kernel().isas:  # each instruction set the CPU runs, float32 and int8
        for quantize in (None, "int8"):
            name, linears = f"panel_{isa}" + ("_int8" if quantize else ""), [PanelLinear(w, None, quantize, isa) for w in weights]
            products[name], nbytes[name] = lambda x, i, linears=linears: linears[i](x), linears[0].nbytes
    if "avx512" in kernel().isas:
        blocks = [BlockLinear(w, None) for w in weights]
        products["panel_avx512_q4_1"], nbytes["panel_avx512_q4_1"] = lambda x, i: blocks[i](x), blocks[0].nbytes
    if int8_activations_compiled():  # the same blocks times 8-bit activations (VNNI, else AVX2)
        q8, name = [BlockLinear(w, None, "int8") for w in weights], f"panel_{int8_activations_isa()}_q4_1_q8"
        products[name], nbytes[name] = lambda x, i: q8[i](x), q8[0].nbytes
    products["torch_mm"] = lambda x, i: torch.mm(x, weights[i])
    onednn = [torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), 5) for w in weights]
    products["onednn"] = lambda x, i: torch.ops.mkldnn._linear_pointwise(x, onednn[i], None, "none", [], "")
    arrays = [w.numpy() for w in weights]
    products["numpy"] = lambda x, i: x.numpy() @ arrays[i]
    return products, nbytes


def time_products(shape: tuple[int, int], rows: list[int], *, copies: int, repeats: int, seed: int = 0,
                  statistic: str = "median", clock: str = "wall",
                  progress: Progress | None = None) -> tuple[dict[str, dict[int, float]], dict[str, int]]:
    """Seconds per product (``statistic`` of the rounds on ``clock``) for each kernel and row count
    (module doc), and each kernel's bytes per weight matrix."""
    now = CLOCKS[clock]
    generator = torch.Generator().manual_seed(seed)
    weights = [random_q4_1(shape, generator) for _ in range(copies)]
    products, nbytes = _products(weights)
    inputs = {m: torch.randn(m, shape[0], generator=generator) for m in rows}
    seconds: dict[tuple[str, int], list[float]] = {(name, m): [] for name in products for m in rows}
    for name, m in seconds:  # warm-up: every weight once
        for i in range(copies):
            products[name](inputs[m], i)
    for _ in track(progress, range(repeats), f"rounds {shape[0]}x{shape[1]}"):
        for (name, m), values in seconds.items():
            product, x = products[name], inputs[m]
            start = now()
            for i in range(copies):
                product(x, i)
            values.append((now() - start) / copies)
    out: dict[str, dict[int, float]] = {}
    for (name, m), values in seconds.items():
        out.setdefault(name, {})[m] = STATISTICS[statistic](values)
    return out, nbytes


@dataclass(frozen=True)
class PanelMmSettings:
    """What ``draftverify bench panel-mm`` times, as its flags of the same names give it (the
    defaults are the command's): ``shape`` the weight shapes (in, out)."""

    shape: tuple[tuple[int, int], ...] = ((576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152))
    rows: tuple[int, ...] = (1, 2, 5, 9, 17, 32)
    megabytes: int = 400
    repeats: int = 7
    threads: int = 1
    statistic: str = "median"
    clock: str = "wall"
    json: str | None = None


def run(args: PanelMmSettings, progress: Progress | None = None) -> int:
    torch.set_num_threads(args.threads)
    status = kernel()
    bandwidth = copy_bandwidth(clock=args.clock)
    results = []
    for k, n in args.shape:
        copies = max(2, round(args.megabytes * 2**20 / (k * n * 4)))
        times, nbytes = time_products((k, n), args.rows, copies=copies, repeats=args.repeats, statistic=args.statistic,
                              clock=args.clock, progress=progress)
        for name, by_rows in times.items():
            one = by_rows[args.rows[0]]
            weight_bytes = nbytes[name]
            results.append(dict(shape=[k, n], kernel=name, copies=copies,
                                us={m: t * 1e6 for m, t in by_rows.items()},
                                r={m: t / one for m, t in by_rows.items()},
                                bandwidth_fraction=weight_bytes / one / bandwidth))
    report = dict(settings=dict(repeats=args.repeats, statistic=args.statistic, clock=args.clock, megabytes=args.megabytes, threads=torch.get_num_threads(),
                                rows=args.rows),
                  kernel=dict(name=status.name, reason=status.reason, load_seconds=status.load_seconds,
                              built=status.built),
                  copy_bandwidth_gb_s=bandwidth / 1e9, goals=dict(r5=1.2, r9=1.4, r17=2.0, bandwidth_fraction=0.85),
                  results=results)
    emit_json(report, args.json)
    print(f"\ncopy bandwidth {bandwidth / 1e9:.1f} GB/s; kernel {status.name}"
          + (f" ({status.reason})" if status.reason else f" (loaded in {status.load_seconds:.1f} s)"))
    records = [dict(shape="x".join(map(str, r["shape"])), kernel=r["kernel"], bw=r["bandwidth_fraction"],
                    **{f"us_{m}": r["us"][m] for m in args.rows}, **{f"r_{m}": r["r"][m] for m in args.rows[1:]})
               for r in results]
    columns = [("shape", "shape", ""), ("kernel", "kernel", "")] + [(f"us_{m}", f"us M={m}", ".1f") for m in args.rows]
    columns += [(f"r_{m}", f"r({m})", ".2f") for m in args.rows[1:]] + [("bw", "of copy", ".2f")]
    print(table_of(records, columns, markdown=False))
    return 0

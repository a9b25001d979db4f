"""`draftverify bench panel-mm`: the options of :mod:`draftverify.bench.panel_mm`."""

from __future__ import annotations

from typing import Annotated

import typer

from .._command import settings_of
from .._options import JsonFile
from .._progress import progress_bar

__all__ = ["panel_mm"]

# the real target's products (SmolLM2-135M: hidden 576, MLP 1536, k/v 192, vocabulary 49152)
SHAPES = ["576x576", "576x192", "576x1536", "1536x576", "576x49152"]


def _shape(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts) or int(parts[0]) % 32:
        raise ValueError(f"--shape must be KxN with positive N and K a multiple of 32 (the weights are GGML Q4_1 "
                         f"blocks of 32), e.g. 576x1536, got {text!r}")
    return int(parts[0]), int(parts[1])


def panel_mm(
    ctx: typer.Context,
    shape: Annotated[list[str], typer.Option(metavar="KxN...", help="Weight shapes [in, out].")] = SHAPES,
    rows: Annotated[list[int], typer.Option(min=1, metavar="M...", help="Row counts; the first is r's base.")] = [1, 2, 5, 9, 17, 32],
    megabytes: Annotated[int, typer.Option(min=1, help="Total size of the cycled weights per shape (MiB).")] = 400,
    repeats: Annotated[int, typer.Option(min=1, help="Timed rounds.")] = 7,
    statistic: Annotated[str, typer.Option(help="Of the rounds: median, or min (the least disturbed on a loaded machine).")] = "median",
    clock: Annotated[str, typer.Option(help="wall, or cpu: the thread's CPU time (one thread; leaves out time other processes hold the core).")] = "wall",
    threads: Annotated[int, typer.Option(min=1, help="Torch threads.")] = 1,
    json: JsonFile = None,
) -> int:
    """Microseconds per small-row product over out-of-cache weights: the panel kernel against torch, oneDNN, numpy."""
    from ...bench import panel_mm as bench

    if statistic not in bench.STATISTICS:
        raise ValueError(f"--statistic must be one of {sorted(bench.STATISTICS)}, got {statistic!r}")
    bench.check_clock(clock, threads)
    settings = settings_of(ctx, bench.PanelMmSettings, shape=tuple(_shape(s) for s in shape))
    with progress_bar(ctx) as progress:
        return bench.run(settings, progress)

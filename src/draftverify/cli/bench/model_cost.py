"""`draftverify bench model-cost`: the options of :mod:`draftverify.bench.model_cost`."""

from __future__ import annotations

from typing import Annotated

import typer

from .._command import settings_of, quiet_transformers
from .._options import JsonFile
from .._progress import progress_bar

__all__ = ["model_cost"]


def model_cost(
    ctx: typer.Context,
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls per kind and variant.")] = 200,
    statistic: Annotated[str, typer.Option(help="Of the calls: median, or min (the least disturbed on a loaded machine).")] = "median",
    prompt_length: Annotated[int, typer.Option(min=1, help="Tokens the caches hold.")] = 150,
    draft_length: Annotated[list[int], typer.Option(min=1, metavar="L...", help="L: the target scores L + 1 tokens.")] = [1, 4, 8, 16],
    accepted: Annotated[int, typer.Option(min=0, help="Drafted tokens keep_draft keeps.")] = 1,
    clock: Annotated[str, typer.Option(help="wall, or cpu: the thread's CPU time (one thread; leaves out time other processes hold the core).")] = "wall",
    threads: Annotated[int, typer.Option(min=1, help="Torch threads.")] = 1,
    target: Annotated[str | None, typer.Option(help="Target model folder or .gguf file.", show_default="the default pair (SmolLM2)")] = None,
    draft: Annotated[str | None, typer.Option(help="Draft model folder (with --target: none unless given).",
                                              show_default="the default pair (SmolLM2)")] = None,
    kv_cache: Annotated[str, typer.Option(help="KV cache: static or dynamic.")] = "static",
    json: JsonFile = None,
) -> int:
    """Per-call cost of a target scoring L + 1 tokens against one token (r), of a draft step (c), per matrix kernel."""
    if accepted > min(draft_length):
        raise ValueError(f"--accepted must be <= every --draft-length, got {accepted} > {min(draft_length)}")
    quiet_transformers()
    from ...bench import model_cost as bench
    from ...bench.panel_mm import STATISTICS, check_clock

    if statistic not in STATISTICS:
        raise ValueError(f"--statistic must be one of {sorted(STATISTICS)}, got {statistic!r}")
    check_clock(clock, threads)

    with progress_bar(ctx) as progress:
        return bench.run(settings_of(ctx, bench.ModelCostSettings), progress)

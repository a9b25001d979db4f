"""`draftverify bench verify`: the options of :mod:`draftverify.bench.verify_speed`."""

from __future__ import annotations

from typing import Annotated

import typer

from .._command import settings_of
from .._options import JsonFile
from .._progress import progress_bar

__all__ = ["verify"]


def verify(
    ctx: typer.Context,
    vocab: Annotated[list[int], typer.Option(min=2, metavar="V...", help="Vocabulary sizes V.")] = [1000, 32000, 128000],
    draft_length: Annotated[list[int], typer.Option(min=1, metavar="L...", help="Draft lengths L.")] = [4, 8],
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls per measurement (their median is reported).")] = 200,
    batch_sizes: Annotated[list[int], typer.Option(min=1, metavar="B...", help="Rows per batched call.")] = [1, 8, 64],
    batch_vocab: Annotated[int, typer.Option(min=2, help="V of the batch throughput rows.")] = 32000,
    batch_draft_length: Annotated[int, typer.Option(min=1, help="L of the batch throughput rows.")] = 4,
    threads: Annotated[int, typer.Option(min=1, help="Torch threads (1: per-call latency).")] = 1,
    json: JsonFile = None,
) -> int:
    """Microseconds per verify call against a numpy loop of sd, and batch throughput."""
    from ...bench import verify_speed

    with progress_bar(ctx) as progress:
        return verify_speed.run(settings_of(ctx, verify_speed.VerifySpeedSettings), progress)

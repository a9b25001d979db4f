"""`draftverify bench spectr-gbv`: the options of :mod:`draftverify.bench.spectr_gbv`."""

from __future__ import annotations

from typing import Annotated

import typer

from .._command import settings_of
from .._options import JsonFile, Seed
from .._progress import progress_bar

__all__ = ["spectr_gbv"]


def spectr_gbv(
    ctx: typer.Context,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer instances (a smoke run).")] = False,
    runs: Annotated[int, typer.Option(min=0, help="Long-run decodings per verifier and instance (0: skip them).")] = 0,
    num_tokens: Annotated[int, typer.Option(min=1, help="Tokens per long-run decoding.")] = 60,
    seed: Seed = 0,
    json: JsonFile = None,
) -> int:
    """SpecTr-GBV (seed 004) as published against exact multi-draft verifiers, by exact enumeration on toys."""
    from ...bench import spectr_gbv as bench

    with progress_bar(ctx) as progress:
        return bench.run(settings_of(ctx, bench.SpectrGbvSettings), progress)

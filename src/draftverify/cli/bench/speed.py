"""`draftverify bench speed`: the options of :mod:`draftverify.bench.speed`."""

from __future__ import annotations

from typing import Annotated

import typer

from .._command import settings_of, quiet_transformers
from .._options import DraftFolder, JsonFile, Quantize, Seed, TargetFolder
from .._progress import progress_bar

__all__ = ["speed"]


def _length(text: str) -> int | str:
    """``--draft-length``: an int >= 1 or auto."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise typer.BadParameter(f"expected an int >= 1 or auto, got {text!r}")
    return int(text)


def speed(
    ctx: typer.Context,
    num_prompts: Annotated[int, typer.Option(min=1, help="The first N HumanEval prompts.")] = 8,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens each method generates per prompt.")] = 128,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature of draft and target.")] = 1.0,
    draft_length: Annotated[str, typer.Option(metavar="L|auto", callback=_length, help="L for every method, or auto: each "
                                              "step's L from the decoding's past (transformers' assisted row: its "
                                              "heuristic schedule).")] = "4",
    seed: Seed = 0,
    target: TargetFolder = None,
    draft: DraftFolder = None,
    ngram: Annotated[str | None, typer.Option(help="n-gram drafter folder.", show_default="the named pair's own")] = None,
    no_ngram: Annotated[bool, typer.Option("--no-ngram", help="Skip the n-gram drafter rows.")] = False,
    multi: Annotated[int, typer.Option(min=0, help="K of the extra multi-draft rows (kseq), 0 to skip them.")] = 4,
    tiny: Annotated[bool, typer.Option("--tiny", help="Tiny random models (a smoke run without the pair).")] = False,
    threads: Annotated[int, typer.Option(min=0, help="Torch threads (1: stable timings on a shared machine; "
                                         "0: torch's choice).")] = 1,
    batch: Annotated[int, typer.Option(min=0, help="Prompts of the batch-decoding rows (ar and sd), 0 to skip them.")] = 8,
    quantize: Quantize = None,
    json: JsonFile = None,
) -> int:
    """Tokens/s of ar, sd, bv and transformers assisted generation on HumanEval prompts."""
    quiet_transformers()
    from ...bench import speed as bench

    with progress_bar(ctx) as progress:
        return bench.run(settings_of(ctx, bench.SpeedSettings), progress)

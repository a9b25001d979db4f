"""`draftverify bench decode`: the options of :mod:`draftverify.bench.decode`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._command import settings_of, quiet_transformers
from .._options import DraftFolder, TargetFolder
from .._progress import progress_bar

__all__ = ["decode"]


def decode(
    ctx: typer.Context,
    prompts: Annotated[str, typer.Option(help="humaneval, mixed (built in) or a JSONL file.")] = "mixed",
    field: Annotated[str, typer.Option(help="JSONL field holding the prompt.")] = "text",
    num_prompts: Annotated[int, typer.Option(min=1, help="The first N prompts of the set.")] = 3,
    methods: Annotated[list[str], typer.Option(metavar="METHOD...", help="ar and verifiers, options in "
                                               "parentheses, e.g. ot(solver=gr,tol=1e-4); gbv needs a draft whose law "
                                               "depends on the prefix alone (--tiny).")] = ["ar", "sd", "bv", "kseq"],
    num_drafts: Annotated[list[int], typer.Option(min=1, metavar="K...", help="Values of K (single-draft methods "
                                                  "use K = 1).")] = [1, 3],
    draft_lengths: Annotated[list[int], typer.Option(min=1, metavar="L...", help="Values of L.")] = [2, 4, 6],
    temperatures: Annotated[list[float], typer.Option(min=0.0, metavar="T...", help="Temperatures (greedy runs at 0 only); 0 adds the "
                                                      "greedy equality check.")] = [0.0, 1.0],
    drafts: Annotated[list[str], typer.Option(metavar="KIND...", help="Draft kinds: draft (transformer), "
                                              "ngram.")] = ["draft"],
    seeds: Annotated[list[int], typer.Option(metavar="SEED...", help="Seeds of the sweep.")] = [0, 1],
    top_k: Annotated[int | None, typer.Option(min=1, help="Top-k warping of draft and target.",
                                              show_default="none")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens per run.")] = 48,
    stop_at_eos: Annotated[bool, typer.Option("--stop-at-eos", help="Stop at EOS (default: every run makes "
                                              "--max-new-tokens).")] = False,
    deviation_samples: Annotated[int, typer.Option(min=0, help="One-token decodings per prompt for the first-token "
                                                   "TV of inexact methods (0: skip).")] = 128,
    deviation_prompts: Annotated[int, typer.Option(min=1, help="Prompts used for the deviation.")] = 2,
    out: Annotated[str, typer.Option(help="Output folder.")] = "decode-results",
    plots_dir: Annotated[str | None, typer.Option(help="Folder for the PNGs.", show_default="--out")] = None,
    cache: Annotated[str | None, typer.Option(help="Folder of the per-configuration run cache.",
                                              show_default="OUT/cache")] = None,
    prefix: Annotated[str, typer.Option(help="File name prefix of the plots.")] = "decode",
    title: Annotated[str, typer.Option(help="Title of the report.")] = "Decode benchmark",
    no_resume: Annotated[bool, typer.Option("--no-resume", help="Ignore and overwrite cached runs.")] = False,
    target: TargetFolder = None,
    draft: DraftFolder = None,
    tiny: Annotated[bool, typer.Option("--tiny", help="Tiny random models (a smoke run without the pair).")] = False,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads.", show_default="torch's choice")] = None,
) -> int:
    """Sweep methods x K x L x temperature on a prompt set: acceptance, block efficiency, speedup, report and plots."""
    for flag, folder in (("--out", out), ("--plots-dir", plots_dir), ("--cache", cache)):
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            raise ValueError(f"{flag} {folder!r} is a file; name a folder (it is created if missing)")
    quiet_transformers()
    from ...bench import decode as bench

    with progress_bar(ctx) as progress:
        return bench.run(settings_of(ctx, bench.DecodeSettings), progress)

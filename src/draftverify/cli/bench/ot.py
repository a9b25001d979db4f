"""`draftverify bench ot`: the options of :mod:`draftverify.bench.ot`."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from .._command import above, settings_of, quiet_transformers
from .._options import Seed
from .._progress import progress_bar

__all__ = ["ot"]


def ot(
    ctx: typer.Context,
    top_k: Annotated[list[int], typer.Option(min=1, metavar="K...", help="Top-k truncations of the draft.")] = [10, 100, 1000],
    num_drafts: Annotated[list[int], typer.Option(min=1, metavar="K...", help="Numbers of i.i.d. drafts K.")] = [2, 3, 4, 5],
    methods: Annotated[list[str], typer.Option(metavar="METHOD...", help="Solvers of draftverify.ot.solve, in the "
                                               "method grammar: lp, or ot(solver=gr,tol=1e-3).")] = [
                                                   "lp", "maxflow", "maxflow-cs", "ot(solver=gr,tol=0.001)", "ot(solver=gr,tol=0.0001)"],
    tokens: Annotated[int, typer.Option(min=1, help="Tokens (distribution pairs) per cell.")] = 40,
    cell_seconds: Annotated[float, typer.Option(callback=above(0), help="Stop a method in a cell after this much solve time.")] = 20.0,
    repeats: Annotated[int, typer.Option(min=1, help="Solves per token; the fastest counts (one-off interference drops out).")] = 3,
    max_arcs: Annotated[tuple[int, int, int], typer.Option(
        min=1, metavar="LP MAXFLOW MAXFLOW-CS", help="Network size limits of lp, maxflow and maxflow-cs "
        "(cells above are skipped).")] = (300_000, 4_000_000, 4_000_000),
    source: Annotated[Literal["synthetic", "pair"], typer.Option(
        help="synthetic: LM-like pairs; pair: the embedded model pair on HumanEval continuations.")] = "synthetic",
    num_prompts: Annotated[int, typer.Option(min=1, help="With --source pair: HumanEval prompts the positions come from.")] = 4,
    vocab: Annotated[int, typer.Option(min=2, help="With --source synthetic: the vocabulary V.")] = 32000,
    noise: Annotated[float, typer.Option(min=0.0, help="With --source synthetic: the standard deviation of the draft logits around the target's.")] = 0.65,
    seed: Seed = 0,
    json: Annotated[str | None, typer.Option(metavar="FILE", help="Write the JSON results here.",
                                             show_default="stdout")] = None,
    markdown: Annotated[str | None, typer.Option(metavar="FILE", help="Also write the Markdown table here.",
                                                 show_default="none")] = None,
) -> int:
    """Seed 001 Table 1 grid: ms per token of lp, maxflow, maxflow-cs and gr against the paper."""
    if source == "pair":
        quiet_transformers()
    from ...bench import ot as bench

    with progress_bar(ctx) as progress:
        return bench.run(settings_of(ctx, bench.OtSettings), progress)

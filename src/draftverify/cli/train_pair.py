"""`draftverify train-pair`: train the embedded model pair from the Python standard library."""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ._command import above
from ._options import Seed
from ._progress import progress_bar

__all__ = ["train_pair"]

OUTPUT = Path("draftverify-pair")  # the default output, in the current folder (never the installed package)
MINUTES = 60.0  # the default wall-clock budget of the joint training phase


def train_pair(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Option(
        help="Folder the pair is written to (target/, draft/, ngram/, tokenizer/; use it with generate --target "
        "DIR/target --draft DIR/draft --tokenizer DIR/tokenizer).",
        show_default=f"./{OUTPUT}; with --quick a folder under --workdir")] = None,
    workdir: Annotated[Path | None, typer.Option(
        help="Token streams, checkpoints and unshipped models; rerunning resumes from it.",
        show_default="a folder in the temporary directory")] = None,
    seed: Seed = 0,
    minutes: Annotated[float | None, typer.Option(
        callback=above(0.0), help="Wall-clock budget of the joint training phase (not with --steps).",
        show_default=f"{MINUTES:g}")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="A fixed number of training steps (not with --minutes).",
                                              show_default="as many as --minutes allows")] = None,
    distill_steps: Annotated[int | None, typer.Option(
        min=1, metavar="N", help="After training, distill draft_ce towards the frozen target for N steps of "
        "8 x 256 tokens (total-variation loss) and ship whichever draft has the higher acceptance.",
        show_default="no distillation")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A tiny smoke run: a few files, tiny models, a few steps "
                                        "(seconds).")] = False,
) -> int:
    """Train a target/draft/n-gram pair as the embedded one was trained."""
    from ..train.distill import DistillConfig
    from ..train.lm import ModelShape, TrainConfig
    from ..train.pipeline import PipelineConfig, run as run_pipeline

    if minutes is not None and steps is not None:
        raise ValueError("--minutes and --steps exclude each other: give one budget")
    tag = "quick" if quick else "full"
    workdir = workdir or Path(tempfile.gettempdir()) / f"draftverify-train-pair-{tag}"
    command = "draftverify " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if quick:
        train = TrainConfig(target_shape=ModelShape(1, 32, 2), draft_shape=ModelShape(1, 16, 1),
                            drafts=("draft_kd", "draft_ce"), short_context=16, long_every=2,
                            steps=steps or 3, batch_size=2, context=32, warmup=1,
                            seed=seed, checkpoint_every=2, log_every=1)
        distill = DistillConfig(steps=distill_steps or 2, batch_size=2, context=16,
                                warmup=1, seed=seed, checkpoint_every=1, log_every=1)
        config = PipelineConfig(train=train, distill=distill, vocab_size=300, max_files=8,
                                ngram_order=3, measure_prompts=2, measure_tokens=4,
                                command=command)
        output = output or workdir / "pair"
    else:
        train = TrainConfig(steps=steps, minutes=MINUTES if minutes is None else minutes, seed=seed)
        distill = (None if distill_steps is None
                   else DistillConfig(steps=distill_steps, seed=seed))
        config = PipelineConfig(train=train, distill=distill, command=command)
        output = output or OUTPUT
    with progress_bar(ctx) as progress:
        task = progress.add_task("training the pair", total=None)

        def log(line: str) -> None:  # each line goes above the bar, which shows the latest (its step count)
            print(line)
            progress.update(task, description=f"training the pair: {line[:72]}")

        run_pipeline(output, workdir, config, log)
    return 0

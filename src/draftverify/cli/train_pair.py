"""`draftverify train-pair`: train the embedded model pair from the Python standard library."""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

_ASSETS = Path(__file__).resolve().parent.parent / "assets" / "pair"


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("train-pair", help="train the embedded target/draft/n-gram pair")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"where the pair is written (default {_ASSETS}; with --quick a "
                             "folder under --workdir)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="token streams, checkpoints and unshipped models (default: a folder "
                             "in the temporary directory); rerunning resumes from it")
    parser.add_argument("--seed", type=int, default=0)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=60.0,
                        help="wall-clock budget of the joint training phase (default 60)")
    budget.add_argument("--steps", type=int, default=None, help="fixed number of training steps")
    parser.add_argument("--distill-steps", type=int, default=None, metavar="N",
                        help="after training, distill draft_ce towards the frozen target for N "
                             "steps of 8 x 256 tokens (total-variation loss) and ship whichever "
                             "draft has the higher acceptance (default: no distillation)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: a few files, tiny models, a few steps (seconds)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..train.distill import DistillConfig
    from ..train.lm import ModelShape, TrainConfig
    from ..train.pipeline import PipelineConfig, run as run_pipeline

    tag = "quick" if args.quick else "full"
    workdir = args.workdir or Path(tempfile.gettempdir()) / f"draftverify-train-pair-{tag}"
    command = "draftverify " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.quick:
        train = TrainConfig(target_shape=ModelShape(1, 32, 2), draft_shape=ModelShape(1, 16, 1),
                            drafts=("draft_kd", "draft_ce"), short_context=16, long_every=2,
                            steps=args.steps or 3, batch_size=2, context=32, warmup=1,
                            seed=args.seed, checkpoint_every=2, log_every=1)
        distill = DistillConfig(steps=args.distill_steps or 2, batch_size=2, context=16,
                                warmup=1, seed=args.seed, checkpoint_every=1, log_every=1)
        config = PipelineConfig(train=train, distill=distill, vocab_size=300, max_files=8,
                                ngram_order=3, measure_prompts=2, measure_tokens=4,
                                command=command)
        output = args.output or workdir / "pair"
    else:
        train = TrainConfig(steps=args.steps, minutes=args.minutes, seed=args.seed)
        distill = (None if args.distill_steps is None
                   else DistillConfig(steps=args.distill_steps, seed=args.seed))
        config = PipelineConfig(train=train, distill=distill, command=command)
        output = args.output or _ASSETS
    run_pipeline(output, workdir, config)
    return 0

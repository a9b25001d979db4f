"""`draftverify train-draft`: build the default target's draft (teacher labelling, then distillation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["train_draft"]


def train_draft(
    output: Annotated[Path, typer.Option(help="Where the draft is written (a transformers folder).")] = Path("smollm2-draft"),
    workdir: Annotated[Path, typer.Option(help="Teacher shards and the draft's checkpoint; rerunning resumes from it.")]
    = Path("smollm2-draft-work"),
    target: Annotated[str, typer.Option(help="The target: 'smollm2' (the default pair's) or a .gguf file.")] = "smollm2",
    label_minutes: Annotated[float, typer.Option(min=0.0, help="Wall-clock budget of the teacher labelling.")] = 50.0,
    source_minutes: Annotated[float, typer.Option(min=0.0, help="Wall-clock budget of labelling plain source "
                                                                "windows teacher-forced, after the answers "
                                                                "(--kind feature).")] = 0.0,
    train_minutes: Annotated[float, typer.Option(min=0.0, help="Wall-clock budget of the distillation.")] = 35.0,
    steps: Annotated[int, typer.Option(min=1, help="Training steps (the learning-rate schedule's length).")] = 3000,
    kind: Annotated[str, typer.Option(help="'feature': a head of decoder layers (--layers) on the target's hidden states (EAGLE); "
                                           "'llama': a small Llama distilled on the answers; 'ngram': an "
                                           "n-gram drafter counted on the answers.")] = "feature",
    order: Annotated[int, typer.Option(min=1, max=4, help="The n-gram drafter's order (--kind ngram).")] = 4,
    extra_shards: Annotated[list[Path], typer.Option(help="More teacher shard folders the feature draft trains on "
                                                          "or the n-gram drafter counts (repeatable).",
                                                     show_default="none")] = [],
    heldout: Annotated[Path | None, typer.Option(help="Held-out teacher shards the n-gram drafter's acceptance is "
                                                      "measured on (--kind ngram).", show_default="none")] = None,
    teacher_seed: Annotated[int, typer.Option(min=0, help="The labelling pass: its prompts' wordings and sampling "
                                                          "seed (chat_prompts('train', seed)).")] = 0,
    prompts: Annotated[str, typer.Option(help="What the chat prompts are built from: 'stdlib' (the standard "
                                              "library's documented functions) or 'packages' (the installed "
                                              "packages').")] = "stdlib",
    start: Annotated[Path | None, typer.Option("--from", help="A further stage (--kind feature): continue from this "
                                                              "feature draft's weights.", show_default="none")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate, > 0 (--kind feature).",
                                             show_default="1e-3")] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="Warm-up steps (--kind feature).",
                                               show_default="50")] = None,
    layers: Annotated[int | None, typer.Option(min=1, help="Decoder layers of the feature head; with --from, layers "
                                                           "beyond the start's are added, each starting as the "
                                                           "identity (--kind feature).", show_default="1")] = None,
    unroll: Annotated[int | None, typer.Option(min=1, help="Passes of the training-time test: 2 also trains the "
                                                           "second drafted position (--kind feature).",
                                               show_default="1")] = None,
    seed: Annotated[int | None, typer.Option(min=0, help="The training's batch order and noise (--kind feature).",
                                             show_default="0")] = None,
    calibration: Annotated[int | None, typer.Option(min=0, help="Held-out chat prompts the output temperature is "
                                                    "fitted on after training; 0: none (--kind feature).",
                                                    show_default="32")] = None,
    regression: Annotated[float | None, typer.Option(help="Weight of the feature regression in the loss, >= 0; 0: "
                                                           "the token losses alone, as EAGLE-3 (--kind feature).",
                                                      show_default="1.0")] = None,
    bucket: Annotated[int | None, typer.Option(help="The cross-entropy's top-k: the target's other tokens form one "
                                                    "bucket; 0: all of its law (--kind feature).",
                                               show_default="32")] = None,
    precision: Annotated[str | None, typer.Option(help="'bfloat16': the head's decoder layers under bfloat16 "
                                                       "autocast, the labels, output layer and losses float32 "
                                                       "(--kind feature).", show_default="float32")] = None,
    fusion: Annotated[str | None, typer.Option(help="Fuse the target's residual streams after these layer counts "
                                                    "into the head's input, e.g. '3,15' (EAGLE-3); with --from, a "
                                                    "head without them grows the fusion, zero at first "
                                                    "(--kind feature).", show_default="none")] = None,
) -> int:
    """Label chat answers with the target and train a draft on them (resumable)."""
    from ..models.gguf import converted_folder
    from ..train.draft import DraftConfig
    from ..train.draft_pipeline import train_draft as run
    from ..train.feature_draft import FeatureDraftConfig
    from ..train.ngram import NGramConfig
    from ..train.teacher import TeacherConfig

    if fusion is not None:
        try:
            fusion = tuple(int(part) for part in fusion.split(","))
        except ValueError:
            raise ValueError(f"--fusion: layer counts separated by commas, e.g. '3,15', got {fusion!r}") from None
    schedule = {k: v for k, v in dict(lr=lr, warmup=warmup, layers=layers, unroll=unroll, seed=seed,
                                      calibration=calibration, fusion=fusion,
                                      regression=regression, bucket=bucket, precision=precision).items() if v is not None}
    configs = {"feature": lambda: FeatureDraftConfig(steps=steps, **schedule),
               "llama": lambda: DraftConfig(steps=steps), "ngram": lambda: NGramConfig(order=order)}
    if kind not in configs:
        raise ValueError(f"--kind: expected one of {', '.join(configs)}, got {kind!r}")
    if heldout is not None and kind != "ngram":
        raise ValueError(f"--heldout is read by --kind ngram only, not --kind {kind}")
    if extra_shards and kind == "llama":
        raise ValueError("--extra-shards is read by --kind feature and ngram, not --kind llama")
    if (schedule or start is not None or source_minutes) and kind != "feature":
        given = ([f"--{k}" for k in schedule] + (["--from"] if start is not None else [])
                 + (["--source-minutes"] if source_minutes else []))
        raise ValueError(f"{', '.join(given)}: read by --kind feature only, not --kind {kind}")
    draft = configs[kind]()  # bad settings are refused before the target loads
    teacher = TeacherConfig(seed=teacher_seed, prompts=prompts)
    folder = converted_folder(None if target == "smollm2" else target)
    record = run(folder, workdir, output, label_minutes=label_minutes, train_minutes=train_minutes,
                 teacher=teacher, draft=draft, extra_shards=tuple(extra_shards),
                 heldout=heldout, start=start, source_minutes=source_minutes)
    done = f"{record['ngrams']} n-grams" if kind == "ngram" else f"step {record['last_step'].get('step')}"
    print(f"draft written to {output}: {record['answer_tokens']} answer tokens, {done}")
    return 0

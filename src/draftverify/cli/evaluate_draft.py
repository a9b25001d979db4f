"""`draftverify evaluate-draft`: held-out acceptance of feature drafts (the model card's table; see
:mod:`draftverify.train.heldout`)."""

from __future__ import annotations

from dataclasses import asdict
from json import dumps, loads
from pathlib import Path
from typing import Annotated

import typer

from ._command import quiet_transformers
from ._options import JsonFile, TargetFolder

__all__ = ["evaluate_draft"]


def _drafts(specs: list[str]) -> dict[str, Path]:
    """``NAME=FOLDER`` (or a bare folder, named by itself) -> {name: folder}."""
    from ..models.pair import SMOLLM2_DRAFT

    if not specs:
        return {"shipped": SMOLLM2_DRAFT}
    drafts: dict[str, Path] = {}
    for spec in specs:
        name, _, folder = spec.rpartition("=") if "=" in spec else (spec, "", spec)
        if not name or not folder:
            raise ValueError(f"--draft: expected NAME=FOLDER or FOLDER, got {spec!r}")
        if name in drafts:
            raise ValueError(f"--draft: the name {name!r} is given twice")
        drafts[name] = Path(folder)
    return drafts


def evaluate_draft(
    draft: Annotated[list[str], typer.Option(metavar="NAME=FOLDER", help="A feature draft folder to measure, "
                                             "named in the output (repeatable).", show_default="the default pair's draft")] = [],
    target: TargetFolder = None,
    chat: Annotated[int, typer.Option(min=0, help="Held-out standard-library chat prompts (chat_prompts('heldout', 0)).")] = 32,
    humaneval: Annotated[int, typer.Option(min=0, help="HumanEval prompts, the first N, as chat messages.")] = 32,
    source: Annotated[int, typer.Option(min=0, help="Held-out standard-library source windows, scored teacher-forced "
                                                   "without the chat template.")] = 48,
    context: Annotated[int, typer.Option(min=1, help="Each prompt keeps its last N tokens.")] = 192,
    tokens: Annotated[int, typer.Option(min=1, help="Tokens per answer (the target's, sampled) and per engine run.")] = 128,
    seed: Annotated[int, typer.Option(min=0, help="Answer i is sampled with seed SEED + i.")] = 100,
    ahead: Annotated[int, typer.Option(min=1, help="Teacher-forced acceptance drafted 0..N-1 positions ahead.")] = 3,
    draft_length: Annotated[int, typer.Option(min=1, help="L of the engine's sd runs.")] = 4,
    engine: Annotated[bool, typer.Option(help="Also run the engine's sd on the prompts.")] = True,
    answers: Annotated[Path | None, typer.Option(help="A JSON file of the sampled answers: read when it exists "
                                                 "(its settings must match), else written.", show_default="none")] = None,
    threads: Annotated[int, typer.Option(min=1, help="Torch threads.")] = 1,
    json: JsonFile = None,
) -> int:
    """Teacher-forced and engine acceptance of feature drafts on held-out prompts."""
    import torch

    quiet_transformers()
    from ..bench.output import emit_json
    from ..models.feature_draft import FeatureHead
    from ..models.pair import load_pair
    from ..train.heldout import HeldoutSettings, evaluate_drafts, heldout_prompts, sample_answers

    settings = HeldoutSettings(chat=chat, humaneval=humaneval, source=source, context=context, tokens=tokens, seed=seed, ahead=ahead,
                               draft_length=draft_length)
    folders = _drafts(draft)
    for folder in folders.values():
        if not folder.is_dir():
            raise FileNotFoundError(f"--draft: {folder}: no such folder")
    torch.set_num_threads(threads)
    model = load_pair(target, quantize="float32").target
    sampled = None
    keyed = {"target": target or "smollm2",
             **{k: v for k, v in asdict(settings).items() if k not in ("ahead", "draft_length", "source")}}
    if answers is not None and answers.exists():
        stored = loads(answers.read_text())
        if stored.get("settings") != keyed:
            raise ValueError(f"--answers: {answers} holds answers for {stored.get('settings')}, not {keyed}")
        sampled = stored["answers"]
    elif answers is not None:
        sampled = sample_answers(model, heldout_prompts(model.tokenizer, settings), settings)
        answers.write_text(dumps({"settings": keyed, "answers": sampled}) + "\n")
    heads = {name: FeatureHead.load(folder) for name, folder in folders.items()}
    report = evaluate_drafts(model, heads, settings, answers=sampled, engine=engine)
    report["settings"] = {"target": keyed["target"], **asdict(settings), "drafts": {k: str(v) for k, v in folders.items()}}
    emit_json(report, json)
    return 0

"""``draftverify train-draft``: label with the target, train the draft, save it, resumable.

Two long stages, each bounded in minutes and resumed from its own files in ``workdir``
(``teacher/shard-*.npz``, ``draft/checkpoint.pt``), so a run cut short by a session's end goes on
from where it stopped: (1) the target answers chat prompts from the standard library or the
installed packages (:mod:`.teacher`); (2) the draft is trained on those answers: a feature draft
(:mod:`.feature_draft`, the default pair's; the labelling keeps the target's features, computed
once per shard for shards labelled without them; a further stage continues from a trained feature
draft on more shard folders; after training its output temperature is fitted on held-out prompts,
:mod:`.heldout`), a small Llama draft distilled on them (:mod:`.draft`) or an n-gram
drafter counted on them (:mod:`.ngram`; seconds, and it may count shard folders besides
``workdir``'s). Drafts are saved in float16 (half the bytes; loaded as float32) with
``training.json`` beside them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from .draft import DraftConfig, distill_draft, draft_model, load_shards
from .feature_draft import (FeatureDraftConfig, deepen, extract_features, extract_fusion, extract_normalizers,
                            load_feature_rows, load_normalizers, new_head, train_feature_head, with_fusion)
from .ngram import NGramConfig, answer_counts, exact_acceptance, topk_acceptance, train_ngram
from .teacher import TeacherConfig, chat_prompts, label_shards, label_source_shards, prompt_root, source_windows

__all__ = ["train_draft"]


def train_draft(target_folder: Path, workdir: Path, output: Path, *, label_minutes: float, train_minutes: float,
                teacher: TeacherConfig = TeacherConfig(),
                draft: DraftConfig | FeatureDraftConfig | NGramConfig = FeatureDraftConfig(),
                extra_shards: tuple[Path, ...] = (), heldout: Path | None = None, start: Path | None = None,
                source_minutes: float = 0.0, log: Callable[[str], None] = print) -> dict:
    """Run both stages for the target in ``target_folder`` (a transformers folder with its chat
    tokenizer) and write the draft to ``output``: a feature draft for a :class:`FeatureDraftConfig`,
    a small Llama for a :class:`DraftConfig`, an n-gram drafter for an :class:`NGramConfig` (counted
    on ``workdir``'s shards and those of the folders ``extra_shards``, and measured on the shards
    of ``heldout`` if named: :mod:`.ngram`). A feature draft trains on ``workdir``'s shards and those
    of ``extra_shards``, from a new head or, for a further stage, from the feature draft in folder
    ``start`` (its token subset kept; decoder layers added up to ``draft.layers``, each starting as
    the identity: :func:`.feature_draft.deepen`; with ``draft.fusion`` a head that fuses no streams
    grows the fusion, zero at first: :func:`.feature_draft.with_fusion`, the streams computed once per
    shard by :func:`.feature_draft.extract_fusion` where the labelling did not keep them; the labels'
    softmax normalizers, once per shard, by :func:`.feature_draft.extract_normalizers`, written beside
    the shards of every folder, ``extra_shards`` included). ``train_minutes`` counts from the first
    training step, after those extractions. The prompts
    are ``chat_prompts("train", seed=teacher.seed, root=prompt_root(teacher.prompts))``;
    a feature draft also trains on ``workdir/source``, plain source windows labelled teacher-forced
    for ``source_minutes`` after the answers (:func:`.teacher.label_source_shards` over
    ``source_windows(..., seed=teacher.seed)``). Returns what ``training.json`` records."""
    from ..models.feature_draft import FeatureHead
    from ..models.hf import TransformersModel

    if start is not None and not isinstance(draft, FeatureDraftConfig):
        raise ValueError(f"start: only a feature draft continues from a trained one (draft is a "
                         f"{type(draft).__name__})")
    if extra_shards and isinstance(draft, DraftConfig):
        raise ValueError("extra_shards: the Llama draft reads the workdir's shards only")
    if source_minutes and not isinstance(draft, FeatureDraftConfig):
        raise ValueError(f"source_minutes: only a feature draft trains on source windows (draft is a "
                         f"{type(draft).__name__})")
    if heldout is not None and not isinstance(draft, NGramConfig):
        raise ValueError(f"heldout: only the n-gram drafter is measured on held-out shards (draft is a "
                         f"{type(draft).__name__})")
    began = time.time()
    target = TransformersModel.from_pretrained(target_folder)
    feature = isinstance(draft, FeatureDraftConfig)
    streams = draft.fusion if feature else ()  # kept from the labelling's own forwards
    prompts = chat_prompts("train", seed=teacher.seed, root=prompt_root(teacher.prompts)) if label_minutes else []
    shards = label_shards(target, prompts, workdir / "teacher", teacher, log=log,
                          deadline=time.time() + label_minutes * 60, features=feature, streams=streams)
    log(f"teacher: {shards} new shards in {time.time() - began:.0f} s")
    if source_minutes:
        began = time.time()
        shards = label_source_shards(target, source_windows(target.tokenizer, seed=teacher.seed), workdir / "source",
                                     teacher, log=log, deadline=began + source_minutes * 60, features=True,
                                     streams=streams)
        log(f"source: {shards} new shards in {time.time() - began:.0f} s")
    if isinstance(draft, NGramConfig):
        return _count_ngrams(target, (workdir / "teacher", *extra_shards), heldout, output, teacher, draft, log)
    if isinstance(draft, FeatureDraftConfig):
        source = (workdir / "source",) if (workdir / "source").is_dir() else ()
        folders = (workdir / "teacher", *source, *extra_shards)
        for folder in folders:
            extract_features(target.model, folder, log=log)  # shards labelled without features (older runs)
            if draft.fusion:
                extract_fusion(target.model, folder, draft.fusion, log=log)
            extract_normalizers(target.model, folder, log=log)  # once per shard: the labels from the subset's logits
        featured = [folder for folder in folders if any(folder.glob("features-*.npy"))]
        rows = [row for folder in featured for row in load_feature_rows(folder, draft.fusion)]
        normalizers = [n for folder in featured for n in load_normalizers(folder)]
        if not rows:
            raise FileNotFoundError(f"{', '.join(map(str, folders))}: no teacher shards (label some: label_minutes)")
        model = new_head(target.model, rows, draft) if start is None else FeatureHead.load(start)
        if start is not None:
            if model.vocab.numel() != draft.vocab:
                raise ValueError(f"start: its subset has {model.vocab.numel()} tokens, the settings ask for {draft.vocab}")
            if len(model.layers) > draft.layers:
                raise ValueError(f"start: it has {len(model.layers)} decoder layers, the settings ask for {draft.layers}")
            if model.fusion and model.fusion != draft.fusion:
                raise ValueError(f"start: it fuses the target's streams after layers {model.fusion}, the settings ask "
                                 f"for {draft.fusion or 'none'}")
            model = with_fusion(deepen(model, draft.layers, draft.seed), draft.fusion)  # new parts start as no-ops
        figures = train_feature_head(model, target.model, rows, draft, workdir / "draft", log=log,
                                     deadline=time.time() + train_minutes * 60, normalizers=normalizers)
        calibration = _calibrate(target, model, draft.calibration, log) if draft.calibration else None
        model.save(output)
    else:
        rows = load_shards(workdir / "teacher")
        model = draft_model(target.model, draft)
        figures = distill_draft(model, rows, draft, workdir / "draft", log=log, deadline=time.time() + train_minutes * 60)
        output.mkdir(parents=True, exist_ok=True)
        model.to(torch.float16).save_pretrained(output)
    record = {
        "teacher": asdict(teacher), "draft": asdict(draft), "last_step": figures,
        **({"shard_folders": [str(folder) for folder in folders], "start": None if start is None else str(start),
            "calibration": calibration} if isinstance(draft, FeatureDraftConfig) else {}),
        "answers": len(rows), "answer_tokens": int(sum(len(r[2]) for r in rows)),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    (output / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    from ..models.pair import load_draft

    load_draft(output, target)  # it loads back
    return record


def _calibrate(target, head, count: int, log: Callable[[str], None]) -> dict:
    """Fit the trained head's output temperature on ``count`` calibration prompts and the target's
    answers to them (seed 200 + i) and fold it into the head (:mod:`.heldout`); what was fitted."""
    from .heldout import HeldoutSettings, calibration_prompts, fit_temperature, sample_answers, set_output_temperature

    began = time.time()
    prompts = calibration_prompts(target.tokenizer, count)
    answers = sample_answers(target, prompts, HeldoutSettings(seed=200))
    fit = fit_temperature(target, head.eval(), prompts, answers)
    set_output_temperature(head, fit["temperature"])
    log(f"calibration: output temperature {fit['temperature']} on {len(prompts)} prompts "
        f"({sum(map(len, answers))} answer tokens) in {time.time() - began:.0f} s")
    return {"prompts": len(prompts), "answer_tokens": sum(map(len, answers)), "seed": 200, **fit}


def _count_ngrams(target, folders: tuple[Path, ...], heldout: Path | None, output: Path, teacher: TeacherConfig,
                  config: NGramConfig, log: Callable[[str], None]) -> dict:
    """The n-gram branch of :func:`train_draft`: count, save, measure, record, load back."""
    from ..models.pair import load_ngram_draft

    began = time.perf_counter()
    drafter = train_ngram(folders, target.vocab_size, config)
    seconds = time.perf_counter() - began
    drafter.save(output)
    answers, answer_tokens = answer_counts(folders)
    record = {"kind": "ngram", "teacher": asdict(teacher), "draft": asdict(config),
              "shard_folders": [str(folder) for folder in folders], "answers": answers,
              "answer_tokens": answer_tokens, "ngrams": drafter.num_ngrams, "seconds": round(seconds, 1)}
    log(f"n-gram: order {config.order}, {drafter.num_ngrams} n-grams from {answer_tokens} answer tokens "
        f"in {seconds:.1f} s")
    if heldout is not None:
        record["heldout"] = str(heldout)
        record["heldout_acceptance"] = {"exact": exact_acceptance(drafter, target.model, [heldout]),
                                        "topk_bound": topk_acceptance(drafter, [heldout])}
        log(f"n-gram: held-out acceptance {record['heldout_acceptance']}")
    (output / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    load_ngram_draft(target, output)  # it loads back, with the target's vocabulary
    return record

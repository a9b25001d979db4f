"""`draftverify train-pair` end to end, in resumable phases.

1. corpus split and byte-level BPE tokenizer -> ``output/tokenizer``; token streams -> workdir;
2. joint training of the target and its drafts (``TrainConfig.drafts``) (checkpointed) -> ``workdir/final/<model>``;
   with ``distill`` set, the cross-entropy draft is then distilled towards the frozen target
   (:mod:`~draftverify.train.distill`, checkpointed) -> ``workdir/final/draft_tv``;
3. n-gram drafter on the training documents -> ``output/ngram``;
4. measurements (held-out loss, SD acceptance on HumanEval prompts, per-token latency); the draft
   with the higher acceptance is shipped as ``output/draft``, the target as ``output/target``,
   with ``metrics.json`` and ``MODEL_CARD.md``.

A phase whose outputs exist is skipped, so rerunning the same command after a crash resumes."""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .corpus import split_corpus
from .distill import DistillConfig
from .lm import TrainConfig


@dataclass(frozen=True)
class PipelineConfig:
    """Everything `train-pair` needs besides the paths (defaults: the shipped pair)."""

    train: TrainConfig = field(default_factory=TrainConfig)
    distill: DistillConfig | None = None
    vocab_size: int = 8192
    heldout_percent: float = 5.0
    max_files: int | None = None
    ngram_order: int = 4
    measure_prompts: int = 164
    measure_tokens: int = 32
    heldout_windows: int = 64
    command: str = ""

    def __post_init__(self) -> None:
        if min(self.ngram_order, self.measure_prompts, self.measure_tokens,
               self.heldout_windows) < 1:
            raise ValueError("ngram_order, measure_prompts, measure_tokens and heldout_windows "
                             "must be >= 1")
        if self.distill is not None and "draft_ce" not in self.train.drafts:
            raise ValueError("distillation starts from draft_ce: add it to the trained drafts")

    @property
    def draft_names(self) -> tuple[str, ...]:
        """Every transformer draft the run produces (the shipped one is chosen among them)."""
        return self.train.drafts + (("draft_tv",) if self.distill is not None else ())

    @property
    def model_names(self) -> tuple[str, ...]:
        """The target, then :attr:`draft_names`."""
        return ("target",) + self.draft_names


def save_model(model, path: Path, storage_dtype) -> None:
    """``save_pretrained`` with weights stored as ``storage_dtype`` but ``config.dtype`` float32,
    so ``AutoModelForCausalLM.from_pretrained(path)`` returns a float32 model on CPU."""
    import torch

    model.to(storage_dtype).save_pretrained(str(path))
    model.to(torch.float32)
    config_path = Path(path) / "config.json"
    config = json.loads(config_path.read_text())
    config["dtype"] = "float32"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _split_documents(tokens: np.ndarray, eos_id: int) -> list[np.ndarray]:
    ends = np.flatnonzero(tokens == eos_id)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [tokens[s:e + 1] for s, e in zip(starts, ends)]


def run(output: Path, workdir: Path, config: PipelineConfig,
        log: Callable[[str], None] = print) -> dict:
    """Run (or resume) every phase; returns the metrics written to ``output/metrics.json``."""
    import torch

    torch.set_num_threads(2)
    output, workdir = Path(output), Path(workdir)
    output.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    split = split_corpus(heldout_percent=config.heldout_percent, max_files=config.max_files)
    log(f"corpus: {len(split.train)} train files, {len(split.heldout)} held-out files "
        f"under {split.root}")

    # phase 1: tokenizer and token streams
    tokenizer_dir = output / "tokenizer"
    streams = {name: workdir / f"tokens_{name}.npy" for name in ("train", "heldout")}
    if (tokenizer_dir / "tokenizer.json").exists() and all(p.exists() for p in streams.values()):
        log("phase 1: tokenizer and token streams exist, skipped")
    else:
        from .tokenizer import encode_documents, train_tokenizer

        began = time.perf_counter()
        tokenizer = train_tokenizer(split.read(split.train), config.vocab_size, tokenizer_dir)
        for name, names in (("train", split.train), ("heldout", split.heldout)):
            np.save(streams[name], encode_documents(tokenizer, split.read(names)))
        log(f"phase 1: tokenizer trained and corpus encoded in {time.perf_counter() - began:.0f}s")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    train_tokens, heldout_tokens = (np.load(streams[n]) for n in ("train", "heldout"))
    log(f"tokens: {len(train_tokens)} train, {len(heldout_tokens)} held-out, "
        f"vocabulary {len(tokenizer)}")

    # phase 2: joint training of target and drafts
    final = workdir / "final"
    if (final / "train_result.json").exists():
        log("phase 2: trained models exist, skipped")
    else:
        from .lm import train_joint

        models, result = train_joint(train_tokens, heldout_tokens, len(tokenizer),
                                     tokenizer.eos_token_id, config.train, workdir / "run", log)
        for name in config.train.model_names:
            save_model(models[name], final / name,
                       torch.float16 if name == "target" else torch.float32)
        (final / "train_result.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
        log(f"phase 2: trained {result.steps} steps in {result.seconds:.0f}s")
    train_result = json.loads((final / "train_result.json").read_text())
    distill_result = None
    if config.distill is not None:
        distill_path = final / "draft_tv" / "distill_result.json"
        if distill_path.exists():
            log("phase 2b: distilled draft exists, skipped")
        else:
            from .distill import distill_draft
            from .measure import load_model

            draft, result = distill_draft(load_model(final / "target"),
                                          load_model(final / "draft_ce"), train_tokens,
                                          heldout_tokens, config.distill, workdir / "distill", log)
            save_model(draft, final / "draft_tv", torch.float32)
            distill_path.write_text(json.dumps(result, indent=2) + "\n")
            log(f"phase 2b: distilled {result['steps']} steps in {result['seconds']:.0f}s")
        distill_result = json.loads(distill_path.read_text())

    # phase 3: n-gram drafter
    ngram_dir = output / "ngram"
    if (ngram_dir / "ngram.npz").exists():
        log("phase 3: n-gram drafter exists, skipped")
        ngram_seconds = json.loads((workdir / "ngram_seconds.json").read_text())
    else:
        from ..models.ngram import NGramDrafter

        began = time.perf_counter()
        drafter = NGramDrafter.train(_split_documents(train_tokens, tokenizer.eos_token_id),
                                     len(tokenizer), order=config.ngram_order)
        drafter.save(ngram_dir)
        ngram_seconds = time.perf_counter() - began
        (workdir / "ngram_seconds.json").write_text(json.dumps(ngram_seconds))
        log(f"phase 3: n-gram drafter (order {config.ngram_order}) in {ngram_seconds:.0f}s")

    # phase 4: measurements, choice of draft, model card
    from . import card, measure

    metrics = measure.measure_all(final, ngram_dir, tokenizer_dir, heldout_tokens, config, log)
    chosen = max(config.draft_names, key=lambda n: metrics["acceptance"][n]["mean"])
    for source, name in ((final / "target", "target"), (final / chosen, "draft")):
        if (output / name).exists():
            shutil.rmtree(output / name)
        shutil.copytree(source, output / name)
    metrics.update(
        chosen_draft=chosen, train=train_result, distill=distill_result,
        ngram_train_seconds=ngram_seconds,
        config=asdict(config), corpus={"root": str(split.root), "python": sys.version.split()[0],
                                       "train_files": len(split.train),
                                       "heldout_files": len(split.heldout),
                                       "train_tokens": int(len(train_tokens)),
                                       "heldout_tokens": int(len(heldout_tokens))})
    metrics["bytes"] = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                        for p in sorted(output.iterdir()) if p.is_dir()}
    (output / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    (output / "MODEL_CARD.md").write_text(card.render(metrics))
    log(f"done: pair saved under {output}")
    return metrics

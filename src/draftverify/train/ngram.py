"""The n-gram drafter of a real target, counted on the target's own answers.

A draft is accepted where it agrees with the target on the target's text, so the drafter
(:class:`~draftverify.models.ngram.NGramDrafter`) counts the n-grams of the teacher shards
(:mod:`.teacher`: chat prompts answered by the target at temperature 1). ``prompts=False`` keeps
the n-grams whose last token is an answer token (each answer with the ``order - 1`` prompt tokens
before it, the chat template's ``assistant`` header); ``prompts=True`` counts whole sequences.

Held-out acceptance without the target: the shards keep the target's top-k probabilities at each
answer position, so ``sum_{x in top-k} min(T(x), D(x))`` is a lower bound of the acceptance
``sum_x min(T(x), D(x))`` of speculative sampling at that position (Leviathan et al. 2023, section
3.5), short by at most the target's mass outside its top k.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from ..formulas import overlap
from ..models.ngram import NGramDrafter

__all__ = ["NGramConfig", "answer_counts", "shard_sequences", "topk_acceptance", "train_ngram"]


@dataclass(frozen=True)
class NGramConfig:
    """The drafter's ``order`` (the default pair's 49152 tokens allow at most 4: codes are int64)
    and whether the prompts are counted too (``prompts``, module doc)."""

    order: int = 4
    prompts: bool = False

    def __post_init__(self) -> None:
        if self.order < 1:
            raise ValueError(f"order must be >= 1, got {self.order}")


def _shards(folders: Sequence[Path]) -> list[Path]:
    paths = [path for folder in folders for path in sorted(Path(folder).glob("shard-*.npz"))]
    if not paths:
        raise FileNotFoundError(f"{', '.join(map(str, folders))}: no teacher shards (shard-*.npz)")
    return paths


def shard_sequences(folders: Sequence[Path], *, prompts: bool, context: int) -> Iterator[np.ndarray]:
    """Token id sequences of the teacher shards in ``folders``: whole sequences (``prompts``) or
    each answer with the ``context`` prompt tokens before it."""
    for path in _shards(folders):
        with np.load(path) as data:
            tokens, starts, lengths = data["tokens"], data["answer_start"], data["answer_length"]
        for row, start, length in zip(tokens, starts.tolist(), lengths.tolist()):
            first = 0 if prompts else max(start - context, 0)
            yield row[first:start + length]


def answer_counts(folders: Sequence[Path]) -> tuple[int, int]:
    """(answers, answer tokens) of the teacher shards in ``folders``."""
    lengths = [np.load(path)["answer_length"] for path in _shards(folders)]
    return sum(map(len, lengths)), int(sum(map(np.sum, lengths)))


def train_ngram(folders: Sequence[Path], vocab_size: int, config: NGramConfig = NGramConfig()) -> NGramDrafter:
    """The drafter counted on the teacher shards of ``folders`` (module doc)."""
    sequences = shard_sequences(folders, prompts=config.prompts, context=config.order - 1)
    return NGramDrafter.train(sequences, vocab_size, order=config.order)


def topk_acceptance(drafter: NGramDrafter, folders: Sequence[Path]) -> dict:
    """Teacher-forced lower bound of the acceptance at each answer position of the shards in
    ``folders`` (module doc): mean, standard error, positions."""
    values: list[float] = []
    for path in _shards(folders):
        with np.load(path) as data:
            tokens, starts, lengths = data["tokens"], data["answer_start"], data["answer_length"]
            top_ids, top_probs = data["top_ids"], data["top_probs"]
        for b, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
            row = tokens[b].tolist()
            draft_probs = drafter.next_token_probs([row[:start + j] for j in range(length)])        # [A, V]
            ids = torch.from_numpy(top_ids[b, :length].astype(np.int64))                           # [A, k]
            target_top = torch.from_numpy(top_probs[b, :length].astype(np.float32))                # [A, k]
            values += overlap(target_top, draft_probs.gather(1, ids)).tolist()
    return {"mean": statistics.fmean(values), "stderr": statistics.stdev(values) / len(values) ** 0.5,
            "positions": len(values)}

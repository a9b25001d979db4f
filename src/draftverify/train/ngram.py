"""The n-gram drafter of a real target, counted on the target's own answers.

A draft is accepted where it agrees with the target on the target's text, so the drafter
(:class:`~draftverify.models.ngram.NGramDrafter`) counts the n-grams of the teacher shards
(:mod:`.teacher`: chat prompts answered by the target at temperature 1). ``prompts=False`` keeps
the n-grams whose last token is an answer token (each answer with the ``order - 1`` prompt tokens
before it, the chat template's ``assistant`` header); ``prompts=True`` counts whole sequences.

Held-out acceptance, teacher-forced on the target's answers in held-out shards: exactly, the
acceptance ``sum_x min(T(x), D(x))`` of speculative sampling at each answer position (Leviathan et
al. 2023, section 3.5) with the target run over the sequences (:func:`exact_acceptance`); without
the target, from the top-k probabilities the shards keep, ``sum_{x in top-k} min(T(x), D(x))``, a
lower bound short by at most the target's mass outside its top k (:func:`topk_acceptance`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from ..formulas import overlap
from ..models.ngram import NGramDrafter
from .draft import shard_rows
from .measure import acceptance, mean_and_stderr, teacher_forced_probs

__all__ = ["NGramConfig", "answer_counts", "exact_acceptance", "shard_sequences", "topk_acceptance", "train_ngram"]


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
    for tokens, start, _, _ in shard_rows(_shards(folders)):
        yield tokens[0 if prompts else max(start - context, 0):]


def answer_counts(folders: Sequence[Path]) -> tuple[int, int]:
    """(answers, answer tokens) of the teacher shards in ``folders``."""
    lengths = [np.load(path)["answer_length"] for path in _shards(folders)]
    return sum(map(len, lengths)), int(sum(map(np.sum, lengths)))


def train_ngram(folders: Sequence[Path], vocab_size: int, config: NGramConfig = NGramConfig()) -> NGramDrafter:
    """The drafter counted on the teacher shards of ``folders`` (module doc)."""
    sequences = shard_sequences(folders, prompts=config.prompts, context=config.order - 1)
    return NGramDrafter.train(sequences, vocab_size, order=config.order)


def _draft_probs(drafter: NGramDrafter, tokens: list[int], start: int) -> torch.Tensor:
    """``[A, V]``: the drafter's law before each answer token."""
    return drafter.next_token_probs([tokens[:j] for j in range(start, len(tokens))])


def topk_acceptance(drafter: NGramDrafter, folders: Sequence[Path]) -> dict:
    """Teacher-forced lower bound of the acceptance at each answer position of the shards in
    ``folders`` from the stored top-k (module doc): mean, standard error, positions."""
    values: list[float] = []
    for tokens, start, top_ids, top_probs in shard_rows(_shards(folders)):
        draft_at = _draft_probs(drafter, tokens.tolist(), start).gather(1, torch.from_numpy(top_ids.astype(np.int64)))  # [A, k]
        values += overlap(torch.from_numpy(top_probs), draft_at).tolist()
    return mean_and_stderr(values)


def exact_acceptance(drafter: NGramDrafter, target, folders: Sequence[Path]) -> dict:
    """Teacher-forced acceptance at each answer position of the shards in ``folders``, the target
    (a ``transformers`` causal LM) run over each sequence at temperature 1: mean, standard error,
    positions."""
    values: list[float] = []
    for row, start, _, _ in shard_rows(_shards(folders)):
        tokens = row.tolist()
        target_probs = teacher_forced_probs(target, tokens[:start], tokens[start:])      # [A, V]
        values += acceptance(target_probs, _draft_probs(drafter, tokens, start)).tolist()
    return mean_and_stderr(values)

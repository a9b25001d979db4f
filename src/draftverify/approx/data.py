"""Training data for the SPRINTER classifier (seed 003, section 3.2).

At decoding time the classifier sees prefixes written partly by the draft and partly by the target,
so the seed trains on four kinds of prefix in equal shares: (a) an original prefix; (b) a prefix
continued by the draft; (c) continued by the target; (d) continued by both (here: each token from
the target or the draft with probability 1/2). For each kind we take windows of ``prefix_length``
tokens from the documents, extend them to ``prefix_length + positions`` tokens (with the document's
own text for kind (a)), and at each of the last ``positions`` prefixes draw a fresh token
x ~ D(. | prefix) and record the classifier's features with the true ratio D(x) / T(x), read from
one teacher-forced forward of each model over the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from ..models.base import LanguageModel
from ..models.hidden import HiddenStateTap
from ..probs import warp
from ..rng import sample
from .features import FeatureSpec

__all__ = ["PREFIX_KINDS", "SprinterData", "collect"]

PREFIX_KINDS = ("original", "draft", "target", "mixed")
_TARGET_SHARE = {"draft": 0.0, "target": 1.0, "mixed": 0.5}  # P(a continuation token comes from the target)


@dataclass(frozen=True)
class SprinterData:
    """One row per drafted token: features, the true ratio, its prefix kind and its sequence."""

    hidden: np.ndarray  # [N, H] float32, the draft's last hidden state
    log_draft_prob: np.ndarray  # [N] log D(x)
    entropy: np.ndarray  # [N] entropy of D(. | prefix)
    ratio: np.ndarray  # [N] D(x) / T(x) (inf where T(x) = 0)
    kind: np.ndarray  # [N] index into PREFIX_KINDS
    group: np.ndarray  # [N] sequence id (held-out splits keep a sequence together)

    def __len__(self) -> int:
        return len(self.ratio)

    def features(self, spec: FeatureSpec) -> np.ndarray:
        """``[N, F]`` float64 in the order of :func:`draftverify.approx.features.build_features`."""
        columns = [self.hidden.astype(np.float64)] if spec.hidden else []
        columns += [self.log_draft_prob[:, None]] if spec.log_draft_prob else []
        columns += [self.entropy[:, None]] if spec.entropy else []
        return np.concatenate(columns, axis=1)

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as handle:  # a handle: numpy would append ".npz" to a bare name
            np.savez_compressed(handle, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path: str | Path) -> SprinterData:
        with np.load(path) as data:
            return cls(**{f.name: data[f.name] for f in fields(cls)})


def _windows(documents: list[list[int]], count: int, length: int, rng: np.random.Generator) -> torch.Tensor:
    """``count`` random windows of ``length`` tokens from documents long enough to hold one."""
    long_enough = [d for d in documents if len(d) >= length]
    if not long_enough:
        raise ValueError(f"no document has the {length} tokens a window needs; shorten prefix_length or positions")
    picks = rng.integers(0, len(long_enough), size=count)
    rows = []
    for pick in picks:
        doc = long_enough[pick]
        start = int(rng.integers(0, len(doc) - length + 1))
        rows.append(doc[start : start + length])
    return torch.tensor(rows, dtype=torch.int64)


def _continue(draft: LanguageModel, target: LanguageModel, prefix: torch.Tensor, count: int, target_share: float,
              generator: torch.Generator, temperature: float) -> torch.Tensor:
    """Append ``count`` sampled tokens; each from the target with probability ``target_share``. The
    target reads every token first, as in decoding: a draft that drafts from the target's hidden
    states (a feature draft) reads them from its cache."""
    target_cache = target.new_cache(prefix.shape[0])
    draft_cache = draft.new_cache(prefix.shape[0], target_cache) if target_share < 1 else None
    sequence, chunk = prefix, prefix
    for _ in range(count):
        target_logits = target.forward(target_cache, chunk, None, 1)[:, 0]  # [B, V]
        if draft_cache is None:
            probs = warp(target_logits, temperature)
        else:
            probs = warp(draft.forward(draft_cache, chunk, None, 1)[:, 0], temperature)
            if target_share > 0:
                from_target = torch.rand(prefix.shape[0], 1, generator=generator, dtype=torch.float64) < target_share
                probs = torch.where(from_target, warp(target_logits, temperature).double(), probs.double())
        chunk = sample(probs, generator)[:, None]  # [B, 1]
        sequence = torch.cat([sequence, chunk], 1)
    return sequence


def _score(draft: LanguageModel, target: LanguageModel, sequences: torch.Tensor, positions: int,
           generator: torch.Generator, temperature: float) -> dict[str, np.ndarray]:
    """Features and ratios at the last ``positions`` prefixes of each sequence ``[B, S]``."""
    inputs = sequences[:, :-1]
    target_cache = target.new_cache(inputs.shape[0])
    target_probs = warp(target.forward(target_cache, inputs, None, positions), temperature)
    tap = HiddenStateTap(draft)
    with tap:  # a feature draft reads the target's hidden states of the same tokens (its first-position law)
        draft_probs = warp(draft.forward(draft.new_cache(inputs.shape[0], target_cache), inputs, None, positions), temperature)
    hidden = tap.last[:, -positions:]  # [B, P, H]
    flat_draft = draft_probs.reshape(-1, draft_probs.shape[-1]).double()  # [B P, V]
    drawn = sample(flat_draft, generator)[:, None]  # [B P, 1]
    draft_at = flat_draft.gather(1, drawn)[:, 0]
    target_at = target_probs.reshape(-1, target_probs.shape[-1]).double().gather(1, drawn)[:, 0]
    with np.errstate(divide="ignore"):
        ratio = draft_at.numpy() / target_at.numpy()
    return dict(
        hidden=hidden.reshape(-1, hidden.shape[-1]).float().numpy(),
        log_draft_prob=torch.log(draft_at).numpy(),
        entropy=(-torch.special.xlogy(flat_draft, flat_draft).sum(-1)).numpy(),
        ratio=ratio,
    )


def collect(
    target: LanguageModel,
    draft: LanguageModel,
    documents: list[list[int]],
    *,
    sequences_per_kind: int = 48,
    prefix_length: int = 64,
    positions: int = 32,
    batch_size: int = 16,
    temperature: float = 1.0,
    seed: int = 0,
) -> SprinterData:
    """Collect ``4 * sequences_per_kind * positions`` rows, a quarter from each prefix kind."""
    if min(sequences_per_kind, prefix_length, positions, batch_size) < 1:
        raise ValueError("sequences_per_kind, prefix_length, positions and batch_size must be >= 1")
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    parts: list[dict[str, np.ndarray]] = []
    group = 0
    for kind_index, kind in enumerate(PREFIX_KINDS):
        for start in range(0, sequences_per_kind, batch_size):
            count = min(batch_size, sequences_per_kind - start)
            if kind == "original":
                sequences = _windows(documents, count, prefix_length + positions, rng)
            else:
                prefix = _windows(documents, count, prefix_length, rng)
                sequences = _continue(draft, target, prefix, positions, _TARGET_SHARE[kind], generator, temperature)
            part = _score(draft, target, sequences, positions, generator, temperature)
            part["kind"] = np.full(count * positions, kind_index)
            part["group"] = np.repeat(np.arange(group, group + count), positions)
            group += count
            parts.append(part)
    return SprinterData(**{f.name: np.concatenate([p[f.name] for p in parts]) for f in fields(SprinterData)})

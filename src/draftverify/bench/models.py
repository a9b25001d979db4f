"""The models a benchmark decodes with, named by a frozen settings object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..models.gpt2 import QUANTIZE

__all__ = ["DRAFT_KINDS", "ModelSettings", "load_models"]

# the pair's draft, the n-gram drafter, a transformers draft that transformers' assisted generation runs
DRAFT_KINDS = ("draft", "ngram", "assistant")


@dataclass(frozen=True)
class ModelSettings:
    """Which target and drafts to load: ``target`` / ``draft`` folders (None: the embedded pair),
    ``ngram`` the n-gram drafter's folder (None: the pair's), ``drafts`` the kinds to load (of
    :data:`DRAFT_KINDS`), ``tiny`` random tiny models instead of the pair (a smoke run; its one
    draft kind is "draft"), ``quantize`` the target's weights (None or one of
    :data:`~draftverify.models.gpt2.QUANTIZE`, as
    :func:`~draftverify.models.pair.load_pair`)."""

    target: str | None = None
    draft: str | None = None
    ngram: str | None = None
    drafts: tuple[str, ...] = ("draft",)
    tiny: bool = False
    quantize: str | None = None

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.drafts if kind not in DRAFT_KINDS]
        if unknown or not self.drafts:
            raise ValueError(f"drafts: expected kinds among {', '.join(DRAFT_KINDS)}, got {', '.join(self.drafts) or 'none'}")
        if self.quantize not in (None, *QUANTIZE):
            raise ValueError(f"quantize must be None or one of {QUANTIZE}, got {self.quantize!r}")
        if self.tiny and "ngram" in self.drafts:
            raise ValueError("drafts: the tiny models have no n-gram drafter (drop ngram or --tiny)")


def load_models(settings: ModelSettings) -> tuple[Any, dict[str, Any], Any]:
    """The target, the drafts by kind, and the tokenizer."""
    if settings.tiny:
        from ..models.hf import TransformersModel
        from ..models.toy import char_tokenizer, tiny_causal_lm

        tokenizer = char_tokenizer("abcdefghijklmnopqrstuvwxyz_ .,:()[]=+-*/<>\"'#\n0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        size = len(tokenizer)
        target = TransformersModel(tiny_causal_lm(size, width=64, layers=2, dtype=torch.float32, max_positions=4096),
                                   tokenizer, quantize=settings.quantize)
        draft = TransformersModel(tiny_causal_lm(size, width=16, layers=1, seed=1, dtype=torch.float32, max_positions=4096))
        return target, {"draft": draft}, tokenizer
    from ..models.pair import load_assistant, load_ngram_draft, load_pair

    pair = load_pair(settings.target, settings.draft, quantize=settings.quantize)
    drafts = {}
    if "draft" in settings.drafts:
        drafts["draft"] = pair.draft
    if "assistant" in settings.drafts:
        drafts["assistant"] = load_assistant(pair, settings.target)
    if "ngram" in settings.drafts:
        drafts["ngram"] = load_ngram_draft(pair.target, settings.ngram, target_name=settings.target)
    return pair.target, drafts, pair.tokenizer

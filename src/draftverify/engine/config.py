"""The decoding configuration: a frozen, validated dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..probs import warp
from ..verify import Verifier, get_verifier

__all__ = ["DecodeConfig", "AR"]

AR = "ar"  # plain autoregressive sampling from the target: the baseline every method is compared with


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode. ``method`` is ``"ar"`` or a registered verifier name (``options`` are its
    options); ``num_drafts`` (K) and ``draft_length`` (L) default to 1 and 4 for verifiers and must
    stay None for ``ar``. The same warping (temperature, top-k, top-p) is applied to draft and
    target: verifiers are exact for the warped target. ``method`` may also be a ``Verifier``
    instance (e.g. an unregistered one under test). ``ignore_eos`` decodes through EOS (as vLLM's
    option of that name), so benchmarks generate exactly ``max_new_tokens``."""

    method: str | Verifier = "sd"
    num_drafts: int | None = None
    draft_length: int | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int = 0
    ignore_eos: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        warp(torch.zeros(1, 2), self.temperature, self.top_k, self.top_p)  # raises on bad warping options
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")
        if self.method == AR:
            given = [n for n in ("num_drafts", "draft_length") if getattr(self, n) is not None]
            if given or self.options:
                raise ValueError(f"method 'ar' takes no drafts or verifier options (got {', '.join(given + list(self.options))})")
            return
        if isinstance(self.method, Verifier) and self.options:
            raise ValueError("options go with a verifier name, not with a Verifier instance")
        verifier = self.verifier()  # unknown names and options raise here
        if self.num_drafts is not None and self.num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {self.num_drafts}")
        if self.draft_length is not None and self.draft_length < 1:
            raise ValueError(f"draft_length must be >= 1, got {self.draft_length}")
        if self.drafts > 1 and not verifier.multi_draft:
            raise ValueError(f"verifier {self.name!r} takes one draft; num_drafts = {self.drafts} needs a multi-draft verifier")

    @property
    def speculative(self) -> bool:
        return self.method != AR

    @property
    def name(self) -> str:
        return self.method.name if isinstance(self.method, Verifier) else self.method

    @property
    def drafts(self) -> int:
        """K (1 when unset)."""
        return 1 if self.num_drafts is None else self.num_drafts

    @property
    def length(self) -> int:
        """L (4 when unset)."""
        return 4 if self.draft_length is None else self.draft_length

    def verifier(self) -> Verifier:
        if isinstance(self.method, Verifier):
            return self.method
        return get_verifier(self.method, **self.options)

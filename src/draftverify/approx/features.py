"""What the SPRINTER classifier sees of a drafted token: s(x, prefix) in seed 003 (section 3).

The seed feeds its classifier "the last embedding of the previous token": the draft's last hidden
state at the position whose output distribution the token x was drawn from (the input of the
draft's output layer). Two optional scalar features carry what that state does not know, which
token was drawn: the log draft probability log D(x | prefix), and the entropy of D(. | prefix).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["FeatureSpec", "build_features", "HiddenStateTap", "draft_fingerprint"]


@dataclass(frozen=True)
class FeatureSpec:
    """Which features to use: the draft's last hidden state, log D(x), entropy of D."""

    hidden: bool = True
    log_draft_prob: bool = True
    entropy: bool = True

    def __post_init__(self) -> None:
        if not (self.hidden or self.log_draft_prob or self.entropy):
            raise ValueError("a feature spec needs at least one feature")

    def size(self, hidden_size: int | None) -> int:
        """Number of features for a draft of hidden size ``hidden_size``."""
        if self.hidden and not hidden_size:
            raise ValueError("the hidden-state feature needs the draft's hidden size")
        return (hidden_size if self.hidden else 0) + int(self.log_draft_prob) + int(self.entropy)


def build_features(
    spec: FeatureSpec,
    tokens: torch.Tensor,  # [N] drafted tokens
    draft_probs: torch.Tensor,  # [N, V] the distributions they were drawn from
    hidden: torch.Tensor | None = None,  # [N, H] the draft's last hidden state at those positions
) -> torch.Tensor:
    """Feature rows ``[N, F]`` (float64) in the order hidden state, log D(x), entropy of D."""
    if tokens.dim() != 1 or draft_probs.dim() != 2 or draft_probs.shape[0] != tokens.shape[0]:
        raise ValueError(f"expected tokens [N] and draft_probs [N, V], got {tuple(tokens.shape)} and {tuple(draft_probs.shape)}")
    columns = []
    if spec.hidden:
        if hidden is None:
            raise ValueError("this classifier needs the draft's last hidden state (a transformers draft)")
        if hidden.dim() != 2 or hidden.shape[0] != tokens.shape[0]:
            raise ValueError(f"hidden: expected shape [N={tokens.shape[0]}, H], got {tuple(hidden.shape)}")
        columns.append(hidden.to(torch.float64))
    probs = draft_probs.to(torch.float64)
    if spec.log_draft_prob:
        drawn = probs.gather(-1, tokens.long().unsqueeze(-1))  # [N, 1]
        if bool((drawn <= 0).any()):
            raise ValueError("a drafted token has zero draft probability: it cannot have been drawn")
        columns.append(torch.log(drawn))
    if spec.entropy:
        columns.append(-torch.special.xlogy(probs, probs).sum(-1, keepdim=True))  # [N, 1], 0 log 0 = 0
    features = torch.cat(columns, dim=1)
    if not bool(torch.isfinite(features).all()):
        raise ValueError("features contain NaN or infinite values")
    return features


class HiddenStateTap:
    """Records the input of a ``transformers`` model's output layer on every forward: the last
    hidden state (after the final norm) at the positions whose logits are computed.

    Use as a context manager around forwards: ``with tap: model.forward(...)``; then ``tap.last``
    is ``[B, num_logits, H]``. The hook only keeps a reference: no extra computation.
    """

    def __init__(self, model: Any):
        module = getattr(model, "model", model)  # a TransformersModel or a bare transformers model
        head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
        if head is None:
            raise ValueError(f"{type(model).__name__} has no output layer to read hidden states from")
        self.head = head
        self.hidden_size = int(head.weight.shape[1])
        self.last: torch.Tensor | None = None
        self._handle = None

    def _record(self, module, inputs, output) -> None:
        self.last = inputs[0]

    def __enter__(self) -> HiddenStateTap:
        self.last = None
        self._handle = self.head.register_forward_hook(self._record)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
        self._handle = None


def draft_fingerprint(model: Any) -> str:
    """A short hash of the draft's output layer: a classifier trained on one draft's hidden states
    means nothing for another, and the engine refuses the pairing (see ``SprinterLog``)."""
    head = HiddenStateTap(model).head.weight.detach().to(torch.float32).contiguous()
    return hashlib.sha256(head.numpy().tobytes()).hexdigest()[:16]

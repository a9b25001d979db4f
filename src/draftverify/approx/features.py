"""What the SPRINTER classifier sees of a drafted token: s(x, prefix) in seed 003 (section 3).

The seed feeds its classifier "the last embedding of the previous token": the draft's last hidden
state at the position whose output distribution the token x was drawn from (the input of the
draft's output layer, recorded by :class:`draftverify.models.hidden.HiddenStateTap`). Two optional scalar features carry what that state does not know, which
token was drawn: the log draft probability log D(x | prefix), and the entropy of D(. | prefix).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["FeatureSpec", "build_features"]


@dataclass(frozen=True)
class FeatureSpec:
    """Which features to use: the draft's last hidden state, log D(x), entropy of D."""

    hidden: bool = True
    log_draft_prob: bool = True
    entropy: bool = True

    def __post_init__(self) -> None:
        if not (self.hidden or self.log_draft_prob or self.entropy):
            raise ValueError("a feature spec needs at least one feature")

    @property
    def description(self) -> str:
        """What the classifier reads, in words (the report's)."""
        parts = ["the draft's hidden state"] * self.hidden + ["log D(x)"] * self.log_draft_prob + \
            ["the entropy of D"] * self.entropy
        return " + ".join(parts)

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

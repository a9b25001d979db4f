"""What a transformers model's output layer sees: its last hidden state, read by a forward hook,
and a fingerprint of the layer that tells one draft from another.

SPRINTER's classifier (seed 003, section 3) reads the draft's last hidden state; the engine's
``gated`` step records it with :class:`HiddenStateTap` while it drafts, and refuses a classifier
trained on another draft (:func:`draft_fingerprint`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

__all__ = ["HiddenStateTap", "draft_fingerprint"]


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
    means nothing for another, and the engine refuses the pairing (see :mod:`draftverify.engine.gated`)."""
    head = HiddenStateTap(model).head.weight.detach().to(torch.float32).contiguous()
    return hashlib.sha256(head.numpy().tobytes()).hexdigest()[:16]

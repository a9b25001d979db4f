"""Attention masks over the slot table of a :class:`~draftverify.models.base.Cache`.

Masks are boolean, True where a query slot may attend to a key slot (the convention of
``torch.nn.functional.scaled_dot_product_attention``); :func:`additive` turns one into the float
form ``transformers`` models take. Every query sees itself, so a padding query has a finite
output (it is never attended to).
"""

from __future__ import annotations

import torch

__all__ = ["additive", "causal_mask", "slot_mask", "tree_mask"]


def causal_mask(num_new: int, width: int) -> torch.Tensor:
    """[S, T]: the last S of T slots are the queries; query i sees keys j <= T - S + i."""
    return torch.ones(num_new, width, dtype=torch.bool).tril_(width - num_new)


def slot_mask(valid: torch.Tensor, num_new: int) -> torch.Tensor:
    """[B, 1, S, T] for ``valid`` [B, T] whose last S slots are the queries: query slot i sees the
    valid slots j <= i, and itself."""
    width = valid.shape[1]
    query_slots = torch.arange(width - num_new, width)[:, None]  # [S, 1]
    key_slots = torch.arange(width)[None, :]  # [1, T]
    allowed = ((key_slots <= query_slots)[None] & valid[:, None, :]) | (key_slots == query_slots)[None]  # [B, S, T]
    return allowed[:, None]


def tree_mask(old_valid: torch.Tensor, pending_valid: torch.Tensor, num_drafts: int, length: int) -> torch.Tensor:
    """[B, 1, S, T] for pending tokens [B, m] followed by K drafts of L tokens after the slots
    ``old_valid`` [B, T - S]: every query sees the row's valid slots; pending tokens are causal among
    themselves; draft k's token i sees the valid pending tokens and draft k's tokens 0..i."""
    rows, width = old_valid.shape
    m = pending_valid.shape[1]
    size = m + num_drafts * length
    query = torch.arange(size)
    draft_of = torch.cat([torch.full((m,), -1), torch.arange(num_drafts).repeat_interleave(length)])  # [S]
    causal = query[None, :] <= query[:, None]  # [S, S]
    same_draft = draft_of[:, None] == draft_of[None, :]
    to_pending = (draft_of[None, :] == -1).expand(size, size)
    inside = causal & (same_draft | to_pending)  # [S, S]
    chunk_valid = torch.cat([pending_valid, torch.ones(rows, num_drafts * length, dtype=torch.bool)], 1)
    allowed = torch.cat([old_valid[:, None, :].expand(rows, size, width), inside[None] & chunk_valid[:, None, :]], 2)
    allowed = allowed | torch.cat([torch.zeros(size, width, dtype=torch.bool), torch.eye(size, dtype=torch.bool)], 1)
    return allowed[:, None]  # [B, 1, S, T]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float mask of a boolean one: 0 where allowed, the dtype's minimum elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)

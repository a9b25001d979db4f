"""The committed tokens a cache has not seen yet, as one left-padded batch."""

from __future__ import annotations

import torch

__all__ = ["pending_tokens", "pending_count"]


def pending_tokens(committed: list[list[int]], held: list[int], active: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``committed[p][held[p]:]`` for each prompt p of ``active``, left-padded: tokens ``[R, m]``
    and the valid mask ``[R, m]`` (None when no row is padded)."""
    chunks = [committed[p][held[p] :] for p in active]
    width = max(len(c) for c in chunks)
    if all(len(c) == width for c in chunks):
        return torch.tensor(chunks, dtype=torch.int64), None
    tokens = torch.zeros(len(chunks), width, dtype=torch.int64)
    valid = torch.zeros(len(chunks), width, dtype=torch.bool)
    for r, chunk in enumerate(chunks):
        tokens[r, width - len(chunk) :] = torch.tensor(chunk, dtype=torch.int64)
        valid[r, width - len(chunk) :] = True
    return tokens, valid


def pending_count(tokens: torch.Tensor, valid: torch.Tensor | None, row: int) -> int:
    """How many of row ``row``'s pending ``tokens`` are real (not padding)."""
    return tokens.shape[1] if valid is None else int(valid[row].sum())

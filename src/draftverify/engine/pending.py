"""The committed tokens a cache has not seen yet, as one left-padded batch."""

from __future__ import annotations

import torch

__all__ = ["pending_tokens"]


def pending_tokens(sequences: list[list[int]], held: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequences[r][held[r]:]`` for each row r, left-padded: tokens ``[R, m]`` and the valid mask
    ``[R, m]`` (None when no row is padded)."""
    chunks = [seq[h:] for seq, h in zip(sequences, held)]
    width = max(len(c) for c in chunks)
    if all(len(c) == width for c in chunks):
        return torch.tensor(chunks, dtype=torch.int64), None
    tokens = torch.zeros(len(chunks), width, dtype=torch.int64)
    valid = torch.zeros(len(chunks), width, dtype=torch.bool)
    for r, chunk in enumerate(chunks):
        tokens[r, width - len(chunk) :] = torch.tensor(chunk, dtype=torch.int64)
        valid[r, width - len(chunk) :] = True
    return tokens, valid

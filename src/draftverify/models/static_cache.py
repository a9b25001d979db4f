"""A static KV cache: per-layer key and value buffers preallocated once, written by index.

The design follows gpt-fast's ``KVCache`` (Hugging Face's ``StaticCache`` is the same idea):
buffers ``[B, H, capacity, D]`` allocated before decoding, a chunk's keys and values copied into
the slots it occupies, and attention reading the buffers in place. Where gpt-fast attends over all
``capacity`` slots under a mask (fixed shapes for CUDA graphs), we attend over the used prefix
``[:, :, :length]`` (a view, no copy): on a CPU the work then grows with the text, not with the
buffer. Cropping moves ``length``; nothing is freed or copied. Reordering rows copies the used
prefix once, only when the rows change. Buffers start at the length the caller gives (or empty,
sized at the first write to the prompt plus at least 256 slots) and double, with one copy of the
used prefix, when a text outgrows them.

A target read by a feature draft (:mod:`.feature_draft`) also keeps, slot by slot, the last hidden
state its forward computed there (``features``), reordered, moved and cropped with the keys.
"""

from __future__ import annotations

import torch

__all__ = ["StaticKV"]

_BLOCK = 256  # slots are allocated in multiples of this


class StaticKV:
    """Keys and values of ``layers`` attention layers for ``batch`` rows, slots ``[0, length)`` in use."""

    def __init__(self, layers: int, batch: int, heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                 feature_size: int = 0):
        shape = (batch, heads, capacity, head_dim)
        with torch.inference_mode(False):  # normal tensors: writable inside and outside inference mode
            self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]  # [B, H, capacity, D] each
            self.values = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
            # [B, 1, capacity, E]: the last hidden state at each slot (feature_size E > 0 only)
            self.hidden = torch.zeros(batch, 1, capacity, feature_size, dtype=dtype) if feature_size else None
        self.length = 0

    @property
    def features(self) -> torch.Tensor:
        """[B, length, E]: the last hidden state kept at every slot in use (a view)."""
        if self.hidden is None:
            raise ValueError("this cache keeps no hidden states (feature_size=0)")
        return self.hidden[:, 0, : self.length]

    def write_features(self, hidden: torch.Tensor) -> None:
        """Keep ``hidden`` [B, S, E] at slots ``[length, length + S)`` (before :meth:`advance`)."""
        self.hidden[:, 0, self.length : self.length + hidden.shape[1]] = hidden

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more slots after ``length`` (doubling, copying the used prefix)."""
        if self.length + extra <= self.capacity:
            return
        blocks = -(-(self.length + extra) // _BLOCK)  # ceil
        capacity = max(2 * self.capacity, blocks * _BLOCK)
        self._select(None, capacity)

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``keys``, ``values`` [B, H, S, D] at slots ``[length, length + S)`` of ``layer``;
        return that layer's used prefix ``[B, H, length + S, D]`` (views into the buffers).
        :meth:`advance` moves ``length`` once every layer has been written."""
        end = self.length + keys.shape[2]
        self.keys[layer][:, :, self.length : end] = keys
        self.values[layer][:, :, self.length : end] = values
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def __call__(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`write` (a cache is the forwards' ``write``; the compiled Llama layers write its buffers themselves)."""
        return self.write(layer, keys, values)

    def advance(self, size: int) -> None:
        self.length += size

    def crop(self, length: int) -> None:
        """Keep slots ``[0, length)``: the pointer moves, the buffers stay."""
        self.length = length

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows ``rows`` [B'] (repeats allowed), copying only the used prefix."""
        self._select(rows, self.capacity)

    def move(self, rows: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> None:
        """Copy slot ``source[i]`` to slot ``target[i]`` in row ``rows[i]``, in every layer."""
        for buffer in (*self.keys, *self.values, *([] if self.hidden is None else [self.hidden])):
            buffer[rows, :, target] = buffer[rows, :, source]

    def _select(self, rows: torch.Tensor | None, capacity: int) -> None:
        self.keys = [self._moved(k, rows, capacity) for k in self.keys]
        self.values = [self._moved(v, rows, capacity) for v in self.values]
        if self.hidden is not None:
            self.hidden = self._moved(self.hidden, rows, capacity)

    def _moved(self, buffer: torch.Tensor, rows: torch.Tensor | None, capacity: int) -> torch.Tensor:
        batch, heads, _, head_dim = buffer.shape
        with torch.inference_mode(False):
            out = torch.empty(batch if rows is None else rows.numel(), heads, capacity, head_dim, dtype=buffer.dtype)
            used = buffer[:, :, : self.length]
            out[:, :, : self.length] = used if rows is None else used.index_select(0, rows)
        return out

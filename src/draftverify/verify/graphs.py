"""A batched kernel captured in a CUDA graph: one serving step's verification replayed as one
launch instead of its chain of small kernels.

On a GPU a batched call is launch-bound: about 1 ms for ``sd`` and 2 ms for ``bv`` on an H100 at any
V and L (``docs/results/verify.md``), where the arithmetic takes microseconds. The kernels never
synchronise with the host (no ``.item()``, no host copy: ``tests/verify/test_batched.py`` runs them
under ``torch.cuda.set_sync_debug_mode("error")``) and read ``max_draft_len`` as a Python int, so a
call with fixed shapes can be captured once (``torch.cuda.CUDAGraph``) and replayed on new values
copied into the captured inputs: the same operations on the same values, so the same tokens as the
eager kernel. A serving engine pads its batches to a few shapes and keeps one graph per shape.
"""

from __future__ import annotations

import torch

from .base import Verifier
from .batched import BatchedVerifyResult

__all__ = ["GraphedKernel"]

_NAMES = ("draft_token_ids", "draft_probs", "target_probs", "cu_num_draft_tokens", "uniforms")


class GraphedKernel:
    """``verifier``'s batched kernel captured for the shapes, dtypes and CUDA device of the example
    arrays (the flattened ragged layout of :mod:`.batched`: B rows, num_tokens drafted tokens, V)
    and ``max_draft_len``; then ``graphed(draft_token_ids, draft_probs, target_probs,
    cu_num_draft_tokens, uniforms)`` on arrays of exactly those shapes gives what
    ``verifier.kernel`` gives on them. ``draft_probs`` and ``uniforms`` are None for a verifier that
    reads neither (``greedy``).

    Like every kernel it trusts the values (validate them with :meth:`Verifier.verify_batch` where
    they are not trusted); shapes, dtypes and devices are checked on the host, for free. The
    result's tensors are the graph's own outputs, overwritten by the next call: copy what you keep.
    """

    def __init__(self, verifier: Verifier, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                 target_probs: torch.Tensor, cu_num_draft_tokens: torch.Tensor, uniforms: torch.Tensor | None,
                 max_draft_len: int, warmup: int = 2):
        if not verifier.batched:
            raise ValueError(f"verifier {verifier.name!r} has no batched kernel to capture")
        arrays = (draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms)
        if any(a is not None and a.device.type != "cuda" for a in arrays):
            raise ValueError("a CUDA graph captures CUDA tensors; got arrays on "
                             f"{sorted({str(a.device) for a in arrays if a is not None})}")
        self.max_draft_len = max_draft_len
        self.inputs = [None if a is None else a.clone() for a in arrays]
        kernel = verifier.kernel
        side = torch.cuda.Stream()  # warm-up off the default stream, as capture requires
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                kernel(*self.inputs, max_draft_len)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.result: BatchedVerifyResult = kernel(*self.inputs, max_draft_len)

    def __call__(self, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                 cu_num_draft_tokens: torch.Tensor, uniforms: torch.Tensor | None) -> BatchedVerifyResult:
        arrays = (draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms)
        for name, static, new in zip(_NAMES, self.inputs, arrays):
            if (static is None) != (new is None):
                raise ValueError(f"{name}: captured {'without' if static is None else 'with'} it")
            if static is not None and (new.shape != static.shape or new.dtype != static.dtype or new.device != static.device):
                raise ValueError(f"{name}: captured as {tuple(static.shape)} {static.dtype} on {static.device}, "
                                 f"got {tuple(new.shape)} {new.dtype} on {new.device}")
        for static, new in zip(self.inputs, arrays):
            if static is not None:
                static.copy_(new)
        self.graph.replay()
        return self.result

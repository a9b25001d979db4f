"""A lean GPT-2 forward over a KV cache: the computation of ``GPT2LMHeadModel.forward`` with the
model's own parameters, without its per-call bookkeeping (argument checks, mask builders, output
objects), which dominates the cost of small models on a CPU.

GPT-2 (Radford et al. 2019): pre-layer-norm blocks, attention then MLP with tanh-GELU, final layer
norm, output embedding. The parameters are read once into :class:`GPT2Weights`, so a call does no
attribute lookups on modules. Every matrix product (each linear layer and the output layer) runs
the compiled panel kernel of :mod:`.panel_mm` over weights packed once, float32 or weight-only int8
(``quantize="int8"``). Where that kernel cannot run (or ``DRAFTVERIFY_KERNEL=eager``), the eager
kernels that were fastest for each row count on our CPU run instead (``draftverify bench
model-cost``; one thread, 6 x 256 target): ``addmm`` on the model's own [in, out] weight for one
row; oneDNN's matmul on a prepacked copy for more rows (the packing ``torch.compile`` applies to
frozen linear layers on CPU; 2-4x faster than ``addmm`` at 5 rows); for the output layer, ``mm`` on
a transposed copy for one row (2x faster than ``F.linear``); an int8 target there multiplies by its
dequantized float32 weights. The copies are taken once: wrap the model again if its weights change.

``torch.compile`` is not used: measured on the embedded target (2-core CPU, under load), compiling
this function with dynamic shapes took 100 s for the first one-token call and 73 s more for the
first five-token call, then ran one-token calls no faster than eager (14.9 vs 14.7 ms) and
five-token calls 7% faster; with inductor's weight freezing it failed to lower the prepacked
oneDNN calls, whose packing is most of what freezing would have brought.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .ggml_blocks import BlockLinear, int8_activations_compiled, quantize_q8_0
from .panel_mm import ISAS, PanelLinear, quantize_int8
from .panel_mm import kernel as panel_kernel

__all__ = ["QUANTIZE", "GPT2Weights", "KVWrite", "Linear", "gpt2_forward", "is_lean_gpt2", "linear_bytes", "onednn_packing",
           "output_logits", "q8_compiled"]

# the target's weight formats: float32 (also None), weight-only int8 (a new model), its GGUF blocks (the same
# model), its GGUF blocks times activations rounded to 8 bits as llama.cpp does (a new model)
QUANTIZE = ("float32", "int8", "gguf", "gguf-q8")

# store a layer's new keys and values [B, H, S, D]; return the layer's keys and values so far [B, H, T, D]
KVWrite = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def is_lean_gpt2(model: Any) -> bool:
    """Whether :func:`gpt2_forward` computes exactly what this model's forward computes."""
    config = model.config
    return (
        type(model).__name__ == "GPT2LMHeadModel"
        and config.activation_function == "gelu_new"
        and config.scale_attn_weights
        and not config.scale_attn_by_inverse_layer_idx
        and not config.reorder_and_upcast_attn
        and not config.add_cross_attention
        and not model.training
    )


@cache
def onednn_packing() -> bool:
    """Whether oneDNN's prepacked linear kernels run here and agree with ``addmm`` (checked once;
    without them every product takes ``addmm``, and a warning says so)."""
    try:
        weight, x = torch.randn(8, 4), torch.randn(3, 4)  # weight [out, in], x [N, in]
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 3)
        ok = torch.allclose(torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), x @ weight.t(), atol=1e-5)
    except (AttributeError, RuntimeError) as error:
        ok, reason = False, f"{type(error).__name__}: {error}"
    else:
        reason = "results differ from addmm"
    if not ok:
        warnings.warn(f"oneDNN packed linear layers unavailable ({reason}); multi-token calls use addmm", stacklevel=2)
    return ok


@cache
def _gguf_fallback() -> None:
    warnings.warn("quantize='gguf' needs AVX-512 (the block product); the float32 weights (the same model) "
                  "stream instead", stacklevel=3)


def q8_compiled(kernel: str | None = None) -> bool:
    """Whether :meth:`Linear.of` with ``quantize="q8"`` (or "gguf-q8") and ``kernel`` runs the
    compiled 8-bit-activation product: the CPU runs it (AVX-512 VNNI, or AVX2 with F16C) and ``kernel``
    neither asks for the eager arithmetic ("eager") nor conflicts with it ("panel-avx2", which keeps
    AVX-512 out of every product: refused there, as the VNNI product would run)."""
    return kernel not in ("eager", "panel-avx2") and int8_activations_compiled()


class Linear:
    """``x @ weight + bias`` for x [N, in], weight [in, out], through the eager kernel fastest for N
    (module doc); :meth:`of` picks the panel kernel instead where it runs."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None = None):
        self.weight, self.bias = weight, bias  # [in, out], [out] or None
        self.packed = packed  # oneDNN's layout of weight.T, or None

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None, quantize: str | None = None,
           kernel: str | None = None) -> Linear | PanelLinear | BlockLinear:
        """The product for a weight [in, out]: the panel kernel for float32 weights where it runs
        (``kernel`` "panel", "panel-avx2", "panel-avx512" or "eager" overrides
        :func:`.panel_mm.kernel`'s choice; "panel" runs its best instruction set), else eager:
        oneDNN-packed when it can, ``addmm`` otherwise (``quantize`` None or "float32"). ``quantize="int8"``: the weight-only int8
        product (eager: over the dequantized weights). ``quantize="gguf"``: the same weights as the
        GGML blocks they were dequantized from (:class:`.ggml_blocks.BlockLinear`, AVX-512; bit-identical
        to the float32 panel product); on a CPU without AVX-512, the float32 product with a warning.
        ``quantize="gguf-q8"``: those blocks times the activations rounded to 8 bits per block of 32, as
        llama.cpp multiplies them (a new model; AVX-512 VNNI, else AVX2 with F16C; where the CPU has
        neither or ``kernel="eager"`` the same arithmetic in torch). ``quantize="q8"`` (a feature draft's, not a target's option):
        the float32 weight rounded to Q8_0 blocks (:func:`.ggml_blocks.quantize_q8_0`), then as
        "gguf-q8"."""
        if quantize not in (None, *QUANTIZE, "q8"):
            raise ValueError(f"quantize must be None or one of {(*QUANTIZE, 'q8')}, got {quantize!r}")
        quantize = None if quantize == "float32" else quantize
        panels = ("panel", *(f"panel-{isa}" for isa in ISAS))
        if kernel not in (None, "eager", *panels):
            raise ValueError(f"kernel must be None, 'eager' or one of {panels}, got {kernel!r}")
        if quantize in ("q8", "gguf-q8"):
            if kernel == "panel-avx2":
                raise ValueError(f"quantize={quantize!r} runs on AVX-512 VNNI where the CPU has it (or eagerly); "
                                 "kernel='panel-avx2' conflicts")
            blocks = quantize_q8_0(weight) if quantize == "q8" else weight
            return BlockLinear(blocks, bias, "int8", None if kernel is None else kernel != "eager")
        if quantize == "gguf":
            if kernel in ("eager", "panel-avx2"):
                raise ValueError(f"quantize='gguf' runs the panel kernel's AVX-512 block product; kernel={kernel!r} conflicts")
            if "avx512" in panel_kernel().isas:
                return BlockLinear(weight, bias)
            if kernel is not None:
                raise ValueError(f"quantize='gguf' needs the panel kernel's AVX-512 path, not here: {panel_kernel().isas or panel_kernel().reason}")
            _gguf_fallback()
            quantize = None  # the float32 weights are the same model
        if weight.dtype != torch.float32 and (quantize is not None or kernel in panels):
            raise ValueError(f"quantize='int8' and kernel={kernel!r} take float32 weights, got {weight.dtype}")
        if kernel in panels and not panel_kernel().compiled:
            raise ValueError(f"kernel={kernel!r} cannot run here: {panel_kernel().reason}")
        if weight.dtype == torch.float32 and (panel_kernel().compiled if kernel is None else kernel in panels):
            isa = kernel.removeprefix("panel-") if kernel not in (None, "panel") else None
            return PanelLinear(weight, bias, quantize, isa)
        with torch.no_grad():
            if quantize == "int8":
                q, scale = quantize_int8(weight)
                weight = q.float() * scale  # [in, out]: the int8 model's weights
            pack = weight.dtype == torch.float32 and onednn_packing()
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.t().contiguous(), 5) if pack else None
        return cls(weight, bias, packed)

    @property
    def nbytes(self) -> int:
        """Bytes of weights a product streams."""
        return self.weight.numel() * self.weight.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [N, in] -> [N, out]
        if self.packed is not None and x.shape[0] > 1:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return torch.mm(x, self.weight) if self.bias is None else torch.addmm(self.bias, x, self.weight)


@dataclass(frozen=True)
class GPT2Weights:
    """What :func:`gpt2_forward` reads, per block as one tuple: (ln_1 weight, ln_1 bias, qkv
    [E -> 3E], attention output [E -> E], ln_2 weight, ln_2 bias, fc [E -> 4E], proj [4E -> E])."""

    token_embedding: torch.Tensor  # [V, E]
    position_embedding: torch.Tensor  # [P, E]
    blocks: tuple[tuple[Any, ...], ...]
    final_norm: tuple[torch.Tensor, torch.Tensor]
    heads: int
    eps: float
    head: Linear | PanelLinear | BlockLinear  # the output layer, [E -> V]
    head_module: torch.nn.Module  # called instead when it has forward hooks (they see its input)

    @classmethod
    def of(cls, model: Any, quantize: str | None = None, kernel: str | None = None) -> GPT2Weights:
        """The weights of ``model``, every product as :meth:`Linear.of` makes it (same options)."""
        body = model.transformer

        def linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear | PanelLinear | BlockLinear:
            return Linear.of(weight, bias, quantize, kernel)

        with torch.no_grad():
            blocks = tuple(
                (b.ln_1.weight, b.ln_1.bias, linear(b.attn.c_attn.weight, b.attn.c_attn.bias),
                 linear(b.attn.c_proj.weight, b.attn.c_proj.bias), b.ln_2.weight, b.ln_2.bias,
                 linear(b.mlp.c_fc.weight, b.mlp.c_fc.bias), linear(b.mlp.c_proj.weight, b.mlp.c_proj.bias))
                for b in body.h
            )
            head_module = model.lm_head
            head = linear(head_module.weight.t().contiguous(), head_module.bias)
        return cls(body.wte.weight, body.wpe.weight, blocks, (body.ln_f.weight, body.ln_f.bias),
                   model.config.n_head, model.config.layer_norm_epsilon, head, head_module)

    @property
    def kv_shape(self) -> tuple[int, int, int]:
        """(layers, key/value heads, head size) of the KV cache."""
        return len(self.blocks), self.heads, self.token_embedding.shape[1] // self.heads

    @property
    def product_bytes(self) -> int:
        """Bytes of weights one call streams through its linear and output layers."""
        return linear_bytes(self.blocks, self.head)

    def __call__(self, write: KVWrite, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                 num_logits: int, valid: torch.Tensor | None = None) -> torch.Tensor:
        """:func:`gpt2_forward`; ``valid`` (the chunk's padding, as :func:`~.llama.llama_layers` takes
        it) is not read: every position is computed."""
        return gpt2_forward(self, write, tokens, positions, mask, num_logits)


def linear_bytes(layers: tuple[tuple[Any, ...], ...], head: Linear | PanelLinear | BlockLinear) -> int:
    """Bytes of weights of the linear layers in ``layers`` (tuples of a forward's parts) and ``head``."""
    products = (Linear, PanelLinear, BlockLinear)
    return head.nbytes + sum(part.nbytes for layer in layers for part in layer if isinstance(part, products))


def output_logits(head: Linear | PanelLinear | BlockLinear, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits [B, N, V] of final hidden states x [B, N, E]; through ``module`` when it has forward
    hooks, so they see x (SPRINTER's classifier reads it)."""
    if module._forward_hooks or module._forward_pre_hooks:
        return module(x)
    return head(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], -1)


def gpt2_forward(weights: GPT2Weights, write: KVWrite, tokens: torch.Tensor, positions: torch.Tensor,
                 mask: torch.Tensor | None, num_logits: int) -> torch.Tensor:
    """Logits [B, num_logits, V] after the last ``num_logits`` of ``tokens`` [B, S].

    ``positions`` [B, S] (or broadcastable); ``write`` stores each layer's keys and values and
    returns the layer's cache; ``mask`` [B or 1, 1, S, T] or [S, T] (bool, True = attend, or
    additive), None only when every query may see every key (S = 1 without holes)."""
    rows, size = tokens.shape
    x = weights.token_embedding[tokens] + weights.position_embedding[positions]  # [B, S, E]
    width = x.shape[-1]
    head_dim = width // weights.heads
    eps = weights.eps
    for index, (n1w, n1b, qkv, out, n2w, n2b, fc, proj) in enumerate(weights.blocks):
        h = F.layer_norm(x, (width,), n1w, n1b, eps).view(-1, width)  # [B S, E]
        q, k, v = qkv(h).view(rows, size, 3, weights.heads, head_dim).permute(2, 0, 3, 1, 4)  # [B, H, S, D] each
        k, v = write(index, k, v)  # [B, H, T, D]
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, S, D]
        x = x + out(attended.transpose(1, 2).reshape(-1, width)).view(rows, size, width)
        h = F.layer_norm(x, (width,), n2w, n2b, eps).view(-1, width)
        x = x + proj(F.gelu(fc(h), approximate="tanh")).view(rows, size, width)  # MLP through [B S, 4E]
    x = F.layer_norm(x[:, -num_logits:], (width,), *weights.final_norm, eps)  # [B, num_logits, E]
    return output_logits(weights.head, weights.head_module, x)  # [B, num_logits, V]

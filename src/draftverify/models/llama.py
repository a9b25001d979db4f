"""A lean Llama forward over a KV cache: the computation of ``LlamaForCausalLM.forward`` with the
model's own parameters, without its per-call bookkeeping (see :mod:`.gpt2` for why and for the
matrix kernels, which are shared).

Llama (Touvron et al. 2023): RMS-norm before attention and MLP, rotary position embeddings on
queries and keys (Su et al. 2021), grouped-query attention (keys and values shared by groups of
query heads, Ainslie et al. 2023), SiLU-gated MLP, final RMS norm. The rotary cosines and sines and
the norms come from the model's own modules, so rope-scaling variants and norm details match it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .gpt2 import KVWrite, Linear, linear_bytes, output_logits
from .ggml_blocks import BlockLinear
from .panel_mm import ISAS, PanelLinear
from .static_cache import StaticKV

__all__ = ["LlamaWeights", "RotaryTable", "compiled_layers", "compiled_products", "is_lean_llama", "layer_counts",
           "llama_forward", "llama_layers", "layer_weights", "rotary_angles", "rotary_table"]


def is_lean_llama(model: Any) -> bool:
    """Whether :func:`llama_forward` computes exactly what this model's forward computes."""
    config = model.config
    return (
        type(model).__name__ == "LlamaForCausalLM"
        and config.hidden_act == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
        and not model.training
    )


@dataclass(frozen=True)
class LlamaWeights:
    """What :func:`llama_forward` reads, per layer as one tuple (:func:`layer_weights`): (input
    norm, q k v as one product, o, post-attention norm, gate and up as one product, down)."""

    embedding: torch.Tensor  # [V, E]
    layers: tuple[tuple[Any, ...], ...]
    final_norm: torch.nn.Module
    rotary: Any  # (x, positions) -> (cos, sin) [B, S, D]: the model's rotary module or its table (rotary_table)
    heads: int
    kv_heads: int
    head_dim: int
    head: Linear | PanelLinear | BlockLinear
    head_module: torch.nn.Module
    compiled: tuple[list[Any], ...] | None = None  # the layers as the compiled loop takes them (compiled_layers)

    @classmethod
    def of(cls, model: Any, quantize: str | None = None, kernel: str | None = None) -> LlamaWeights:
        """The weights of ``model``, every product as :meth:`~.gpt2.Linear.of` makes it (same options)."""
        body, config = model.model, model.config

        with torch.no_grad():
            layers = tuple(layer_weights(l, quantize, kernel) for l in body.layers)
            head = Linear.of(model.lm_head.weight.t().contiguous(), model.lm_head.bias, quantize, kernel)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(body.embed_tokens.weight, layers, body.norm, rotary_table(body.rotary_emb), config.num_attention_heads,
                   config.num_key_value_heads, head_dim, head, model.lm_head, compiled_layers(layers, head_dim))

    @property
    def kv_shape(self) -> tuple[int, int, int]:
        """(layers, key/value heads, head size) of the KV cache."""
        return len(self.layers), self.kv_heads, self.head_dim

    @property
    def product_bytes(self) -> int:
        """Bytes of weights one call streams through its linear and output layers."""
        return linear_bytes(self.layers, self.head)

    def __call__(self, write: KVWrite, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                 num_logits: int, keep: Callable[[torch.Tensor], None] | None = None,
                 valid: torch.Tensor | None = None, streams: tuple[int, ...] = (),
                 repeats: torch.Tensor | None = None) -> torch.Tensor:
        return llama_forward(self, write, tokens, positions, mask, num_logits, keep, valid, streams, repeats)


class RotaryTable:
    """A rotary module's cosines and sines looked up by position: the module computes them once for
    positions 0..n-1 (n doubled as a text outgrows it) and a call gathers the rows of its positions.
    Each value is an elementwise function of one position and one frequency (the module's
    ``position * inv_freq``, then cos and sin), so the table holds the module's own values bit for bit
    (tests/models/test_llama.py); a call is two gathers where the module's is about eight small
    operations (0.15-0.2 ms a draft step with the caches cold after a target's pass, 2026-11-30).
    For rope types whose angles do not depend on the position alone, see :func:`rotary_table`."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.cos = self.sin = torch.empty(0)  # [n, D]

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, S, D] (``x``'s dtype) at ``positions`` [B, S], as ``module(x, positions)``;
        ``ValueError`` for a negative position (a table row it does not have)."""
        low, high = (int(v) for v in positions.aminmax())
        if low < 0:
            raise ValueError(f"positions: a rotary table holds positions >= 0, got {low}")
        needed = high + 1
        if needed > len(self.cos):
            size = max(256, 2 * len(self.cos), needed)
            with torch.inference_mode(False), torch.no_grad():
                cos, sin = self.module(torch.zeros((), dtype=torch.float32), torch.arange(size)[None])  # [1, n, D]
            self.cos, self.sin = cos[0], sin[0]
        return self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype)


def rotary_table(module: torch.nn.Module) -> Any:
    """``module`` as a :class:`RotaryTable` where its angles depend on the position alone, else
    ``module`` itself (transformers' ``dynamic`` and ``longrope`` types follow the length of the call)."""
    return module if getattr(module, "rope_type", "dynamic") in ("dynamic", "longrope") else RotaryTable(module)


def layer_weights(layer: Any, quantize: str | None = None, kernel: str | None = None) -> tuple[Any, ...]:
    """One ``LlamaDecoderLayer`` as the tuple :func:`llama_layers` reads (see :class:`LlamaWeights`),
    each product made by :meth:`~.gpt2.Linear.of`. The products that read the same input are one
    product over their weights side by side (q, k, v: [E, (H + 2 H_kv) D]; gate, up: [E, 2 I]):
    the same bytes streamed in fewer, wider calls, each output column computed as alone."""

    def linear(*modules: torch.nn.Linear) -> Linear | PanelLinear | BlockLinear:  # weights [out, in] -> [in, sum out]
        bias = None if modules[0].bias is None else torch.cat([m.bias for m in modules])
        return Linear.of(torch.cat([m.weight for m in modules]).t(), bias, quantize, kernel)

    attention, mlp = layer.self_attn, layer.mlp
    with torch.no_grad():
        return (layer.input_layernorm, linear(attention.q_proj, attention.k_proj, attention.v_proj),
                linear(attention.o_proj), layer.post_attention_layernorm, linear(mlp.gate_proj, mlp.up_proj),
                linear(mlp.down_proj))


def compiled_layers(layers: tuple[tuple[Any, ...], ...], head_dim: int) -> tuple[list[Any], ...] | None:
    """The layers (tuples of :func:`layer_weights`) as ``csrc/llama_layers.cpp`` takes them: norm
    weights and epsilons, then the products as :func:`compiled_products` lists them; None if a
    product runs torch's kernels (no compiled kernel here) or the head size is not a multiple of 8
    (the compiled attention's vectors), so the loop stays in Python."""
    if head_dim % 8:
        return None
    products = compiled_products([product for layer in layers for product in (layer[1], layer[2], layer[4], layer[5])])
    if products is None:
        return None
    norms = [norm for layer in layers for norm in (layer[0], layer[3])]
    return [norm.weight for norm in norms], [norm.variance_epsilon for norm in norms], *products


def compiled_products(products: list[Any]) -> tuple[list[Any], ...] | None:
    """Per product its kind (0 / 1: the panel kernel in AVX2 / AVX-512, 2: GGUF blocks, 3: GGUF
    blocks times 8-bit activations), weights, scales, offsets, bias and output size, six lists as
    the compiled calls take them; None if one of them runs torch's kernels."""
    kind, weights, scales, offsets, biases, outputs = ([] for _ in range(6))
    for product in products:
        if isinstance(product, BlockLinear) and product.compiled:
            kind.append(2 if product.activations == "float32" else 3)
            weights.append(product.codes)
            offsets.append(product.offsets)
        elif isinstance(product, PanelLinear):
            kind.append(ISAS.index(product.isa))
            weights.append(product.panels)
            offsets.append(None)
        else:
            return None
        scales.append(product.scales)
        biases.append(product.bias)
        outputs.append(product.out_features)
    return kind, weights, scales, offsets, biases, outputs


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [B, H, S, D]: pairs (x_i, x_{i + D/2}) turned by the position's angles."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def layer_counts(counts: Sequence[int], layers: int | None = None, name: str = "streams") -> tuple[int, ...]:
    """``counts`` as a tuple of the residual streams a forward keeps, each named by how many decoder
    layers precede it: increasing, each in (0, ``layers``) (positive where ``layers`` is None, the
    target not at hand); ``ValueError`` naming ``name`` otherwise."""
    counts = tuple(counts)
    if list(counts) != sorted(set(counts)) or any(not 0 < n < (layers or math.inf) for n in counts):
        bounds = f"in (0, {layers})" if layers else "positive"
        raise ValueError(f"{name}: increasing layer counts {bounds}, got {counts}")
    return counts


def llama_forward(weights: LlamaWeights, write: KVWrite, tokens: torch.Tensor, positions: torch.Tensor,
                  mask: torch.Tensor | None, num_logits: int,
                  keep: Callable[[torch.Tensor], None] | None = None, valid: torch.Tensor | None = None,
                  streams: tuple[int, ...] = (), repeats: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [B, num_logits, V] after the last ``num_logits`` of ``tokens`` [B, S]; arguments as
    :func:`~.gpt2.gpt2_forward`, ``valid`` and ``repeats`` as :func:`llama_layers`. ``keep``, if
    given, receives the final hidden states (after the final norm, what the output layer reads) at
    all S positions, [B, S, E]: a feature draft's input (at padding, whatever the layers left
    there); followed by the residual streams after the first n decoder layers for each n of
    ``streams`` (increasing, 0 < n < the layers), [B, S, (1 + len(streams)) E]: a fused feature
    draft's input (EAGLE-3)."""
    streams = layer_counts(streams, len(weights.layers))
    if streams and keep is None:
        raise ValueError("streams: kept with the final hidden states only; give keep")
    x, kept, start = weights.embedding[tokens], [], 0
    angles = rotary_angles(weights, x, positions)  # once for every run of layers
    for stop in (*streams, len(weights.layers)):
        x = llama_layers(weights, write, x, positions, mask, valid, range(start, stop), angles, repeats)  # [B, S, E]
        kept.append(x)
        start = stop
    if keep is None:
        return output_logits(weights.head, weights.head_module, weights.final_norm(x[:, -num_logits:]))
    x = weights.final_norm(x)  # [B, S, E]
    keep(torch.cat([x, *kept[:-1]], -1) if streams else x)
    return output_logits(weights.head, weights.head_module, x[:, -num_logits:])  # [B, num_logits, V]


def rotary_angles(weights: Any, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary cosines and sines [B, 1, S, D] of ``positions`` [B or 1, S] for the states ``x``
    [B, S, E], from the model's own rotary module (``weights.rotary``), as :func:`llama_layers` reads them."""
    cos, sin = weights.rotary(x, positions.expand(x.shape[0], x.shape[1]))  # [B, S, D] each
    return cos[:, None], sin[:, None]


def llama_layers(weights: Any, write: KVWrite, x: torch.Tensor, positions: torch.Tensor,
                 mask: torch.Tensor | None, valid: torch.Tensor | None = None, layers: range | None = None,
                 angles: tuple[torch.Tensor, torch.Tensor] | None = None,
                 repeats: torch.Tensor | None = None) -> torch.Tensor:
    """The decoder layers of ``weights`` (its ``layers``, ``rotary``, ``heads``, ``kv_heads``,
    ``head_dim``; those of ``layers``, default all) applied to the input states ``x`` [B, S, E]: the
    states after the last layer.
    Fewer operations a layer than the model's modules, the same arithmetic: the RMS norms as one
    fused operation each (``F.rms_norm``, the modules' formula), queries and keys rotated together.
    Where ``write`` is a :class:`.static_cache.StaticKV` and ``weights.compiled`` is set, the loop
    runs in C++ (``csrc/llama_layers.cpp``): the same arithmetic in plain loops (norms, angles,
    attention, gate) around the compiled products, summed in another order (the same results to
    float32 rounding), without the interpreter or ATen's per-operation dispatch between them.
    ``valid`` [B, S] (bool; None: all), where the chunk's positions are padding (False) that no one
    reads (the mask hides them): the compiled loop skips their products and attention (a batch's
    left-padded prompts) and zeroes their cache slots, the Python loop computes them; the other
    positions come out alike. ``repeats`` [B, S] (int64; None: none), where a position repeats an
    earlier one of the chunk (its flat index b S + s, else -1; :func:`~.base.chunk_repeats`): the
    compiled loop copies that one's keys, values and states instead of computing them (a batch's
    prompts that open alike), the Python loop computes them; both come out alike. ``angles``:
    :func:`rotary_angles` of these states and positions where the caller has them (None: computed here)."""
    rows, size, width = x.shape
    cos, sin = rotary_angles(weights, x, positions) if angles is None else angles  # [B, 1, S, D] each
    grouped = weights.kv_heads != weights.heads
    heads, kv_heads, head_dim = weights.heads, weights.kv_heads, weights.head_dim
    compiled = getattr(weights, "compiled", None)
    first, stop = (0, len(weights.layers)) if layers is None else (layers.start, layers.stop)
    if compiled is not None and isinstance(write, StaticKV):  # per layer two norms, four products, one cache
        norms, eps, *products = (items[2 * first: 2 * stop] if i < 2 else items[4 * first: 4 * stop]
                                 for i, items in enumerate(compiled))
        return torch.ops.draftverify.llama_layers(x, cos, sin, mask, valid, repeats, write.keys[first:stop],
                                                  write.values[first:stop], write.length, heads, kv_heads, head_dim,
                                                  norms, eps, *products)
    for index, (norm1, qkv, o_proj, norm2, gate_up, down) in enumerate(weights.layers[first:stop], first):
        h = F.rms_norm(x, (width,), norm1.weight, norm1.variance_epsilon).view(-1, width)  # [B S, E], as norm1(x)
        qk, v = qkv(h).split([(heads + kv_heads) * head_dim, kv_heads * head_dim], -1)
        qk = _rotate(qk.view(rows, size, heads + kv_heads, head_dim).transpose(1, 2), cos, sin)  # [B, H + H_kv, S, D]
        v = v.view(rows, size, kv_heads, head_dim).transpose(1, 2)  # [B, H_kv, S, D]
        k, v = write(index, qk[:, heads:], v)  # [B, H_kv, T, D]
        attended = F.scaled_dot_product_attention(qk[:, :heads], k, v, attn_mask=mask, enable_gqa=grouped)
        x = x + o_proj(attended.transpose(1, 2).reshape(rows * size, -1)).view(rows, size, width)
        h = F.rms_norm(x, (width,), norm2.weight, norm2.variance_epsilon).view(-1, width)
        gate, up = gate_up(h).chunk(2, -1)  # [B S, I] each
        x = x + down(F.silu(gate) * up).view(rows, size, width)
    return x

"""A lean GPT-2 forward over a KV cache: the computation of ``GPT2LMHeadModel.forward`` with the
model's own parameters, without its per-call bookkeeping (argument checks, mask builders, output
objects), which dominates the cost of small models on a CPU.

GPT-2 (Radford et al. 2019): pre-layer-norm blocks, attention then MLP with tanh-GELU, final layer
norm, output embedding. The per-layer parameters are read once into :class:`GPT2Weights` (they are
references to the model's tensors, not copies), so a call does no attribute lookups on modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

__all__ = ["GPT2Weights", "KVWrite", "gpt2_forward", "is_lean_gpt2"]

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


@dataclass(frozen=True)
class GPT2Weights:
    """The parameters :func:`gpt2_forward` reads, per block as one tuple:
    (ln_1 weight, ln_1 bias, qkv bias, qkv weight [E, 3E], out bias, out weight [E, E],
    ln_2 weight, ln_2 bias, fc bias, fc weight [E, 4E], proj bias, proj weight [4E, E])."""

    token_embedding: torch.Tensor  # [V, E]
    position_embedding: torch.Tensor  # [P, E]
    blocks: tuple[tuple[torch.Tensor, ...], ...]
    final_norm: tuple[torch.Tensor, torch.Tensor]
    heads: int
    eps: float
    head: torch.nn.Module  # the output layer, called as a module so forward hooks see its input

    @classmethod
    def of(cls, model: Any) -> GPT2Weights:
        body = model.transformer
        blocks = tuple(
            (b.ln_1.weight, b.ln_1.bias, b.attn.c_attn.bias, b.attn.c_attn.weight, b.attn.c_proj.bias,
             b.attn.c_proj.weight, b.ln_2.weight, b.ln_2.bias, b.mlp.c_fc.bias, b.mlp.c_fc.weight,
             b.mlp.c_proj.bias, b.mlp.c_proj.weight)
            for b in body.h
        )
        return cls(body.wte.weight, body.wpe.weight, blocks, (body.ln_f.weight, body.ln_f.bias),
                   model.config.n_head, model.config.layer_norm_epsilon, model.lm_head)


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
    for index, (n1w, n1b, qkv_b, qkv_w, out_b, out_w, n2w, n2b, fc_b, fc_w, proj_b, proj_w) in enumerate(weights.blocks):
        h = F.layer_norm(x, (width,), n1w, n1b, eps).view(-1, width)  # [B S, E]
        qkv = torch.addmm(qkv_b, h, qkv_w)  # [B S, 3E]
        q, k, v = qkv.view(rows, size, 3, weights.heads, head_dim).permute(2, 0, 3, 1, 4)  # [B, H, S, D] each
        k, v = write(index, k, v)  # [B, H, T, D]
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, S, D]
        attended = attended.transpose(1, 2).reshape(-1, width)  # [B S, E]
        x = x + torch.addmm(out_b, attended, out_w).view(rows, size, width)
        h = F.layer_norm(x, (width,), n2w, n2b, eps).view(-1, width)
        h = F.gelu(torch.addmm(fc_b, h, fc_w), approximate="tanh")  # [B S, 4E]
        x = x + torch.addmm(proj_b, h, proj_w).view(rows, size, width)
    x = F.layer_norm(x[:, -num_logits:], (width,), *weights.final_norm, eps)  # [B, num_logits, E]
    return weights.head(x)  # [B, num_logits, V]

"""The ``transformers`` backend: any ``AutoModelForCausalLM`` behind :class:`LanguageModel`.

The KV cache is transformers' own ``DynamicCache``: extended by the model's forward, reordered with
``batch_select_indices`` (K drafts, chosen draft, finished rows) and shortened with ``crop``.
Ragged rows use an explicit 4-D attention mask over the slot table plus explicit position ids, so
padding and dropped slots are skipped and positions count real tokens only. A batch without holes
(always the case for one prompt) passes no mask and takes the model's fastest attention path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from .base import Cache, LanguageModel

__all__ = ["TransformersModel", "resolve_model_path"]

# "name" or "owner/name", as on the Hugging Face hub
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_model_path(name_or_path: str | Path) -> str:
    """A local folder as a string, or a hub id passed through; ``FileNotFoundError`` otherwise."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise FileNotFoundError(f"{text}: expected a model folder, found a file")
    if not _HUB_ID.match(text):
        raise FileNotFoundError(f"{text}: no such model folder")
    return text


def _load(loader: Any, name_or_path: str | Path, what: str, **kwargs: Any) -> Any:
    location = resolve_model_path(name_or_path)
    try:
        return loader.from_pretrained(location, **kwargs)
    except (OSError, ValueError) as error:  # a hub id without network, a folder without a model
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise FileNotFoundError(f"cannot load the {what} from {location!r}: {first_line}") from None


class TransformersModel(LanguageModel):
    """A ``transformers`` causal LM (and optionally its tokenizer) behind :class:`LanguageModel`.

    GPT-2 models with the standard options run through :func:`_gpt2_forward`, the same
    computation as ``GPT2LMHeadModel.forward`` with the model's own parameters and ``DynamicCache``
    but without its per-call bookkeeping, which dominates the cost of small models on a CPU (tests
    check that both give the same logits)."""

    def __init__(self, model: Any, tokenizer: Any = None):
        from transformers import DynamicCache

        self._cache_class = DynamicCache
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config.get_text_config(decoder=True)
        self.vocab_size = int(self.config.vocab_size)
        eos = tokenizer.eos_token_id if tokenizer is not None else None
        if eos is None:
            eos = getattr(model.generation_config, "eos_token_id", None)
        self.eos_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos
        self._lean = _lean_gpt2(model)
        if not DynamicCache(config=model.config).is_croppable:
            raise ValueError(
                f"{type(model).__name__}: its cache cannot be cropped (sliding-window or linear-attention "
                "layers); draft-then-verify decoding needs to drop rejected tokens"
            )

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, *, tokenizer: str | Path | None = None, dtype: torch.dtype = torch.float32
    ) -> TransformersModel:
        """Load a model from a local folder or a hub id (hub ids need a network); the tokenizer from
        ``tokenizer`` if given, else from the same place when it has one."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = _load(AutoModelForCausalLM, name_or_path, "model", dtype=dtype)
        tokenizer_object = None
        if tokenizer is not None:
            tokenizer_object = _load(AutoTokenizer, tokenizer, "tokenizer")
        elif Path(str(name_or_path)).expanduser().is_dir():
            folder = Path(str(name_or_path)).expanduser()
            if any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
                tokenizer_object = _load(AutoTokenizer, folder, "tokenizer")
        return cls(model, tokenizer_object)

    def _new_backend(self) -> Any:
        return self._cache_class(config=self.model.config)

    def _forward(self, cache: Cache, tokens, positions, holes, num_logits) -> torch.Tensor:
        mask = _attention_mask(cache.valid, tokens.shape[1], self.model.dtype) if holes else None
        return self._run(cache, tokens, positions, mask, num_logits)

    def _run(self, cache: Cache, tokens, positions, mask, num_logits) -> torch.Tensor:
        if mask is None and tokens.shape[1] > 1 and self._lean:  # causal within the chunk, after the cache
            mask = _attention_mask(cache.valid, tokens.shape[1], self.model.dtype)
        limit = getattr(self.config, "max_position_embeddings", None)
        if limit is not None and int(positions.max()) >= limit:
            raise ValueError(f"sequence longer than the model's context of {limit} tokens")
        with torch.inference_mode():
            if self._lean:
                logits = _gpt2_forward(self.model, cache.backend, tokens, positions, mask, num_logits)
            else:
                logits = self.model(
                    input_ids=tokens,
                    past_key_values=cache.backend,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    logits_to_keep=num_logits,
                ).logits[:, -num_logits:]  # [B, num_logits, V]
        return logits if logits.dtype == torch.float64 else logits.float()

    def score_drafts(self, cache: Cache, pending, pending_valid, drafts) -> torch.Tensor:
        """K > 1: the K drafts of a row go into ONE sequence after its pending tokens, with a tree
        mask (draft k sees the row, the pending tokens and its own earlier tokens) and positions
        that restart for every draft; the row's cache is neither copied nor replicated."""
        rows, num_drafts, length = drafts.shape
        if num_drafts == 1:
            return super().score_drafts(cache, pending, pending_valid, drafts)
        pend_valid = torch.ones_like(pending, dtype=torch.bool) if pending_valid is None else pending_valid
        held = cache.valid.sum(1, keepdim=True)  # [B, 1]
        pending_positions = (held + torch.cumsum(pend_valid, 1) - 1).clamp(min=0)  # [B, m]
        start = held + pend_valid.sum(1, keepdim=True)  # [B, 1]: position of every draft's first token
        draft_positions = start + torch.arange(length).repeat(num_drafts)  # [B, K L]
        chunk = torch.cat([pending, drafts.reshape(rows, num_drafts * length)], 1)  # [B, S]
        chunk_valid = torch.cat([pend_valid, torch.ones(rows, num_drafts * length, dtype=torch.bool)], 1)
        old_valid = cache.valid
        cache.tokens = torch.cat([cache.tokens, chunk.masked_fill(~chunk_valid, 0)], 1)
        cache.valid = torch.cat([old_valid, chunk_valid], 1)
        mask = _tree_mask(old_valid, pend_valid, num_drafts, length, self.model.dtype)
        logits = self._run(cache, chunk, torch.cat([pending_positions, draft_positions], 1), mask,
                           num_drafts * length + 1)  # [B, 1 + K L, V]: last pending, then every draft token
        cache.scoring = (num_drafts, length)
        k = torch.arange(num_drafts)[:, None]
        index = torch.cat([torch.zeros(num_drafts, 1, dtype=torch.int64), 1 + k * length + torch.arange(length)], 1)
        return logits[:, index]  # [B, K, L + 1, V]

    def keep_draft(self, cache: Cache, choice: torch.Tensor, accepted: torch.Tensor) -> None:
        """K > 1: move the accepted tokens of the chosen draft (their keys and values) to the slots
        right after the pending tokens, then drop every other draft slot."""
        if cache.scoring is None or cache.scoring[0] == 1:
            return super().keep_draft(cache, choice, accepted)
        num_drafts, length = cache.scoring
        cache.scoring = None
        start = cache.tokens.shape[1] - num_drafts * length  # first draft slot
        rows, steps = torch.nonzero(torch.arange(length)[None, :] < accepted[:, None], as_tuple=True)
        source = start + choice[rows] * length + steps
        target = start + steps
        with torch.inference_mode():
            for layer in cache.backend.layers:
                layer.keys[rows, :, target] = layer.keys[rows, :, source]
                layer.values[rows, :, target] = layer.values[rows, :, source]
        cache.tokens[rows, target] = cache.tokens[rows, source]
        cache.valid[:, start:] = False
        cache.valid[rows, target] = True
        cache.tokens = cache.tokens.masked_fill(~cache.valid, 0)
        self._drop_empty_columns(cache)

    def _reindex(self, cache: Cache, rows: torch.Tensor) -> None:
        with torch.inference_mode():
            cache.backend.batch_select_indices(rows)

    def _truncate(self, cache: Cache, num_slots: int) -> None:
        removed = cache.backend.get_seq_length() - num_slots
        if removed > 0:
            with torch.inference_mode():
                cache.backend.crop(-removed)  # transformers 5: a negative count removes that many

    def backend_length(self, cache: Cache) -> int:
        return cache.backend.get_seq_length()


def _attention_mask(valid: torch.Tensor, num_new: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [B, 1, S, T]: query slot i (the last S slots) sees valid slots j <= i, and
    always itself, so a padding query has a finite output (it is never attended to)."""
    width = valid.shape[1]
    query_slots = torch.arange(width - num_new, width)[:, None]  # [S, 1]
    key_slots = torch.arange(width)[None, :]  # [1, T]
    allowed = ((key_slots <= query_slots)[None] & valid[:, None, :]) | (key_slots == query_slots)[None]  # [B, S, T]
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def _tree_mask(old_valid: torch.Tensor, pending_valid: torch.Tensor, num_drafts: int, length: int,
               dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [B, 1, S, T] for pending tokens [B, m] followed by K drafts of L tokens: every
    query sees the row's valid slots; pending tokens are causal among themselves; draft k's token i
    sees the valid pending tokens and draft k's tokens 0..i; every query sees itself."""
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
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]  # [B, 1, S, T]


def _lean_gpt2(model: Any) -> bool:
    """Whether :func:`_gpt2_forward` computes exactly what this model's forward computes."""
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


def _gpt2_forward(model: Any, cache: Any, tokens: torch.Tensor, positions: torch.Tensor,
                  mask: torch.Tensor | None, num_logits: int) -> torch.Tensor:
    """GPT-2 (Radford et al. 2019): pre-layer-norm blocks, attention then MLP with tanh-GELU, final
    layer norm, tied output embedding. ``tokens`` and ``positions`` [B, S]; ``mask`` additive
    [B, 1, S, T] or None (only for S = 1 without holes). Returns logits [B, num_logits, V]."""
    import torch.nn.functional as F

    body = model.transformer
    rows, size = tokens.shape
    heads = model.config.n_head
    x = body.wte.weight[tokens] + body.wpe.weight[positions]  # [B, S, E]
    width = x.shape[-1]
    for index, block in enumerate(body.h):
        h = F.layer_norm(x, (width,), block.ln_1.weight, block.ln_1.bias, block.ln_1.eps)
        qkv = torch.addmm(block.attn.c_attn.bias, h.reshape(-1, width), block.attn.c_attn.weight)  # [B S, 3E]
        q, k, v = qkv.view(rows, size, 3, heads, width // heads).permute(2, 0, 3, 1, 4)  # [B, H, S, E/H] each
        k, v = cache.layers[index].update(k, v)  # [B, H, T, E/H]
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, S, E/H]
        attended = attended.transpose(1, 2).reshape(-1, width)  # [B S, E]
        x = x + torch.addmm(block.attn.c_proj.bias, attended, block.attn.c_proj.weight).view(rows, size, width)
        h = F.layer_norm(x, (width,), block.ln_2.weight, block.ln_2.bias, block.ln_2.eps)
        h = F.gelu(torch.addmm(block.mlp.c_fc.bias, h.reshape(-1, width), block.mlp.c_fc.weight), approximate="tanh")
        x = x + torch.addmm(block.mlp.c_proj.bias, h, block.mlp.c_proj.weight).view(rows, size, width)
    x = F.layer_norm(x[:, -num_logits:], (width,), body.ln_f.weight, body.ln_f.bias, body.ln_f.eps)
    return model.lm_head(x)  # [B, num_logits, V]; through the module so forward hooks see x (SPRINTER's features)

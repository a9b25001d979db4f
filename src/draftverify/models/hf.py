"""The ``transformers`` backend: any ``AutoModelForCausalLM`` behind :class:`LanguageModel`.

Two KV caches behind the same slot table (:mod:`.base`):

- ``"static"`` (GPT-2 and Llama models, the default for them): :class:`~.static_cache.StaticKV`
  buffers written by index and the lean forward of :mod:`.gpt2` or :mod:`.llama`, the gpt-fast
  recipe; a crop moves a pointer, a reorder copies only when rows change.
- ``"dynamic"`` (every model): transformers' own ``DynamicCache``, extended by the forward,
  reordered with ``batch_select_indices`` and shortened with ``crop``. GPT-2 and Llama models
  still take the lean forward; others run the model's own forward.

Ragged rows use an explicit attention mask over the slot table plus explicit position ids, so
padding and dropped slots are skipped and positions count real tokens only. A batch without holes
(always the case for one prompt) passes no mask to a one-token call.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from .base import Cache, LanguageModel, chunk_repeats
from .ggml_blocks import BlockLinear
from .gpt2 import GPT2Weights, is_lean_gpt2
from .llama import LlamaWeights, is_lean_llama, layer_counts
from .masks import additive, causal_mask, slot_mask, tree_mask
from .static_cache import StaticKV

__all__ = ["TransformersModel", "resolve_model_path"]

# "name" or "owner/name", as on the Hugging Face hub
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_model_path(name_or_path: str | Path) -> str:
    """A local model folder, as a string. Models must be local paths: a name that is no folder here
    and reads as a hub id (``gpt2``, ``owner/name``) raises ``ValueError`` at once, before
    transformers would spend half a minute retrying the network; a missing path or a file raises
    ``FileNotFoundError``."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise FileNotFoundError(f"{text}: expected a model folder, found a file")
    if _HUB_ID.match(text):
        raise ValueError(
            f"{text!r}: no such folder; models must be local paths (draftverify never downloads from the "
            "Hugging Face hub: download the model first and pass its folder)"
        )
    raise FileNotFoundError(f"{text}: no such model folder")


def _load(loader: Any, name_or_path: str | Path, what: str, **kwargs: Any) -> Any:
    location = resolve_model_path(name_or_path)
    try:
        return loader.from_pretrained(location, local_files_only=True, **kwargs)
    except (OSError, ValueError) as error:  # a folder without a model
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise FileNotFoundError(f"cannot load the {what} from {location!r}: {first_line}") from None


class TransformersModel(LanguageModel):
    """A ``transformers`` causal LM (and optionally its tokenizer) behind :class:`LanguageModel`.

    ``kv_cache``: "static" (GPT-2 and Llama models) or "dynamic"; None picks "static" where it can.
    ``static_length``: slots per row the static cache preallocates (default: sized at the first call,
    doubled when outgrown). GPT-2 and Llama models with the standard options run the lean forwards
    of :mod:`.gpt2` and :mod:`.llama` (tests check them against the models' own forwards), their
    matrix products through the compiled panel kernel of :mod:`.panel_mm` where it runs (``kernel``:
    None picks, "panel" or "eager" insists). ``quantize="int8"`` (lean forwards only): weight-only
    int8 linear and output layers, quantized once from the model's weights; the model's law is then
    the int8 model's. ``quantize="gguf"``: a model converted from a GGUF file streams its weights
    as the GGML blocks they came from (:mod:`.ggml_blocks`): the same model, 5 bits a weight (float32
    where the CPU has no AVX-512, with a warning); ``quantize="gguf-q8"``: those blocks times the
    activations rounded to 8 bits as llama.cpp does (a new model; AVX-512 VNNI or AVX2, else eager).
    ``weight_format``: "float32", "int8", "gguf" or "gguf-q8", what the products stream."""

    def __init__(self, model: Any, tokenizer: Any = None, *, kv_cache: str | None = None,
                 static_length: int | None = None, quantize: str | None = None, kernel: str | None = None):
        from transformers import DynamicCache

        self._cache_class = DynamicCache
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config.get_text_config(decoder=True)
        self.vocab_size = int(self.config.vocab_size)
        self.max_length = getattr(self.config, "max_position_embeddings", None)
        eos = tokenizer.eos_token_id if tokenizer is not None else None
        if eos is None:
            eos = getattr(model.generation_config, "eos_token_id", None)
        self.eos_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos
        lean = GPT2Weights if is_lean_gpt2(model) else LlamaWeights if is_lean_llama(model) else None
        if lean is None and (quantize not in (None, "float32") or kernel is not None):
            raise ValueError(f"{type(model).__name__}: quantize and kernel apply to the lean GPT-2 and Llama forwards only")
        self._lean = None if lean is None else lean.of(model, quantize, kernel)
        head = getattr(self._lean, "head", None)
        self.weight_format = (("gguf" if head.activations == "float32" else "gguf-q8") if isinstance(head, BlockLinear)
                              else "int8" if quantize == "int8" else "float32")  # what the products stream
        self.kv_cache = kv_cache or ("static" if self._lean is not None else "dynamic")
        if self.kv_cache not in ("static", "dynamic"):
            raise ValueError(f"kv_cache must be 'static' or 'dynamic', got {kv_cache!r}")
        if self.kv_cache == "static" and self._lean is None:
            raise ValueError(f"{type(model).__name__}: the static KV cache runs GPT-2 and Llama models only; use 'dynamic'")
        self._static_length = static_length or 0
        self.feature_size = 0  # > 0: caches keep the last hidden state of every slot (keep_features)
        self.feature_streams: tuple[int, ...] = ()  # and the residual streams after these layer counts
        if not DynamicCache(config=model.config).is_croppable:
            raise ValueError(
                f"{type(model).__name__}: its cache cannot be cropped (sliding-window or linear-attention "
                "layers); draft-then-verify decoding needs to drop rejected tokens"
            )

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, *, tokenizer: str | Path | None = None, dtype: torch.dtype = torch.float32,
        kv_cache: str | None = None, quantize: str | None = None, kernel: str | None = None,
    ) -> TransformersModel:
        """Load a model from a local folder (see :func:`resolve_model_path`) or a ``.gguf`` file
        (dequantized to ``dtype``, its tokenizer with it); the tokenizer from ``tokenizer`` if given,
        else from the same folder when it has one. Other options as the constructor's."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(str(name_or_path)).expanduser()
        if path.suffix == ".gguf" and path.is_file():
            model = _load(AutoModelForCausalLM, path.parent, "model", dtype=dtype, gguf_file=path.name)
            tokenizer_object = _load(AutoTokenizer, tokenizer or path.parent, "tokenizer",
                                     **({} if tokenizer else {"gguf_file": path.name}))
            return cls(model, tokenizer_object, kv_cache=kv_cache, quantize=quantize, kernel=kernel)
        model = _load(AutoModelForCausalLM, name_or_path, "model", dtype=dtype)
        tokenizer_object = None
        if tokenizer is not None:
            tokenizer_object = _load(AutoTokenizer, tokenizer, "tokenizer")
        elif Path(str(name_or_path)).expanduser().is_dir():
            folder = Path(str(name_or_path)).expanduser()
            if any((folder / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
                tokenizer_object = _load(AutoTokenizer, folder, "tokenizer")
        return cls(model, tokenizer_object, kv_cache=kv_cache, quantize=quantize, kernel=kernel)

    def keep_features(self, streams: tuple[int, ...] = ()) -> None:
        """From now on every new cache keeps, at each slot, the final hidden state (after the final
        norm) the forward computed there, followed by the residual streams after the first n decoder
        layers for each n of ``streams`` (:func:`.llama.llama_forward`), ``cache.backend.features``
        [B, T, (1 + len(streams)) E]: what a feature draft (:mod:`.feature_draft`) reads, the first E
        columns where it reads the final state alone; all but a cache made with ``features=False``
        (:meth:`~.base.LanguageModel.new_cache`: a decoding no feature draft reads, such as ``ar``,
        whose calls then skip them). Lean Llama forwards with the static cache only; ``ValueError``
        for ``streams`` other than those kept already (two fused drafts of one target read the same
        streams)."""
        if not (self._static and isinstance(self._lean, LlamaWeights)):
            raise ValueError(f"{type(self.model).__name__}: only a Llama model on the static KV cache can keep its "
                             "hidden states for a feature draft")
        streams = layer_counts(streams, len(self._lean.layers))
        if streams and self.feature_streams and streams != self.feature_streams:
            raise ValueError(f"streams: this target keeps the streams after layers {self.feature_streams} for a "
                             f"draft already, not {streams}")
        self.feature_streams = streams or self.feature_streams
        self.feature_size = int(self.config.hidden_size) * (1 + len(self.feature_streams))

    def kept_features(self, cache: Cache, streams: tuple[int, ...] = ()) -> torch.Tensor:
        """What ``cache`` kept at each slot (:meth:`keep_features`), [B, W, (1 + len(streams)) E] in
        slot order: the final states, then the streams after the layers of ``streams`` (none: the final
        states alone, whatever streams the target keeps for a fused draft); ``ValueError`` for streams
        it does not keep."""
        if tuple(streams) not in ((), self.feature_streams):
            raise ValueError(f"streams: this target keeps the streams after layers {self.feature_streams}, "
                             f"not {tuple(streams)}")
        return cache.backend.features[..., : (1 + len(streams)) * int(self.config.hidden_size)]

    @property
    def product_bytes(self) -> int | None:
        """Bytes of weights one call streams through its linear and output layers (lean forwards;
        None for others)."""
        return None if self._lean is None else self._lean.product_bytes

    @property
    def _static(self) -> bool:
        return self.kv_cache == "static"

    def _new_backend(self, batch_size: int, features: bool = True) -> Any:
        if not self._static:
            return self._cache_class(config=self.model.config)
        layers, heads, head_dim = self._lean.kv_shape
        return StaticKV(layers, batch_size, heads, head_dim, self._static_length, self.model.dtype,
                        self.feature_size if features else 0)

    def _forward(self, cache: Cache, tokens, positions, holes, num_logits) -> torch.Tensor:
        size = tokens.shape[1]
        if self._lean is None:  # the model's own forward: causal by itself, a mask only for holes
            return self._run(cache, tokens, positions, additive(slot_mask(cache.valid, size), self.model.dtype)
                             if holes else None, num_logits)
        mask = slot_mask(cache.valid, size) if holes else causal_mask(size, cache.width) if size > 1 else None
        return self._run(cache, tokens, positions, mask, num_logits, opening=cache.width == size)

    def _run(self, cache: Cache, tokens, positions, mask, num_logits, opening: bool = False) -> torch.Tensor:
        """The forward over the chunk ``tokens`` the slot table ends with; ``opening``: the rows held
        nothing before it, under the causal mask of their valid slots (where the compiled loop
        computes a batch's repeated openings once: :func:`~.base.chunk_repeats`)."""
        with torch.inference_mode():
            if self._static:
                kv = cache.backend
                kv.reserve(tokens.shape[1])
                # hidden states for a feature draft, where this cache keeps them
                extra = {"keep": kv.write_features, "streams": self.feature_streams} if kv.hidden is not None else {}
                valid = cache.valid[:, -tokens.shape[1]:] if cache.holes else None  # the chunk's padding is skipped
                if opening and cache.batch_size > 1 and getattr(self._lean, "compiled", None) is not None:
                    extra["repeats"] = chunk_repeats(tokens, valid)
                logits = self._lean(kv, tokens, positions, mask, num_logits, valid=valid, **extra)
                kv.advance(tokens.shape[1])
            elif self._lean is not None:
                layers = cache.backend.layers
                logits = self._lean(lambda i, k, v: layers[i].update(k, v), tokens, positions, mask, num_logits)
            else:
                logits = self.model(
                    input_ids=tokens,
                    cache=cache.backend,
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
        held = torch.tensor(cache.held)[:, None]  # [B, 1]
        pending_positions = (held + torch.cumsum(pend_valid, 1) - 1).clamp(min=0)  # [B, m]
        start = held + pend_valid.sum(1, keepdim=True)  # [B, 1]: position of every draft's first token
        if self.max_length is not None and int(start.max()) + length > self.max_length:
            raise ValueError(f"sequence longer than the model's context of {self.max_length} tokens")
        draft_positions = start + torch.arange(length).repeat(num_drafts)  # [B, K L]
        chunk = torch.cat([pending, drafts.reshape(rows, num_drafts * length)], 1)  # [B, S]
        chunk_valid = torch.cat([pend_valid, torch.ones(rows, num_drafts * length, dtype=torch.bool)], 1)
        width = cache.width
        cache.append(chunk, chunk_valid, chunk_valid.sum(1).tolist())
        mask = tree_mask(cache.valid[:, :width], pend_valid, num_drafts, length)
        if self._lean is None:
            mask = additive(mask, self.model.dtype)
        logits = self._run(cache, chunk, torch.cat([pending_positions, draft_positions], 1), mask,
                           num_drafts * length + 1)  # [B, 1 + K L, V]: last pending, then every draft token
        cache.scoring = (num_drafts, length)
        k = torch.arange(num_drafts)[:, None]
        index = torch.cat([torch.zeros(num_drafts, 1, dtype=torch.int64), 1 + k * length + torch.arange(length)], 1)
        return logits[:, index]  # [B, K, L + 1, V]

    def keep_draft(self, cache: Cache, choice: torch.Tensor | list[int], accepted: torch.Tensor | list[int]) -> None:
        """K > 1: move the accepted tokens of the chosen draft (their keys and values) to the slots
        right after the pending tokens, then drop every other draft slot."""
        if cache.scoring is None or cache.scoring[0] == 1:
            return super().keep_draft(cache, choice, accepted)
        num_drafts, length = cache.scoring
        cache.scoring = None
        choice, accepted = torch.as_tensor(choice), torch.as_tensor(accepted)
        start = cache.width - num_drafts * length  # first draft slot
        rows, steps = torch.nonzero(torch.arange(length)[None, :] < accepted[:, None], as_tuple=True)
        source = start + choice[rows] * length + steps
        target = start + steps
        with torch.inference_mode():
            if self._static:
                cache.backend.move(rows, source, target)
            else:
                for layer in cache.backend.layers:
                    layer.keys[rows, :, target] = layer.keys[rows, :, source]
                    layer.values[rows, :, target] = layer.values[rows, :, source]
        tokens, valid = cache.tokens, cache.valid
        tokens[rows, target] = tokens[rows, source]
        valid[:, start:] = False
        valid[rows, target] = True
        tokens[:, start:].masked_fill_(~valid[:, start:], 0)
        cache.held = [h - num_drafts * length + a for h, a in zip(cache.held, accepted.tolist())]
        self._drop_empty_columns(cache)

    def _reindex(self, cache: Cache, rows: torch.Tensor) -> None:
        with torch.inference_mode():
            if self._static:
                cache.backend.select(rows)
            else:
                cache.backend.batch_select_indices(rows)

    def _truncate(self, cache: Cache, num_slots: int) -> None:
        if self._static:
            cache.backend.crop(num_slots)
            return
        removed = cache.backend.get_seq_length() - num_slots
        if removed > 0:
            with torch.inference_mode():
                cache.backend.crop(-removed)  # transformers 5: a negative count removes that many

    def backend_length(self, cache: Cache) -> int:
        return cache.backend.length if self._static else cache.backend.get_seq_length()

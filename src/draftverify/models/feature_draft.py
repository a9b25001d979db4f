"""A feature draft: decoder layers that draft from the target's own last hidden states.

EAGLE (Li et al. 2024, section 3, figure 6): the target's final hidden state at position j - 1
(its *feature*, what its output layer reads) already holds most of what the next tokens need, so a
single decoder layer (EAGLE's choice; a head may have more) predicts the next feature from it and
the next token:

    u_j = W_fc [e(x_j); f_{j-1}],    f^_j = norm(layers(u_1..u_j)),    D(. | x_<=j) = softmax(W f^_j),

with ``e`` the target's token embedding, ``f_{j-1}`` the target's feature where the target has
scored position j - 1 (committed tokens) and the draft's own ``f^_{j-1}`` where it has not (the
tokens drafted in this step), ``f_{-1} = 0``. The output layer ``W`` covers a fixed subset of the
vocabulary, the tokens most frequent in the target's own answers (FR-Spec, Zhao et al. 2025,
section 3.2): a draft step then streams a fraction of the target's output layer. The draft's law is
the softmax over that subset and exactly zero outside it (:meth:`FeatureDraft.forward` returns
``-inf`` logits there; the subset is the model's ``support``, over which a decoding warps and
samples), which is the law the drafted tokens are sampled from, so every exact verifier stays exact.

A fused head (``fusion``, EAGLE-3, Li et al. 2025, section 3.2) reads more of the target than its
last layer: for f_{j-1} it takes g_{j-1} = f_{j-1} + W [rms(s_1); ...; rms(s_n)], the target's
residual streams after the layers of ``fusion`` projected onto a correction of the final feature
(:func:`fused_features`; EAGLE-3 puts low, middle and high layers through one fc layer: here the
high one is f itself, so a head whose W is zero drafts as the head without it, and a trained head
grows a fusion without losing what it drafts). Its own f^ still stands in for g where the target has
not scored, as EAGLE-3's draft feeds its own output there. On SmolLM2 (streams after layers 3 and 15
of 30) the pilot of 2026-11-27 gained +0.0038 first-position acceptance (paired s.e. 0.0004) over the
same head trained without them on the same 300 batches (MODEL_CARD.md).

The target keeps its features in its KV cache, slot by slot
(:meth:`~.hf.TransformersModel.keep_features`); the draft's cache holds a reference to the target's
cache (:meth:`FeatureDraft.new_cache`). Keys and values that the layer computed from its own
features are dropped at the next crop (EAGLE recomputes them from the target's features once the
target has scored those positions): the draft's cache holds only positions computed from the target.
Before the target's first call of a decoding there is no feature of the prompt to read
(:attr:`reads_target`): the decoder's first step is then the target's alone (``ar``), and the
draft reads the prompt with the target's features at the next step.

A decoding step's L forwards and draws run in one compiled call where they can
(:meth:`FeatureDraft.sample_block`, ``csrc/feature_draft.cpp``): bit for bit the loop's, without
its ~0.25 ms of Python and small operations a position (SmolLM2's draft: 2.86 -> 2.12 ms a step of
L = 3, as much as a fifth of a GGUF target's call; docs/results/speed_smollm2.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..probs import check_warping
from .base import Cache, LanguageModel, chunk_counts, chunk_positions, chunk_repeats
from .ggml_blocks import BLOCK
from .gpt2 import Linear, output_logits, q8_compiled
from .hf import TransformersModel
from .llama import RotaryTable, compiled_layers, compiled_products, layer_counts, layer_weights, llama_layers, rotary_table
from .masks import causal_mask, slot_mask
from .static_cache import StaticKV

__all__ = ["FeatureDraft", "FeatureHead", "fused_features", "is_feature_draft"]

_CONFIG = "feature-draft.json"
_WEIGHTS = "feature-draft.pt"


def is_feature_draft(path: str | Path) -> bool:
    """Whether folder ``path`` holds a feature draft (:meth:`FeatureHead.save`)."""
    return (Path(path) / _CONFIG).is_file()


class _Slots:
    """The target's features [B_t, W, E] in its cache's slot order, read by position: where the
    cache has holes (left padding in a batch), position i of a row is its i-th valid slot. Only the
    slots read are gathered (reordering the whole [B_t, W, E] cost ~1.2 ms a draft forward for a
    batch of 8 at a context of 150-250 tokens)."""

    def __init__(self, features: torch.Tensor, valid: torch.Tensor | None,
                 read: Callable[[torch.Tensor], torch.Tensor]):
        self.features, self.width, self.read = features, features.shape[1], read
        self.order = None  # [B_t, W]: the slot of each position, each row's valid slots first
        if valid is not None:
            key = torch.where(valid, torch.arange(self.width), self.width + torch.arange(self.width))
            self.order = key.argsort(1)

    def at(self, rows, positions) -> torch.Tensor:
        """The features of ``positions`` of target ``rows`` (index arrays that broadcast), as ``read``
        makes them from what the target keeps there: [..., E]."""
        rows, positions = torch.as_tensor(rows), torch.as_tensor(positions)
        return self.read(self.features[rows, positions if self.order is None else self.order[rows, positions]])


def fused_features(kept: torch.Tensor, streams: int, project: Callable[[torch.Tensor], torch.Tensor],
                   eps: float, norm: Callable[[torch.Tensor, float], torch.Tensor] | None = None) -> torch.Tensor:
    """A fused draft's input feature g [..., E] from what the target keeps at a position, its final
    hidden state f followed by ``streams`` residual streams s_1..s_n, [..., (1 + n) E]:

        g = f + W [rms(s_1); ...; rms(s_n)],

    with ``project`` the product by W [n E -> E] (on [N, n E] rows) and rms the RMS norm without a
    weight (``eps``). EAGLE-3 (Li et al. 2025, section 3.2) feeds its draft the target's low, middle
    and high layers through one fc layer; here the high one is the final hidden state itself and the
    others enter as a correction to it, so a head whose W is zero drafts as the head without them
    (a trained feature draft grows a fusion without losing what it drafts: :func:`~draftverify.train.feature_draft.with_fusion`),
    and each stream is normalised first (SmolLM2's middle stream has an RMS near 250, its final
    state near 2). ``streams`` 0: f itself. ``norm(x, eps)``, the RMS norm without a weight of the
    rows x [..., E] (None: ``F.rms_norm``; a feature draft passes the compiled loop's where its layer
    runs compiled)."""
    width = kept.shape[-1] // (1 + streams)
    final = kept[..., :width]
    if not streams:
        return final
    streamed = kept[..., width:].unflatten(-1, (streams, width))  # [..., n, E]
    normed = F.rms_norm(streamed, (width,), None, eps) if norm is None else norm(streamed, eps)
    return final + project(normed.reshape(-1, streams * width)).view(final.shape)


class FeatureHead(nn.Module):
    """The trainable part of a feature draft: ``fc`` [2E -> E], ``layers`` Llama decoder layers of
    the target's shape (EAGLE's one by default), a final RMS norm and the output layer over ``vocab``
    (module doc); with ``fusion`` (increasing layer counts of the target), ``fuse`` [n E -> E],
    zero at first, over the target's residual streams after those layers (:func:`fused_features`)."""

    def __init__(self, target_config: Any, vocab: torch.Tensor, layers: int = 1, fusion: tuple[int, ...] = ()):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

        vocab = torch.as_tensor(vocab, dtype=torch.int64)
        if vocab.dim() != 1 or len(vocab) == 0 or not bool((vocab[1:] > vocab[:-1]).all()) \
                or int(vocab[0]) < 0 or int(vocab[-1]) >= target_config.vocab_size:
            raise ValueError(f"vocab: expected distinct token ids in [0, {target_config.vocab_size}), sorted ascending")
        if layers < 1:
            raise ValueError(f"layers: a feature head has at least one decoder layer, got {layers}")
        fusion = layer_counts(fusion, name="fusion")  # the target's layers: checked where it keeps them
        super().__init__()
        config = LlamaConfig(**{**target_config.to_dict(), "num_hidden_layers": layers})
        config._attn_implementation = "sdpa"  # causal without a mask when training
        width = config.hidden_size
        self.config = config
        self.fc = nn.Linear(2 * width, width, bias=False)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(layers))
        self.rotary = LlamaRotaryEmbedding(config)
        self.norm = LlamaRMSNorm(width, eps=config.rms_norm_eps)
        self.head = nn.Linear(width, len(vocab), bias=False)
        self.register_buffer("vocab", vocab)  # [N] token ids
        self.fusion = fusion
        self.fuse = nn.Linear(len(fusion) * width, width, bias=False) if fusion else None
        if self.fuse is not None:
            nn.init.zeros_(self.fuse.weight)

    def fused(self, kept: torch.Tensor) -> torch.Tensor:
        """The input features g [..., E] from the target's kept states [..., (1 + n) E] (the final
        hidden state, then the streams of :attr:`fusion`; :func:`fused_features`)."""
        return fused_features(kept, len(self.fusion), self.fuse, self.config.rms_norm_eps)

    def forward(self, embedded: torch.Tensor, features: torch.Tensor, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, cache: Any = None) -> torch.Tensor:
        """Teacher-forced features f^ [B, S, E] from token embeddings [B, S, E] and the features of
        the previous positions [B, S, E] (row b, position j holds f_{j-1}). Causal over positions
        0..S-1 by default; training's later draft passes give the inputs their ``positions`` [1, S],
        a ``cache`` (a ``transformers`` Cache: the keys and values of the passes before, to which
        this forward's are appended) and the attention ``mask`` [1, 1, S, keys] (True: attend)."""
        x = self.fc(torch.cat([embedded, features], -1))
        positions = torch.arange(x.shape[1])[None] if positions is None else positions
        angles = self.rotary(x, positions)
        for layer in self.layers:
            x = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=angles, cache=cache)
        return self.norm(x)

    def save(self, folder: Path) -> None:
        """``folder/feature-draft.json`` (the target's config and the subset size) and the weights."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _CONFIG).write_text(json.dumps({"target_config": self.config.to_dict(), "vocab": len(self.vocab),
                                                  "fusion": list(self.fusion)}))
        torch.save({k: v.half() if v.is_floating_point() else v for k, v in self.state_dict().items()}, folder / _WEIGHTS)

    @classmethod
    def load(cls, folder: Path) -> FeatureHead:
        from transformers import LlamaConfig

        meta = json.loads((Path(folder) / _CONFIG).read_text())
        state = torch.load(Path(folder) / _WEIGHTS, weights_only=True)
        config = LlamaConfig(**meta["target_config"])
        head = cls(config, state["vocab"], config.num_hidden_layers, tuple(meta.get("fusion", ())))
        head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
        return head.eval()


def _opening_repeats(cache: Cache, tokens: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor | None:
    """The positions of the chunk ``tokens`` [B, S] (padding ``valid``) that repeat an earlier row's
    (:func:`~.base.chunk_repeats`) where the chunk, just appended, opens several rows (they held
    nothing before it: the draft's catch-up on a batch's prompts), else None."""
    rows, size = tokens.shape
    return chunk_repeats(tokens, valid) if rows > 1 and cache.width == size else None


def _count_exact(cache: Cache, exact: torch.Tensor | None, valid: torch.Tensor | None, counts: list[int]) -> None:
    """After a forward of a chunk (``valid`` [B, S] or None; ``counts`` its new slots per row, as
    :func:`~.base.chunk_counts` gives them) whose features came from the target where ``exact``
    [B, S] (None: everywhere): extend each row's leading slots computed from the target's features
    (``cache.backend.exact``) by the forward's, if the row's slots were all such before."""
    fresh = counts if exact is None else (exact if valid is None else valid & exact).sum(1).tolist()  # from the target
    backend = cache.backend
    for b, (new, count) in enumerate(zip(fresh, counts)):
        before = cache.held[b] - count
        if backend.exact[b] == before:
            backend.exact[b] = before + new


@dataclass(frozen=True)
class _Layer:
    """What :func:`~.llama.llama_layers` reads for the draft's layers."""

    layers: tuple[tuple[Any, ...], ...]
    rotary: Any  # the head's rotary module or its table (:func:`~.llama.rotary_table`)
    heads: int
    kv_heads: int
    head_dim: int
    compiled: tuple[list[Any], ...] | None = None  # as :func:`~.llama.compiled_layers` gives it


class _Backend:
    """A feature draft's cache state: its layer's keys and values, the target's cache it reads, its
    own last feature per row and where it was, and per row how many leading slots were computed
    from the target's features (``exact``)."""

    def __init__(self, kv: StaticKV, source: Cache, rows: int, width: int):
        self.kv, self.source = kv, source
        self.last = torch.zeros(rows, width)  # [B, E]: f^ at the last position fed
        self.last_position = [-1] * rows
        self.exact = [0] * rows


class FeatureDraft(LanguageModel):
    """A :class:`FeatureHead` drafting for ``target`` (module doc); its products through the same
    kernels as the target's lean forward (``quantize``, ``kernel`` as :meth:`~.gpt2.Linear.of`).
    ``quantize="auto"`` (the default) is "q8" where the 8-bit activation product runs compiled (AVX-512
    VNNI, or AVX2 with F16C) and every product's input size is a multiple of 32: the weights rounded to
    Q8_0 blocks times the activations rounded to 8 bits a block, as ``gguf-q8`` multiplies (a draft
    phase of L = 3 in 2.03-2.18 ms against 2.28-2.63 with "int8" on SmolLM2 with VNNI, of L = 4 in 3.25
    against 4.60 ms on an AVX2 EPYC; first-position acceptance 0.6141 against 0.6128 on the card's
    held-out answers: docs/results/speed_smollm2.md); else "int8", the
    weight-only int8 product (a quarter of float32's bytes). The draft's precision never touches
    exactness: its law is that of the products it runs, which its tokens are drawn from. None keeps
    float32. :attr:`quantize` says which ran."""

    depth_dependent = True  # from the second drafted position on it reads its own features
    reads_target = True  # the decoder's first step is the target's alone

    def __init__(self, head: FeatureHead, target: TransformersModel, *, quantize: str | None = "auto",
                 kernel: str | None = None):
        if head.config.hidden_size != target.config.hidden_size:
            raise ValueError(f"feature draft: built for hidden size {head.config.hidden_size}, the target has "
                             f"{target.config.hidden_size}")
        if quantize == "auto":
            config = head.config
            inputs = (2 * config.hidden_size, config.hidden_size, config.num_attention_heads * config.head_dim,
                      config.intermediate_size, len(head.fusion) * config.hidden_size)
            quantize = "q8" if all(size % BLOCK == 0 for size in inputs) and q8_compiled(kernel) else "int8"
        self.quantize = quantize
        target.keep_features(head.fusion)
        self.head_module = head.eval()
        self.vocab_size, self.eos_token_id, self.max_length = target.vocab_size, target.eos_token_id, target.max_length
        self.tokenizer = target.tokenizer
        config = head.config
        with torch.no_grad():
            self.embedding = target.model.get_input_embeddings().weight  # [V, E]
            self.fc = Linear.of(head.fc.weight.t(), None, quantize, kernel)  # [2E, E]
            self.output = Linear.of(head.head.weight.t().contiguous(), None, quantize, kernel)  # [E, N]
            self.fuse = None if head.fuse is None else Linear.of(head.fuse.weight.t().contiguous(), None, quantize, kernel)
        layers = tuple(layer_weights(layer, quantize, kernel) for layer in head.layers)
        self.layer = _Layer(layers, rotary_table(head.rotary), config.num_attention_heads, config.num_key_value_heads,
                            config.head_dim, compiled_layers(layers, config.head_dim))
        self.support = head.vocab
        self.norm_weight, self.norm_eps = head.norm.weight.detach(), head.norm.variance_epsilon
        self.norm_shape = (config.hidden_size,)
        self._ones = torch.ones(config.hidden_size)  # the weight of the streams' norm (fused_features)
        products = compiled_products([self.fc, *(p for layer in layers for p in (*layer[1:3], *layer[4:6])), self.output])
        norms = [norm for layer in layers for norm in (layer[0], layer[3])]
        # a block's angles come from one rotary call over all its positions: only where they depend on the
        # position alone, as a rotary table holds them (not transformers' dynamic_rope_update types)
        static_angles = isinstance(self.layer.rotary, RotaryTable)
        self.compiled_block = None if self.layer.compiled is None or products is None or not static_angles else (
            [*(norm.weight for norm in norms), self.norm_weight],
            [*(norm.variance_epsilon for norm in norms), self.norm_eps], *products)  # csrc/feature_draft.cpp

    @classmethod
    def from_folder(cls, folder: str | Path, target: TransformersModel, **options: Any) -> FeatureDraft:
        return cls(FeatureHead.load(Path(folder)), target, **options)

    def new_cache(self, batch_size: int, target_cache: Cache | None = None, *, features: bool = True) -> Cache:
        """An empty cache of ``batch_size`` rows reading ``target_cache`` (the target's cache of the
        same decoding, ``batch_size`` rows or a divisor of it: row i reads target row i * B_t // B)."""
        if target_cache is None:
            raise ValueError("target_cache: a feature draft drafts from the target's hidden states; give the "
                             "target's cache of the same decoding")
        if getattr(target_cache.backend, "hidden", None) is None:
            raise ValueError("target_cache: it keeps no hidden states for this draft to read (made with "
                             "features=False, or before the draft was built on its target)")
        cache = super().new_cache(batch_size)
        cache.backend.source = target_cache
        return cache

    def _new_backend(self, batch_size: int, features: bool = True) -> _Backend:
        layers, heads, head_dim = len(self.layer.layers), self.layer.kv_heads, self.layer.head_dim
        kv = StaticKV(layers, batch_size, heads, head_dim, 0, torch.float32)
        return _Backend(kv, None, batch_size, self.embedding.shape[1])

    def _features(self, cache: Cache, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The input features f_{j-1} [B, S, E] at ``positions`` j [B, S], and whether each came from
        the target (or is position 0) [B, S], None where all did (module doc)."""
        backend, source = cache.backend, cache.backend.source
        rows, size = positions.shape
        if rows == source.batch_size == 1 and not source.holes:  # one prompt: slot i of the target is position i
            first, last = positions[0, 0].item() - 1, positions[0, -1].item() - 1
            if 0 <= first and last - first == size - 1 and last < source.held[0]:  # consecutive, all scored
                return self._read(source.backend.features[:, first: last + 1]), None  # as _block_features reads them
        slots = _Slots(source.backend.features, source.valid if source.holes else None, self._read)
        target_rows = [r * source.batch_size // rows for r in range(rows)]  # [B]: the target row each row reads
        if size == 1:  # a drafted position: decide per row on the host, one gather at most
            return self._position_features(backend, slots, source.held, target_rows, positions[:, 0].tolist())
        return self._block_features(backend, slots, source.held, target_rows, positions)

    def _read(self, kept: torch.Tensor) -> torch.Tensor:
        """The input features [..., E] from what the target keeps at positions [..., K]: its final
        hidden state, fused with the streams of the head's ``fusion`` (:func:`fused_features`)."""
        streams = len(self.head_module.fusion)
        width = (1 + streams) * self.norm_shape[0]  # the final state, then each stream
        if kept.shape[-1] < width:
            raise ValueError(f"target: it keeps {kept.shape[-1]} features a position; this draft fuses the streams after "
                             f"layers {self.head_module.fusion} (target.keep_features({self.head_module.fusion}))")
        return fused_features(kept[..., :width], streams, self.fuse, self.head_module.config.rms_norm_eps,
                              None if self.layer.compiled is None else self._unweighted_norm)

    def _unweighted_norm(self, x: torch.Tensor, eps: float) -> torch.Tensor:
        """The compiled loop's RMS norm of the rows x [..., E] without a weight (a weight of ones: x / rms times 1)."""
        return torch.ops.draftverify.rms_norm(x, self._ones, eps)

    @staticmethod
    def _block_features(backend: _Backend, slots: _Slots, held: list[int], target_rows: list[int],
                        positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_features` for any positions [B, S] from the target's slots, the target rows'
        ``held`` and the target row of each row."""
        rows, size = positions.shape
        target_rows = torch.tensor(target_rows)
        previous = positions - 1  # [B, S]
        held = torch.tensor(held)[target_rows][:, None]  # [B, 1]
        from_target = (previous >= 0) & (previous < held)
        features = slots.at(target_rows[:, None], previous.clamp(0, max(slots.width - 1, 0))) if slots.width else \
            torch.zeros(rows, size, backend.last.shape[1])
        own = previous == torch.tensor(backend.last_position)[:, None]  # the position this draft fed last
        features = torch.where(from_target[..., None], features,
                               torch.where(own[..., None], backend.last[:, None], torch.zeros(())))
        return features, from_target | (previous < 0)

    @staticmethod
    def _position_features(backend: _Backend, slots: _Slots, held: list[int], target_rows: list[int],
                           positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_features` for one position j per row (S = 1), the same choice made on the host:
        the target's f_{j-1} where it has scored j - 1, the draft's own where it fed j - 1, else 0."""
        previous = [j - 1 for j in positions]
        from_target = [0 <= i < held[t] for i, t in zip(previous, target_rows)]
        if all(from_target):
            features = slots.at(target_rows, previous)  # [B, E]
        elif not any(from_target) and previous == backend.last_position:
            features = backend.last
        else:
            gathered = slots.at(target_rows, [i if f else 0 for i, f in zip(previous, from_target)]) if slots.width \
                else torch.zeros_like(backend.last)
            kind = torch.tensor([0 if f else 1 if i == own else 2
                                 for i, f, own in zip(previous, from_target, backend.last_position)])[:, None]  # [B, 1]
            features = torch.where(kind == 0, gathered, torch.where(kind == 1, backend.last, torch.zeros(())))
        exact = torch.tensor([f or i < 0 for i, f in zip(previous, from_target)])
        return features[:, None], exact[:, None]

    def _forward(self, cache: Cache, tokens, positions, holes, num_logits) -> torch.Tensor:
        backend, kv = cache.backend, cache.backend.kv
        rows, size = tokens.shape
        positions = positions.expand(rows, size)
        valid = cache.valid[:, -size:] if holes else None  # [B, S]: the chunk's padding, which the layer skips
        with torch.inference_mode():
            features, exact = self._features(cache, positions)  # [B, S, E], [B, S]
            x = self.fc(torch.cat([self.embedding[tokens], features], -1).view(rows * size, -1)).view(rows, size, -1)
            mask = slot_mask(cache.valid, size) if holes else causal_mask(size, cache.width) if size > 1 else None
            kv.reserve(size)
            repeats = _opening_repeats(cache, tokens, valid)
            hidden = self._final_norm(llama_layers(self.layer, kv, x, positions, mask, valid, repeats=repeats))
            kv.advance(size)
            backend.last = hidden[:, -1].clone()
            subset = output_logits(self.output, self.head_module.head, hidden[:, -num_logits:]).view(rows * num_logits, -1)  # [B n, N]
        _count_exact(cache, exact, valid, chunk_counts(cache, tokens, valid))
        backend.last_position = positions[:, -1].tolist()
        return subset.view(rows, num_logits, -1)  # over the support: zero draft probability outside it

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The final RMS norm of the layers' states x [..., E]: the compiled loop's where the layer runs
        compiled (as the compiled block normalises), else ``F.rms_norm`` (float32 rounding apart)."""
        if self.layer.compiled is not None:
            return torch.ops.draftverify.rms_norm(x, self.norm_weight, self.norm_eps)
        return F.rms_norm(x, self.norm_shape, self.norm_weight, self.norm_eps)

    def sample_block(self, cache: Cache, tokens: torch.Tensor, length: int, temperature: float,
                     generator: torch.Generator | None, top_k: int | None = None, top_p: float | None = None,
                     valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """:meth:`LanguageModel.sample_block` in one compiled call (``csrc/feature_draft.cpp``: the
        forwards of :meth:`_forward`, the warping and draws of the decoder's loop, the same kernels in
        the same order, a ragged batch's positions, masks and padding as :meth:`forward` makes them),
        where the products and the layer run compiled, the block fits the context and no hook watches
        the output layer (SPRINTER's tap reads it); else None. The drafted positions read the draft's
        own features (their previous positions are beyond what the target has scored), so only the
        chunk's count towards ``exact``. ``ValueError`` for ``tokens`` not [B, m >= 1], ``valid`` not
        of its shape, ``length`` < 1, ``temperature`` <= 0 and a ``top_k`` or ``top_p`` that
        :func:`~draftverify.probs.warp` refuses."""
        counts = chunk_counts(cache, tokens, valid)
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 (a draw from the warped logits), got {temperature}")
        check_warping(temperature, top_k, top_p)
        rows, size = tokens.shape
        fed = size + length - 1  # the chunk, then every drafted token but the last
        head = self.head_module.head
        if self.compiled_block is None or head._forward_hooks or head._forward_pre_hooks \
                or max(h + n for h, n in zip(cache.held, counts)) + length - 1 > (self.max_length or math.inf):
            return None
        backend, kv = cache.backend, cache.backend.kv
        holes = valid is not None or cache.holes
        if holes:  # [B, m + L - 1]: the chunk's positions as forward counts them, then one more a drafted token
            chunk = chunk_positions(cache, rows, size, valid)
            positions = torch.cat([chunk, chunk[:, -1:] + torch.arange(1, length)], 1)
        else:  # every row counts on from the width
            positions = chunk_positions(cache, rows, fed, None)
        cache.append(tokens, valid, counts)
        if holes:  # the masks and padding _forward gives the layer, forward by forward
            slots = torch.cat([cache.valid, cache.valid.new_ones(rows, length - 1)], 1)  # [B, T + L - 1]
            width = cache.width
            masks = [slot_mask(slots[:, : width + i], 1 if i else size) for i in range(length)]
            valids = [cache.valid[:, -size:]] + [slots.new_ones(rows, 1)] * (length - 1)
        else:
            masks, valids = [causal_mask(size, cache.width) if size > 1 else None] + [None] * (length - 1), [None] * length
        repeats = _opening_repeats(cache, tokens, valids[0])
        with torch.inference_mode():
            features, exact = self._features(cache, positions[:, :size])  # [B, m, E], [B, m]
            cos, sin = self.layer.rotary(features, positions)  # [B, m + L - 1, D] each
            kv.reserve(fed)
            drafted, laws, last = torch.ops.draftverify.feature_draft_block(
                tokens, features, self.embedding, self.support, cos[:, None], sin[:, None], masks, valids, repeats,
                kv.keys, kv.values, kv.length, self.layer.heads, self.layer.kv_heads, self.layer.head_dim,
                *self.compiled_block, length, self.vocab_size, temperature, top_k, top_p,
                generator)  # [B, L], [B, L, V], [B, E]
            kv.advance(fed)
        _count_exact(cache, exact, valids[0], counts)
        cache.append(drafted[:, :-1], None, [length - 1] * rows)
        backend.last, backend.last_position = last, positions[:, -1].tolist()
        return drafted, laws

    def get_output_embeddings(self) -> nn.Linear:
        """The output layer over the subset (what :class:`~.hidden.HiddenStateTap` hooks: with a hook on
        it, a forward runs it as a module, float32, and the hook sees the draft's last hidden state)."""
        return self.head_module.head

    def crop(self, cache: Cache, lengths: torch.Tensor | list[int]) -> None:
        """As :meth:`LanguageModel.crop`, and further to the slots computed from the target's features."""
        lengths = lengths if isinstance(lengths, list) else torch.as_tensor(lengths).tolist()
        super().crop(cache, [min(n, e) for n, e in zip(lengths, cache.backend.exact)])
        cache.backend.exact = [min(e, h) for e, h in zip(cache.backend.exact, cache.held)]

    def _reindex(self, cache: Cache, rows: torch.Tensor) -> None:
        backend = cache.backend
        with torch.inference_mode():
            backend.kv.select(rows)
        order = rows.tolist()
        backend.last = backend.last[rows]
        backend.last_position = [backend.last_position[r] for r in order]
        backend.exact = [backend.exact[r] for r in order]

    def _truncate(self, cache: Cache, num_slots: int) -> None:
        cache.backend.kv.crop(num_slots)

    def backend_length(self, cache: Cache) -> int:
        return cache.backend.kv.length

"""Known-law models behind :class:`LanguageModel`, for exactness tests of the decoding engine.

Wraps any object with ``conditional(prefix_tokens) -> array [V]`` (the Markov chains of
:mod:`draftverify.testing`): the logits of a context are the logs of its exact conditional, so the
engine's output law can be compared with a law enumerated from the same conditionals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .base import HistoryModel

__all__ = ["ToyModel"]


class ToyModel(HistoryModel):
    """``model.conditional(prefix)`` as a language model; logits are float64 log-probabilities."""

    def __init__(self, model: Any, eos_token_id: int | None = None):
        self.model = model
        self.vocab_size = int(np.asarray(model.conditional(())).shape[-1])
        self.eos_token_id = eos_token_id

    def next_token_logits(self, contexts: list[list[int]]) -> torch.Tensor:
        probs = np.stack([np.asarray(self.model.conditional(tuple(c)), dtype=np.float64) for c in contexts])
        with np.errstate(divide="ignore"):
            return torch.from_numpy(np.log(probs))  # [N, V], -inf where the probability is 0


def tiny_causal_lm(
    vocab_size: int, *, arch: str = "gpt2", width: int = 32, layers: int = 2, seed: int = 0,
    dtype: torch.dtype = torch.float64, max_positions: int = 512,
) -> Any:
    """A randomly initialised ``transformers`` causal LM small enough for tests and smoke runs,
    built offline from a config (``arch``: "gpt2", "llama" or "qwen2")."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    if arch == "gpt2":
        config = GPT2Config(vocab_size=vocab_size, n_embd=width, n_layer=layers, n_head=2,
                            n_positions=max_positions, bos_token_id=None, eos_token_id=None)
        model = GPT2LMHeadModel(config)
    elif arch == "llama":
        config = LlamaConfig(vocab_size=vocab_size, hidden_size=width, intermediate_size=2 * width,
                             num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                             max_position_embeddings=max_positions, bos_token_id=None, eos_token_id=None,
                             pad_token_id=None)
        model = LlamaForCausalLM(config)
    elif arch == "qwen2":  # no lean forward: runs the model's own
        config = Qwen2Config(vocab_size=vocab_size, hidden_size=width, intermediate_size=2 * width,
                             num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                             max_position_embeddings=max_positions, bos_token_id=None, eos_token_id=None,
                             pad_token_id=None)
        model = Qwen2ForCausalLM(config)
    else:
        raise ValueError(f"unknown arch {arch!r}; known: gpt2, llama, qwen2")
    return model.to(dtype).eval()


def char_tokenizer(alphabet: str = "abcdefghijklmnopqrstuvwxyz .,:()=+\n") -> Any:
    """A character-level ``transformers`` tokenizer: one token per character of ``alphabet``, plus
    ``<eos>`` (id 0) and ``<unk>`` (id 1)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate(dict.fromkeys(alphabet))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>")

"""A byte-level BPE tokenizer trained with ``tokenizers`` and saved in ``transformers`` format.

Byte-level (GPT-2 style, Radford et al. 2019, section 2.2): every byte string is encodable, so
any prompt works and decoding is lossless. The single special token ``<|endoftext|>`` separates
documents in training and is the eos token of the models."""

from __future__ import annotations

from pathlib import Path

import numpy as np

EOS_TOKEN = "<|endoftext|>"


def train_tokenizer(texts: list[str], vocab_size: int, path: Path):
    """Train a byte-level BPE of ``vocab_size`` tokens on ``texts`` and save it under ``path``.

    Returns the ``transformers`` tokenizer; ``AutoTokenizer.from_pretrained(path)`` loads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 257 + 1:
        raise ValueError(f"vocab_size must exceed the 256 byte symbols + eos, got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN,
                                      bos_token=EOS_TOKEN, unk_token=None, pad_token=EOS_TOKEN,
                                      model_max_length=1 << 20)
    Path(path).mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(path))
    return wrapped


def encode_documents(tokenizer, texts: list[str]) -> np.ndarray:
    """Token ids of ``texts``, each followed by eos, concatenated: ``[N]`` uint16 (V < 65536)."""
    if len(tokenizer) > np.iinfo(np.uint16).max:
        raise ValueError(f"vocabulary of {len(tokenizer)} tokens does not fit uint16")
    eos = tokenizer.eos_token_id
    pieces = [np.asarray(ids + [eos], dtype=np.uint16)
              for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint16)

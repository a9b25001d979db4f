"""Held-out loss of a target in float32 and in weight-only int8 (draftverify.models.panel_mm), same
tokens: the first TOKENS tokens of the embedded pair's held-out stream (stdlib files held out by
train-pair's hash split, joined by <|endoftext|>), scored in consecutive windows of WINDOW tokens.

Run: PYTHONPATH=src python docs/results/int8_heldout_loss.py [TARGET (folder or .gguf)] [TOKENS]
"""

import math
import sys

import torch

from draftverify.models.hf import TransformersModel
from draftverify.models.pair import load_pair
from draftverify.train.corpus import split_corpus

WINDOW = 256
torch.set_num_threads(1)
target = load_pair().target if len(sys.argv) < 2 else TransformersModel.from_pretrained(sys.argv[1])
tokens_wanted = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
split = split_corpus()
text = "<|endoftext|>".join(split.read(split.heldout))
ids = target.tokenizer.encode(text)[: tokens_wanted + 1]
report = {}
for name, quantize in (("float32", None), ("int8", "int8")):
    model = TransformersModel(target.model, target.tokenizer, quantize=quantize)
    total, count = 0.0, 0
    for start in range(0, len(ids) - 1, WINDOW):
        window = torch.tensor([ids[start: start + WINDOW + 1]])  # [1, S + 1]
        logits = model.forward(model.new_cache(1), window[:, :-1], None, window.shape[1] - 1)  # [1, S, V]
        total += torch.nn.functional.cross_entropy(logits[0].double(), window[0, 1:], reduction="sum").item()
        count += window.shape[1] - 1
    report[name] = total / count
print(f"tokens {count}; held-out loss (nats/token): float32 {report['float32']:.4f}, int8 {report['int8']:.4f} "
      f"(+{report['int8'] - report['float32']:.4f}, perplexity x{math.exp(report['int8'] - report['float32']):.4f})")

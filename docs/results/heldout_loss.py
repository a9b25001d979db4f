"""Held-out loss of a target in float32 and in other weight formats (``--formats``: weight-only int8,
draftverify.models.panel_mm; gguf-q8, GGUF blocks times 8-bit activations, draftverify.models.ggml_blocks),
on the same tokens: teacher-forced mean negative log-likelihood in nats per token.

Two sources of text:
- ``--shards`` (SmolLM2, the default target): the answer tokens of train-draft's held-out shards
  (``shard-*.npz``: ``tokens`` [n, S] int32 right-padded with -1, ``answer_start``, ``answer_length``),
  each row scored alone, the loss on its answer tokens only; ``--rows`` caps the rows per shard.
- otherwise (``--target tiny``): the first ``--tokens`` tokens of the embedded pair's held-out stream
  (stdlib files held out by train-pair's hash split, joined by <|endoftext|>) in windows of 256.

Run: PYTHONPATH=src python docs/results/heldout_loss.py [--target T] [--formats int8,gguf-q8] [--shards 'DIR/shard-*.npz'] [--rows N]
"""

import argparse
import glob
import math

import numpy as np
import torch
import torch.nn.functional as F

from draftverify.models.pair import load_pair

WINDOW = 256


def stream_windows(tokenizer, count: int) -> list[tuple[list[int], int]]:
    """(tokens, first scored position) of consecutive windows of the embedded held-out stream."""
    from draftverify.train.corpus import split_corpus

    split = split_corpus()
    ids = tokenizer.encode("<|endoftext|>".join(split.read(split.heldout)))[: count + 1]
    return [(ids[start: start + WINDOW + 1], 1) for start in range(0, len(ids) - 1, WINDOW)]


def answer_rows(pattern: str, rows: int | None) -> list[tuple[list[int], int]]:
    """(tokens up to the answer's end, answer start) of each held-out row."""
    out = []
    for path in sorted(glob.glob(pattern)):
        shard = np.load(path)
        for tokens, start, length in list(zip(shard["tokens"], shard["answer_start"], shard["answer_length"]))[:rows]:
            out.append((tokens[: start + length].tolist(), int(start)))
    if not out:
        raise ValueError(f"--shards {pattern!r} matches no rows")
    return out


def loss(model, sequences: list[tuple[list[int], int]]) -> tuple[float, int]:
    """Summed NLL (nats) of tokens[first:] given their prefixes, over sequences, and their count."""
    total, count = 0.0, 0
    for tokens, first in sequences:
        ids = torch.tensor([tokens])  # [1, S]
        logits = model.forward(model.new_cache(1), ids[:, :-1], None, ids.shape[1] - first)[0]  # [S - first, V]
        total += F.cross_entropy(logits.double(), ids[0, first:], reduction="sum").item()
        count += ids.shape[1] - first
    return total, count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default=None, help="load_pair's target (default SmolLM2; 'tiny' the embedded one)")
    parser.add_argument("--shards", default="/work/train-draft/heldout/shard-*.npz")
    parser.add_argument("--rows", type=int, default=None, help="rows per shard (default all)")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens of the stream (--target tiny)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--formats", default="int8,gguf-q8", help="weight formats compared with float32 (comma-separated)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_pair(args.target).target
    sequences = (stream_windows(target.tokenizer, args.tokens) if args.target == "tiny"
                 else answer_rows(args.shards, args.rows))
    report = {}
    for name in ("float32", *args.formats.split(",")):
        model = type(target)(target.model, target.tokenizer, quantize=name)
        report[name], count = loss(model, sequences)
    base = report["float32"] / count
    print(f"{len(sequences)} sequences, {count} scored tokens; held-out loss (nats/token): float32 {base:.4f}" + "".join(
        f", {name} {report[name] / count:.4f} ({report[name] / count - base:+.4f}, perplexity "
        f"x{math.exp(report[name] / count - base):.4f})" for name in report if name != "float32"))

if __name__ == "__main__":
    main()

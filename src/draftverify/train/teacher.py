"""Teacher data for a draft of a real target: the target's own answers with its distributions.

A draft is accepted where it agrees with the target on the target's own text, so the training data
is what the target says (DistillSpec, Zhou et al. 2024, section 3: on-policy data for the teacher;
here the teacher's samples): chat prompts built from the Python standard library or the installed
packages (:func:`prompt_root`; functions with their docstrings; files hashed into the held-out
split are never used, see :func:`~draftverify.train.corpus.is_heldout`), answered by the target at temperature 1, and at
every answered position the target's ``top_k`` most likely tokens with their probabilities (the
rest of the mass is kept as one number). Shards are written as ``shard-NNNNN.npz`` and a resumed
run starts after the last complete shard.

Beside the chat answers, plain source text (:func:`source_windows`, :func:`label_source_shards`):
windows of the standard library's training files, the target's law teacher-forced at every position
after a short context, in the same shard layout. That is what a draft meets when a user completes
code without the chat template; a draft trained on chat answers alone drifts away from it
(2026-11-27: the stage-10 draft accepted 0.29 on held-out source against 0.50 for stage 8, at equal
chat acceptance; `evaluate-draft` measures it, :func:`.heldout.source_acceptance`).
"""

from __future__ import annotations

import ast
import functools
import random
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..models.chat import encode_prompt
from ..rng import sample
from .corpus import split_corpus
from .feature_draft import write_features, write_streams_record

__all__ = ["PROMPT_SOURCES", "Answers", "TeacherConfig", "answer_batch", "chat_prompts", "label_shards",
           "label_source_shards", "prompt_root", "source_windows"]

_TASKS = (
    "Write a Python function `{name}({args})`: {doc}",
    "Implement `{name}({args})` in Python. {doc}",
    "Explain what this Python function does:\n\n```python\n{source}\n```",
    "Write a docstring and tests for this function:\n\n```python\n{source}\n```",
)


PROMPT_SOURCES = ("stdlib", "packages")


@dataclass(frozen=True)
class TeacherConfig:
    """Sampling settings of the labelling run; ``prompts`` names the sources the chat prompts are
    built from (:func:`prompt_root`)."""

    batch_size: int = 32
    max_new_tokens: int = 160
    top_k: int = 32
    prompts_per_shard: int = 32
    max_prompt_tokens: int = 192
    seed: int = 0
    prompts: str = "stdlib"

    def __post_init__(self) -> None:
        prompt_root(self.prompts)  # an unknown source is refused here


def prompt_root(prompts: str) -> Path | None:
    """The sources chat prompts are built from: ``"stdlib"`` the standard library (None, the
    corpus's default root), ``"packages"`` the running environment's installed packages (its purelib
    folder: torch, transformers, numpy and the rest; 18,405 documented functions in this project's
    environment on 2026-11-27, against about 5,000 in the standard library)."""
    if prompts not in PROMPT_SOURCES:
        raise ValueError(f"prompts: one of {', '.join(PROMPT_SOURCES)}, got {prompts!r}")
    return None if prompts == "stdlib" else Path(sysconfig.get_paths()["purelib"])


def chat_prompts(split: str = "train", seed: int = 0, root: Path | None = None) -> list[str]:
    """User messages built from the documented functions of the standard library (or of the Python
    sources under ``root``: installed packages), shuffled by ``seed``; ``split`` is ``"train"`` or
    ``"heldout"`` (by file, as the corpus split; a held-out message that is also a training message, a
    function copied between files, is dropped). A function of another ``root`` whose source is also
    in the standard library's held-out split (a vendored copy) is dropped, so that no held-out
    evaluation prompt is trained on. Built once per process for each (split, seed, root): the
    held-out messages parse the whole standard library (10-12 s here), and ``evaluate-draft`` asks
    for them twice."""
    return list(_chat_prompts(split, seed, root))


@functools.cache
def _chat_prompts(split: str, seed: int, root: Path | None) -> tuple[str, ...]:
    corpus = split_corpus(root)
    functions = [f for text in corpus.read(corpus.train if split == "train" else corpus.heldout)
                 for f in _documented_functions(text)]
    if root is not None:
        stdlib = split_corpus()
        heldout = {f["source"] for text in stdlib.read(stdlib.heldout) for f in _documented_functions(text)}
        functions = [f for f in functions if f["source"] not in heldout]
    rng = random.Random(seed)
    prompts = [rng.choice(_TASKS).format(**f) for f in functions]
    rng.shuffle(prompts)
    if split != "train":
        seen = set(_chat_prompts("train", seed, root))
        prompts = [p for p in prompts if p not in seen]
    return tuple(prompts)


def _documented_functions(text: str) -> list[dict[str, str]]:
    """The public functions of a source file with a docstring and at most 15 lines, in ``ast.walk``
    order: name, arguments, the docstring's first paragraph on one line, source."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines()
    functions = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or node.end_lineno - node.lineno > 14:
            continue
        functions.append(dict(name=node.name, args=ast.unparse(node.args),
                              doc=doc.strip().split("\n\n")[0].replace("\n", " "),
                              source="\n".join(lines[node.lineno - 1: node.end_lineno])))
    return functions


@dataclass(frozen=True)
class Answers:
    """What :func:`answer_batch` returns for B prompts: each row's answer (up to and including eos),
    the top-k ids and probabilities of the law every answer token was drawn from ``[B, A, k]``, and
    (when asked for) each row's features ``[len(prompt) + len(answer), (1 + n) E]``: the target's
    final hidden state after the final norm at every position of prompt and answer, then the n
    residual streams it was asked to keep, what a feature draft (:mod:`.feature_draft`) trains on."""

    tokens: list[list[int]]
    top_ids: torch.Tensor
    top_probs: torch.Tensor
    features: list[torch.Tensor] | None = None


@torch.no_grad()
def answer_batch(model, prompts: list[list[int]], max_new_tokens: int, eos: int, top_k: int,
                 generator: torch.Generator, features: bool = False, streams: tuple[int, ...] = ()) -> Answers:
    """Sample answers to ``prompts`` (token lists) from ``model`` (a :class:`LanguageModel`) at
    temperature 1, all rows at once: left-padded prompts in one call, then one token per call.

    With ``features`` the model's cache keeps its hidden states (``model.keep_features(streams)``, a
    lean Llama forward; with ``streams`` the residual streams after those layers as well) and they are
    read back from the cache: the forwards that sampled the answers computed them already, so
    labelling needs no second pass over the text (one more call feeds the last tokens drawn).

    A row that has drawn eos takes no further part: after its eos is fed, the tokens it keeps being
    dealt are padding (``valid`` False) that the compiled loop leaves out of its products and
    attention (:func:`~draftverify.models.llama.llama_layers`). The answers' laws are unchanged;
    the other rows' products may round otherwise with fewer rows beside them."""
    if streams and not features:
        raise ValueError("streams: kept with the features only (features=True)")
    if features:
        model.keep_features(streams)
    rows, width = len(prompts), max(map(len, prompts))
    tokens = torch.zeros(rows, width, dtype=torch.int64)
    valid = torch.zeros(rows, width, dtype=torch.bool)
    for b, prompt in enumerate(prompts):
        tokens[b, width - len(prompt):] = torch.tensor(prompt)
        valid[b, width - len(prompt):] = True
    cache = model.new_cache(rows)
    logits = model.forward(cache, tokens, valid)[:, -1]  # [B, V]
    drawn, top_ids, top_probs = [], [], []
    finished = torch.zeros(rows, dtype=torch.bool)
    for step in range(max_new_tokens):
        if step:  # the tokens drawn last; the final ones are never fed (unless features are kept, below)
            logits = model.forward(cache, token[:, None], fed)[:, -1]
        probs = torch.softmax(logits.double(), -1)  # [B, V]
        token = sample(probs, generator)  # [B]: inverse CDF in float64 (torch.multinomial took a third of a step)
        top = torch.topk(probs, top_k, -1)
        drawn.append(token), top_ids.append(top.indices.to(torch.int32)), top_probs.append(top.values.float())
        fed = ~finished[:, None] if bool(finished.any()) else None  # [B, 1]: the rows still answering as they drew it
        finished |= token == eos
        if bool(finished.all()):
            break
    drawn_tokens = torch.stack(drawn, 1).tolist()  # [B, A]
    answers = [row[: row.index(eos) + 1] if eos in row else row for row in drawn_tokens]
    kept = None
    if features:
        model.forward(cache, token[:, None], fed)  # the last tokens drawn get their slots, hence their features
        # [B, W, (1 + n) E] in slot order; with holes, a row's valid slots are its positions
        slots = model.kept_features(cache, streams)
        kept = [(slots[b][cache.valid[b]] if cache.holes else slots[b])[: len(prompts[b]) + len(answers[b])].clone()
                for b in range(rows)]
    return Answers(answers, torch.stack(top_ids, 1), torch.stack(top_probs, 1), kept)


def label_shards(target, prompts: list[str], out: Path, config: TeacherConfig, log=print,
                 deadline: float | None = None, features: bool = False, streams: tuple[int, ...] = ()) -> int:
    """Answer ``prompts`` with ``target`` (a ``TransformersModel`` with a chat tokenizer) and write
    shards to ``out``; returns the number of shards written in this call.

    Each shard holds ``tokens`` [n, S] int32 (prompt then answer, right-padded with -1),
    ``answer_start`` [n], ``answer_length`` [n], ``top_ids`` [n, A, k] int32 and ``top_probs``
    [n, A, k] float16 (A answer positions: the distribution each answer token was drawn from).
    With ``features`` (a lean Llama target) ``features-NNNNN.npy`` [n, S, E] float16 is written
    before its shard, the layout of :func:`.feature_draft.extract_features`, taken from the
    labelling's own forwards (:func:`answer_batch`); padding positions hold zeros. With ``streams``
    too, ``fusion-NNNNN.npy`` [n, S, len(streams) E], the residual streams after those layers from
    the same forwards, the layout of :func:`.feature_draft.extract_fusion` (which would cost another
    half forward a shard), and the folder's ``fusion.json``."""
    tokenizer = target.tokenizer

    def label(first: int, stop: int) -> list[tuple]:
        ids = [encode_prompt(tokenizer, p, chat=True)[-config.max_prompt_tokens:] for p in prompts[first:stop]]
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + first)
        answered = answer_batch(target, ids, config.max_new_tokens, target.eos_token_id, config.top_k, generator,
                                features, streams)
        return [(np.array(ids[b] + answer, dtype=np.int32), len(ids[b]), answered.top_ids[b, : len(answer)].numpy(),
                 answered.top_probs[b, : len(answer)].numpy().astype(np.float16),
                 answered.features[b] if features else None) for b, answer in enumerate(answered.tokens)]

    return _write_shards(out, len(prompts), config, label, features, streams, deadline, log, "shard")


def source_windows(tokenizer: Any, split: str = "train", seed: int = 0, size: int = 256, per_file: int = 4) -> list[list[int]]:
    """Windows of ``size`` consecutive token ids of the standard library's ``split`` files
    (``"train"`` or ``"heldout"``, by file as :func:`chat_prompts`), as a plain completion prompt
    reads them (no chat template): at most ``per_file`` adjacent windows a file from an offset drawn
    with ``seed``, shuffled by ``seed``."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split: 'train' or 'heldout', got {split!r}")
    if size < 2 or per_file < 1:
        raise ValueError(f"size >= 2 and per_file >= 1, got size={size}, per_file={per_file}")
    corpus = split_corpus()
    rng = random.Random(seed)
    windows = []
    for text in corpus.read(corpus.train if split == "train" else corpus.heldout):
        ids = tokenizer.encode(text)
        count = min(per_file, len(ids) // size)
        if count:
            start = rng.randrange(len(ids) - count * size + 1)
            windows += [ids[start + i * size: start + (i + 1) * size] for i in range(count)]
    rng.shuffle(windows)
    return windows


@torch.no_grad()
def label_source_shards(target, windows: list[list[int]], out: Path, config: TeacherConfig, context: int = 32,
                        log=print, deadline: float | None = None, features: bool = False,
                        streams: tuple[int, ...] = ()) -> int:
    """Teacher-forced shards of plain text: each of ``windows`` (token lists of one length, as
    :func:`source_windows` gives them) is a row whose first ``context`` tokens are its prompt and the
    rest its answer, labelled with the target's top-k (``config.top_k``) at every answer position:
    the target's law of that token given the text before it, at temperature 1. The layout of
    :func:`label_shards` (``prompts_per_shard`` rows a shard, ``batch_size`` a forward; with
    ``features``, a lean Llama target's final hidden states at every position, and with ``streams``
    its residual streams after those layers), so a draft trains on both alike; here the text is the
    source's, not the target's. Resumes after the last complete shard; returns the shards written in
    this call."""
    if not windows or any(len(w) != len(windows[0]) for w in windows):
        raise ValueError("windows: token lists of one length, at least one")
    if not 1 <= context < len(windows[0]):
        raise ValueError(f"context: 1 to {len(windows[0]) - 1} (the windows' length less one), got {context}")
    if streams and not features:
        raise ValueError("streams: kept with the features only (features=True)")
    size = len(windows[0])

    def label(first: int, stop: int) -> list[tuple]:
        batch = torch.tensor(windows[first:stop])  # [B, S]
        if features:
            target.keep_features(streams)
        cache = target.new_cache(len(batch))
        logits = target.forward(cache, batch, None, size - context + 1)[:, :-1]  # [B, A, V]: the laws of tokens context..S-1
        tops = [torch.topk(torch.softmax(row.double(), -1), config.top_k, -1) for row in logits]  # a row at a time: [A, V] float64
        return [(batch[b].numpy().astype(np.int32), context, top.indices.to(torch.int32).numpy(),
                 top.values.numpy().astype(np.float16), target.kept_features(cache, streams)[b, :size].clone() if features else None)
                for b, top in enumerate(tops)]

    return _write_shards(out, len(windows), config, label, features, streams, deadline, log, "source shard")


def _write_shards(out: Path, total: int, config: TeacherConfig, label, features: bool, streams: tuple[int, ...],
                  deadline: float | None, log, name: str) -> int:
    """The shards of rows 0..``total`` - 1 (whole shards of ``config.prompts_per_shard``) in ``out``,
    resumed after the last complete one, until ``deadline``: ``label(first, stop)``, called for
    ``config.batch_size`` rows at a time, gives rows first..stop - 1 as (tokens [S] int32, answer
    start, top ids [A, k] int32, top probabilities [A, k] float16, features [S, (1 + len(streams)) E]
    or None); with ``features`` they are written first (``features-NNNNN.npy`` the final states,
    ``fusion-NNNNN.npy`` the streams, named in ``fusion.json``), then ``shard-NNNNN.npz``. Returns
    the shards written."""
    out.mkdir(parents=True, exist_ok=True)
    if streams:
        write_streams_record(out, streams)  # a folder holding other streams is refused before any labelling
    per_shard, written = config.prompts_per_shard, 0
    for shard in range(len(list(out.glob("shard-*.npz"))), total // per_shard):
        if deadline is not None and time.time() > deadline:
            break
        start = time.time()
        end = (shard + 1) * per_shard
        rows = [row for first in range(shard * per_shard, end, config.batch_size)
                for row in label(first, min(first + config.batch_size, end))]
        if features:
            size = rows[0][4].shape[1] // (1 + len(streams))  # E
            _save_features(out / f"features-{shard:05d}.npy", [row[4][:, :size] for row in rows])
            if streams:
                _save_features(out / f"fusion-{shard:05d}.npy", [row[4][:, size:] for row in rows])
        _save(out / f"shard-{shard:05d}.npz", rows, config.top_k)
        written += 1
        tokens, seconds = sum(len(row[2]) for row in rows), time.time() - start
        log(f"{name} {shard}: {tokens} answer tokens in {seconds:.0f} s ({tokens / seconds:.1f} tokens/s)")
    return written


def _save_features(path: Path, rows: list[torch.Tensor]) -> None:
    """``rows`` (each [S_i, F]) right-padded with zeros to [n, max S_i, F] float16, written by
    :func:`.feature_draft.write_features`."""
    out = np.zeros((len(rows), max(len(r) for r in rows), rows[0].shape[1]), dtype=np.float16)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row.numpy()
    write_features(path, out)


def _save(path: Path, rows: list[tuple], top_k: int) -> None:
    """A shard of ``rows`` (as :func:`_write_shards` takes them), written under a hidden name and
    renamed when complete."""
    n, seq, ans = len(rows), max(len(row[0]) for row in rows), max(len(row[2]) for row in rows)
    tokens = np.full((n, seq), -1, dtype=np.int32)
    top_ids = np.zeros((n, ans, top_k), dtype=np.int32)
    top_probs = np.zeros((n, ans, top_k), dtype=np.float16)
    for i, (seq_tokens, _, ids, probs, _) in enumerate(rows):
        tokens[i, : len(seq_tokens)] = seq_tokens
        top_ids[i, : len(ids)] = ids
        top_probs[i, : len(probs)] = probs
    partial = path.parent / f".{path.name}"  # not matched by shard-*.npz until renamed
    np.savez(partial, tokens=tokens, answer_start=np.array([row[1] for row in rows]),
             answer_length=np.array([len(row[2]) for row in rows]), top_ids=top_ids, top_probs=top_probs)
    partial.rename(path)

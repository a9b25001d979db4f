"""Training a feature draft (:mod:`draftverify.models.feature_draft`) on the target's own answers.

Data: the teacher shards of :mod:`.teacher` (prompts, the target's sampled answers, the target's
top-k at every answer position) plus the target's features, its final hidden state after the final
norm at every position, ``features-NNNNN.npy`` beside ``shard-NNNNN.npz``: kept by the labelling's
own forwards (:func:`.teacher.label_shards` with ``features``), or for shards labelled without them
computed once per shard (:func:`extract_features`, a second pass over the text). A fused head
(``fusion``) also reads the target's residual streams after those layers, ``fusion-NNNNN.npy``
[n, S, n_streams E] float16, computed once per shard (:func:`extract_fusion`, a forward that stops
after the last layer it needs), the folder's ``fusion.json`` naming the layers. The labels' softmax
normalizers, ``normalizers-NNNNN.npy`` [n, A] float32, are computed once per shard from the
features (:func:`extract_normalizers`).

Loss (EAGLE, Li et al. 2024, section 4: feature regression plus the token loss): with f the
target's features, f^ the draft's (teacher-forced: position j reads f_{j-1}, a fused head g_{j-1}
(:func:`~draftverify.models.feature_draft.fused_features`), plus Gaussian noise of
``noise`` times the features' RMS, EAGLE's remedy for its own errors at later draft positions),

    w smooth_l1(f^_j, f_j)  (every position)  +  cross-entropy + total variation  (answer positions),

w the ``regression`` weight (EAGLE-3, Li et al. 2025, section 3, drops the regression, w = 0, so that
the draft's features need not be the target's; 300 steps from stage 16 held out 0.6329 with w = 0,
0.6326 with w = 1), the last two against the target's exact law at each answer position over the
draft's token subset (:func:`.draft.subset_losses`): the target's output layer applied to its stored
features, all of the vocabulary, then the subset's columns; or, with each answer position's softmax
normalizer computed once per shard (``normalizers-NNNNN.npy``, :func:`extract_normalizers`), the
subset's columns alone, the same law to float32 rounding (on stages 13-15's shards, two threads:
1.71-1.87 s a step against 2.17-2.35, the same logged losses to 5e-5; the extraction costs 2 s
a shard of 32 answers, 17 minutes for those 493 shards, paid back after about 2,200 steps). The
total variation is the exact one
(1 - acceptance); the cross-entropy merges the target's tokens past its ``bucket`` most probable into
one bucket, as the labels of earlier stages did: over all of the law (``bucket`` 0) it pulls the
draft's mass towards the target's long tail at the expense of its most probable tokens (a pilot, 325
steps from stage 15: +0.015 of acceptance past the top 32, -0.025 within it, held out). (Before
2026-11-28 both losses read the teacher's stored top-k with the rest as one bucket
(:func:`.draft.bucket_losses`), which does not say how the draft should spread that rest: 13% of the
target's mass lies past its top 32 at the answer positions of the card's held-out set, where the
shipped stage-15 draft's bucketed acceptance read 0.699 and its acceptance 0.632, 0.048 of it past
the top 32 against 0.115 bucketed.)

With ``unroll`` = P > 1, passes 2..P train the drafted positions after the first, as decoding runs
them (EAGLE-3's training-time test, Li et al. 2025, section 3.3): at drafted position p the draft
feeds token x_j with its own feature f^_{j-1} from the position before, and attends to the keys and
values of positions up to j - p + 1 computed from the target's features (pass 1) and to those of the
drafted positions between, each computed by its own pass. Pass p attends to the keys and values of
passes 1..p under :func:`draft_ahead_mask`, those of the passes before kept from their own forwards
(:func:`draft_passes`); the loss is the mean of the passes. With ``precision`` "bfloat16" the head's
layers (the fusion and the passes) run under bfloat16 autocast, weights and optimizer float32, the
labels, the output layer and the losses float32 (a [1280, 576] x [576, 8192] product: 0.38 of
float32's time on a CPU with AVX-512 BF16). After training, the pipeline fits the head's output
temperature on held-out prompts (``calibration``; :func:`.heldout.fit_temperature`). (Before
2026-11-27 pass 2 attended to its own pass at every position, harsher than decoding, where the
earlier positions hold the target's features.)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..models.feature_draft import FeatureHead
from ..models.llama import layer_counts
from .draft import load_shards, resume, save_checkpoint, set_learning_rate, subset_losses, teacher_batch

__all__ = ["CALIBRATION", "FeatureDraftConfig", "deepen", "draft_ahead_mask", "draft_passes", "extract_features",
           "extract_fusion", "extract_normalizers", "frequent_tokens", "load_feature_rows", "load_normalizers",
           "residual_streams", "train_feature_head", "with_fusion", "write_features", "write_streams_record"]


CALIBRATION = slice(64, 96)  # the held-out chat prompts a draft is calibrated on; an evaluation reads at most the first 64


@dataclass(frozen=True)
class FeatureDraftConfig:
    """The subset size and the training schedule."""

    vocab: int = 8192
    layers: int = 1
    batch_size: int = 8
    lr: float = 1e-3
    warmup: int = 50
    steps: int = 3000
    noise: float = 0.1
    regression: float = 1.0  # the feature regression's weight in the loss (0: the token losses alone, as EAGLE-3)
    bucket: int = 32  # the cross-entropy's top-k: the target's other tokens form one bucket (0: none, all of its law)
    unroll: int = 1
    seed: int = 0
    checkpoint_every: int = 25
    calibration: int = 32  # held-out chat prompts the output temperature is fitted on after training (0: none)
    fusion: tuple[int, ...] = ()  # the target's residual streams fused into the input features (EAGLE-3), by layer count
    precision: str = "float32"  # "bfloat16": the head's layers under bfloat16 autocast (weights, labels, losses float32)

    def __post_init__(self) -> None:
        if min(self.vocab, self.layers, self.batch_size, self.steps, self.checkpoint_every, self.unroll) < 1 \
                or not self.lr > 0:
            raise ValueError("vocab, layers, batch_size, steps, checkpoint_every, unroll and lr must be positive")
        if self.precision not in ("float32", "bfloat16"):
            raise ValueError(f"precision: float32 or bfloat16, got {self.precision!r}")
        if self.warmup < 0:
            raise ValueError(f"warmup: 0 steps (none) or more, got {self.warmup}")
        if not 0 <= self.regression < float("inf"):
            raise ValueError(f"regression: a finite weight >= 0, got {self.regression}")
        if not 0 <= self.bucket < self.vocab:
            raise ValueError(f"bucket: 0 (no bucket) or fewer than vocab = {self.vocab} tokens, got {self.bucket}")
        object.__setattr__(self, "fusion", layer_counts(self.fusion, name="fusion"))  # a list from JSON: a tuple
        if not 0 <= self.calibration <= CALIBRATION.stop - CALIBRATION.start:
            raise ValueError(f"calibration: 0 to {CALIBRATION.stop - CALIBRATION.start} prompts, got {self.calibration}")


@torch.no_grad()
def extract_features(model, folder: Path, log: Callable[[str], None] = print) -> int:
    """For every teacher shard in ``folder`` without one, ``features-NNNNN.npy`` [n, S, E] float16:
    the target's (a ``transformers`` Llama) final hidden states after the final norm over each
    sequence (right-padded, so causal attention keeps padding out). Returns the shards done."""
    done = 0
    for path in sorted(Path(folder).glob("shard-*.npz")):
        out = path.with_name(path.name.replace("shard-", "features-").replace(".npz", ".npy"))
        if out.exists():
            continue
        start = time.time()
        tokens = np.load(path)["tokens"].astype(np.int64)  # [n, S], -1 = padding
        hidden = model.model(input_ids=torch.from_numpy(np.maximum(tokens, 0))).last_hidden_state  # [n, S, E]
        write_features(out, hidden.half().numpy())
        done += 1
        log(f"{out.name}: {int((tokens >= 0).sum())} positions in {time.time() - start:.0f} s")
    return done


@torch.no_grad()
def extract_normalizers(model, folder: Path, log: Callable[[str], None] = print) -> int:
    """For every teacher shard in ``folder`` that has features and no normalizers,
    ``normalizers-NNNNN.npy`` [n, A] float32: at each answer position (row i's first ``A_i``
    entries; zero past them) the log of the target's softmax denominator, log sum_x exp z_x, z the
    target's output layer (``model``'s) applied to the stored float16 features at the positions
    :func:`.draft.teacher_batch` gives training. With it the target's probability of a token x is
    exp(z_x - normalizer), so the labels need the logits of the draft's subset alone
    (:func:`target_laws`): a sixth of the output layer's product for a subset of 8,192 of 49,152
    tokens. Returns the shards done."""
    output, done = model.get_output_embeddings(), 0
    for path in sorted(Path(folder).glob("features-*.npy")):
        out = _beside(path, "normalizers-", ".npy")
        if out.exists():
            continue
        start = time.time()
        rows = load_shards(path.parent, pattern=_beside(path, "shard-", ".npz").name)
        _, where, _, _ = teacher_batch(rows, list(range(len(rows))))  # [N, 2]: (row, position) of each answer token
        features = torch.from_numpy(np.load(path, mmap_mode="r")[where[:, 0].numpy(), where[:, 1].numpy()].astype(np.float32))
        lengths = torch.tensor([len(ids) for _, _, ids, _ in rows])  # [n]
        normalizers = torch.zeros(len(rows), int(lengths.max()))  # [n, A]
        normalizers[torch.arange(normalizers.shape[1])[None] < lengths[:, None]] = torch.cat(
            [torch.logsumexp(output(chunk).float(), -1) for chunk in features.split(4096)])
        write_features(out, normalizers.numpy())
        done += 1
        log(f"{out.name}: {len(features)} answer positions in {time.time() - start:.0f} s")
    return done


def load_normalizers(folder: Path) -> list[np.ndarray]:
    """The normalizers of :func:`extract_normalizers`, one array [A] per row of
    :func:`load_feature_rows` on ``folder`` (the same order); ``FileNotFoundError`` for a shard
    with features and without them or, as :func:`load_feature_rows`, a folder without such shards,
    ``ValueError`` for a table not of its shard's shape (the shard labelled again since: delete the
    file to extract it anew)."""
    normalizers = []
    for path in sorted(Path(folder).glob("features-*.npy")):
        stored = _beside(path, "normalizers-", ".npy")
        if not stored.exists():
            raise FileNotFoundError(f"{stored}: a shard without its normalizers (run extract_normalizers)")
        with np.load(_beside(path, "shard-", ".npz")) as shard:
            lengths = shard["answer_length"].tolist()
        table = np.load(stored)
        if table.shape != (len(lengths), max(lengths)):
            raise ValueError(f"{stored}: normalizers [{table.shape}] for a shard of {len(lengths)} answers of at most "
                             f"{max(lengths)} tokens; delete it to extract them anew")
        normalizers.extend(table[i, :length] for i, length in enumerate(lengths))
    if not normalizers:
        raise FileNotFoundError(f"{folder}: no teacher shards with features (run extract_features first)")
    return normalizers


def _beside(features: Path, prefix: str, suffix: str) -> Path:
    """The file of ``features-NNNNN.npy``'s shard with another ``prefix`` and ``suffix``
    (``shard-NNNNN.npz``, ``fusion-NNNNN.npy``, ``normalizers-NNNNN.npy``)."""
    return features.with_name(prefix + features.name.removeprefix("features-").removesuffix(".npy") + suffix)


@torch.no_grad()
def residual_streams(model, tokens: torch.Tensor, streams: tuple[int, ...]) -> torch.Tensor:
    """The residual streams of the target (a ``transformers`` Llama) after its first n decoder
    layers for each n of ``streams``, over ``tokens`` [B, S]: [B, S, len(streams) E]. The forward
    stops after the last layer it needs (a stream after layer 15 of 30 costs half a forward)."""
    layers, kept = model.model.layers, {}
    if not layer_counts(streams, len(layers)):
        raise ValueError("streams: at least one layer count")
    hooks = [layers[n - 1].register_forward_hook(
        lambda module, args, out, n=n: kept.__setitem__(n, out[0] if isinstance(out, tuple) else out)) for n in streams]
    try:
        model.model.layers = layers[: max(streams)]
        model.model(input_ids=tokens, use_cache=False)
    finally:
        model.model.layers = layers
        for hook in hooks:
            hook.remove()
    return torch.cat([kept[n] for n in streams], -1)


def extract_fusion(model, folder: Path, streams: tuple[int, ...], log: Callable[[str], None] = print) -> int:
    """For every teacher shard in ``folder`` without one, ``fusion-NNNNN.npy`` [n, S, len(streams) E]
    float16: the target's residual streams over each sequence (:func:`residual_streams`), what a
    fused feature draft reads beside the final features. The folder's ``fusion.json`` records
    ``streams``; ``ValueError`` if it records others. Returns the shards done."""
    folder = Path(folder)
    write_streams_record(folder, streams)
    done = 0
    for path in sorted(folder.glob("shard-*.npz")):
        out = path.with_name(path.name.replace("shard-", "fusion-").replace(".npz", ".npy"))
        if out.exists():
            continue
        start = time.time()
        tokens = np.load(path)["tokens"].astype(np.int64)  # [n, S], -1 = padding (right: causal attention keeps it out)
        write_features(out, residual_streams(model, torch.from_numpy(np.maximum(tokens, 0)), streams).half().numpy())
        done += 1
        log(f"{out.name}: {int((tokens >= 0).sum())} positions in {time.time() - start:.0f} s")
    return done


def write_streams_record(folder: Path, streams: tuple[int, ...]) -> None:
    """Record in ``folder``'s ``fusion.json`` that its ``fusion-NNNNN.npy`` files hold the residual
    streams after the layers of ``streams``; ``ValueError`` if it records others (one folder, one
    layout: :func:`load_feature_rows` reads them by that record)."""
    record = Path(folder) / "fusion.json"
    if record.exists():
        held = json.loads(record.read_text())["streams"]
        if tuple(held) != tuple(streams):
            raise ValueError(f"streams: {folder} holds the streams after layers {held}, not {list(streams)}")
        return
    record.write_text(json.dumps({"streams": list(streams)}) + "\n")


def write_features(path: Path, features: np.ndarray) -> None:
    """Write a shard's array to ``path`` (its features [n, S, E] float16 to ``features-NNNNN.npy``, its
    streams, its normalizers) under a hidden name first, renamed when complete: a reader never sees a
    partial file."""
    partial = path.with_name("." + path.name)
    with open(partial, "wb") as handle:
        np.save(handle, features)
    partial.rename(path)


def load_feature_rows(folder: Path, fusion: tuple[int, ...] = ()) -> list[tuple]:
    """Every answered prompt of the shards in ``folder`` that have features: (tokens, answer start,
    top ids [A, k], top probabilities [A, k], features [S, E] float16), and with ``fusion`` the
    residual streams after those layers [S, n E] float16 (:func:`extract_fusion`; read from disk
    when a batch needs them). ``FileNotFoundError`` for a shard without them, ``ValueError`` for a
    folder holding other streams."""
    folder, rows = Path(folder), []
    if fusion:
        record = folder / "fusion.json"
        held = tuple(json.loads(record.read_text())["streams"]) if record.exists() else None
        if held != tuple(fusion):
            raise ValueError(f"fusion: {folder} holds the streams after layers {held}, not {tuple(fusion)} "
                             "(run extract_fusion)")
    for path in sorted(folder.glob("features-*.npy")):
        shard = load_shards(path.parent, pattern=_beside(path, "shard-", ".npz").name)
        features = np.load(path, mmap_mode="r")
        streams = None
        if fusion:
            streams_path = _beside(path, "fusion-", ".npy")
            if not streams_path.exists():
                raise FileNotFoundError(f"{streams_path}: a shard without its streams (run extract_fusion)")
            streams = np.load(streams_path, mmap_mode="r")
        rows.extend((seq, start, ids, probs, np.asarray(features[i, : len(seq)]),
                     *(() if streams is None else (streams[i, : len(seq)],)))
                    for i, (seq, start, ids, probs) in enumerate(shard))
    if not rows:
        raise FileNotFoundError(f"{folder}: no teacher shards with features (run extract_features first)")
    return rows


def frequent_tokens(rows, size: int, vocab_size: int) -> torch.Tensor:
    """The ``size`` token ids (of ``vocab_size``) most frequent among the teacher's answers (ties by
    id), sorted: [N]."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"vocab: the subset must have 1 to {vocab_size} tokens (the target's vocabulary), got {size}")
    counts = np.zeros(vocab_size, dtype=np.int64)
    for seq, start, *_ in rows:
        np.add.at(counts, seq[start:].astype(np.int64), 1)
    order = np.argsort(-counts, kind="stable")[:size]
    return torch.from_numpy(np.sort(order))


def draft_ahead_mask(size: int, passes: int) -> torch.Tensor:
    """Which keys each query attends to when ``passes`` passes over ``size`` positions run side by
    side (pass q, 0-based, position j at index q * size + j): [passes size, passes size] bool.

    Query (q, j) is position j drafted q positions after j - q, the last one that read the
    target's feature: it sees pass 0's keys at k <= j - q (computed from the target's features) and
    pass r's key at j - (q - r) for 1 <= r <= q (the drafted positions between, each from its own
    pass), as the draft's cache holds them when decoding (EAGLE-3's training-time test, Li et al.
    2025, section 3.3; module doc). Pass 0 is causal."""
    if size < 1 or passes < 1:
        raise ValueError(f"size and passes must be at least 1, got size={size}, passes={passes}")
    j = torch.arange(size)[:, None]  # query position
    k = torch.arange(size)[None, :]  # key position
    rows = []
    for q in range(passes):
        rows.append(torch.cat([k <= j - q if r == 0 else (k == j - (q - r)) & (r <= q) for r in range(passes)], 1))
    return torch.cat(rows, 0)


def draft_passes(head: FeatureHead, embedded: torch.Tensor, previous: torch.Tensor, passes: int) -> list[torch.Tensor]:
    """The features f^ [B, S, E] of each of ``passes`` passes (module doc): pass 1 reads
    ``previous`` (f_{j-1} at position j), pass q + 1 reads pass q's features of the position before
    (detached) and attends to the keys and values of passes 1..q + 1 under :func:`draft_ahead_mask`,
    so its position j is the draft's at j drafted q positions ahead. The passes before keep their
    keys and values in a cache, their graph with them: no query of an earlier pass sees a later
    pass's key, so a pass computes its own positions only (S queries, not (q + 1) S)."""
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    from transformers import DynamicCache

    size, cache, out = embedded.shape[1], DynamicCache(), []
    mask, positions, features = draft_ahead_mask(size, passes), torch.arange(size)[None], previous
    for q in range(passes):
        seen = None if q == 0 else mask[q * size:(q + 1) * size, :(q + 1) * size][None, None]  # pass 1: causal
        predicted = head(embedded, features, positions, seen, cache)  # [B, S, E]
        out.append(predicted)
        features = F.pad(predicted[:, :-1].detach(), (0, 0, 1, 0))
    return out


def new_head(target, rows, config: FeatureDraftConfig) -> FeatureHead:
    """A feature head for ``target`` (a ``transformers`` Llama) over the teacher's most frequent
    tokens; output layer and final norm start as the target's (its rows of the subset), so f^ lives
    where the target's features do."""
    torch.manual_seed(config.seed)
    head = FeatureHead(target.config, frequent_tokens(rows, config.vocab, target.config.vocab_size), config.layers,
                       config.fusion)
    with torch.no_grad():
        head.head.weight.copy_(target.lm_head.weight[head.vocab])
        head.norm.weight.copy_(target.model.norm.weight)
    return head


def deepen(head: FeatureHead, layers: int, seed: int = 0) -> FeatureHead:
    """``head`` with decoder layers added after its own up to ``layers``, each new one starting as
    the identity (its attention's output and its MLP's down projections zero, so the residual stream
    passes through; the other weights drawn under ``seed``): the deeper head drafts as ``head`` does
    until it is trained further; ``head`` itself where it has ``layers`` already (no copy, the random
    state untouched). ``ValueError`` if ``head`` has more layers already."""
    if layers < len(head.layers):
        raise ValueError(f"layers: the head has {len(head.layers)} decoder layers already, more than {layers}")
    if layers == len(head.layers):
        return head
    torch.manual_seed(seed)
    deeper = FeatureHead(head.config, head.vocab, layers, head.fusion)
    deeper.load_state_dict(head.state_dict(), strict=False)  # the new layers' weights are the missing keys
    with torch.no_grad():
        for layer in deeper.layers[len(head.layers):]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return deeper


def with_fusion(head: FeatureHead, fusion: tuple[int, ...]) -> FeatureHead:
    """``head`` reading the target's residual streams after the layers of ``fusion`` as well, its
    ``fuse`` zero (:func:`~draftverify.models.feature_draft.fused_features`): it drafts as ``head``
    does until trained further; ``head`` itself where it fuses those streams already. ``ValueError``
    if it fuses others."""
    fusion = tuple(fusion)
    if head.fusion == fusion:
        return head
    if head.fusion:
        raise ValueError(f"fusion: the head fuses the streams after layers {head.fusion} already, not {fusion}")
    fused = FeatureHead(head.config, head.vocab, len(head.layers), fusion)
    fused.load_state_dict(head.state_dict(), strict=False)  # fuse.weight is the missing key, zero
    return fused


def _batch(rows, indices, embedding: torch.Tensor):
    """Embedded tokens [B, S, E], what the target keeps [B, S, (1 + n) E] (its features, then the
    n residual streams of rows that have them), valid positions [B, S] and the answer positions
    (b, j) [N, 2]."""
    tokens, where, _, _ = teacher_batch(rows, indices)  # [B, S], [N, 2]
    lengths = torch.tensor([len(rows[i][0]) for i in indices])
    valid = torch.arange(tokens.shape[1])[None] < lengths[:, None]  # [B, S]
    kept = torch.zeros(*tokens.shape, sum(array.shape[1] for array in rows[indices[0]][4:]))
    for b, i in enumerate(indices):
        kept[b, : lengths[b]] = torch.from_numpy(np.concatenate(rows[i][4:], -1).astype(np.float32))
    return embedding[tokens], kept, valid, where


@torch.no_grad()
def target_laws(output: torch.nn.Module, features: torch.Tensor, vocab: torch.Tensor,
                normalizers: torch.Tensor | None = None) -> torch.Tensor:
    """The target's probabilities of the ``vocab`` tokens [N, n] from its features [N, E] (final
    hidden states after the final norm) through its output layer ``output``: softmax over the whole
    vocabulary, then the subset's columns (they sum to the target's mass on the subset). With the
    features' ``normalizers`` [N] (:func:`extract_normalizers`), exp(z_x - normalizer) from the
    subset's logits z alone: the same law to float32 rounding."""
    if normalizers is None:
        return torch.softmax(output(features).float(), -1)[:, vocab]
    bias = None if output.bias is None else output.bias[vocab]
    return torch.exp(F.linear(features, output.weight[vocab], bias).float() - normalizers[:, None])


def train_feature_head(head: FeatureHead, target, rows, config: FeatureDraftConfig, workdir: Path,
                       log: Callable[[str], None] = print, deadline: float | None = None,
                       normalizers: list[np.ndarray] | None = None) -> dict:
    """Train ``head`` on ``rows`` (:func:`load_feature_rows`), resuming from ``workdir/checkpoint.pt``;
    stops after ``config.steps`` or at ``deadline``. ``normalizers``, one array per row
    (:func:`load_normalizers`): the labels from the subset's logits alone (:func:`target_laws`);
    ``ValueError`` if their number or lengths do not match the rows' answers. Returns the last
    logged figures."""
    if normalizers is not None and (len(normalizers) != len(rows) or
                                    any(len(n) != len(row[2]) for n, row in zip(normalizers, rows))):
        raise ValueError("normalizers: one per row, as long as its answer (load_normalizers on the rows' folders)")
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = workdir / "checkpoint.pt"
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=0.0, betas=(0.9, 0.95))
    step = resume(checkpoint, head, optimizer, log)
    embedding = target.get_input_embeddings().weight.detach().float()  # [V, E]
    output = target.get_output_embeddings()  # the target's output layer: its law from its features
    scale = float(np.sqrt(np.mean([np.mean(np.square(r[4][:64].astype(np.float32))) for r in rows[:64]])))
    width = embedding.shape[1]
    if len(rows[0]) - 5 != (1 if head.fusion else 0):
        raise ValueError(f"rows: the head fuses the streams after layers {head.fusion}; load the rows with them "
                         "(load_feature_rows(folder, fusion))" if head.fusion else
                         "rows: they carry residual streams the head does not read")
    head.train()
    figures: dict = {"step": step}  # a run resumed at its last step trains no more
    began = time.time()
    while step < config.steps and (deadline is None or time.time() < deadline):
        draw = config.seed * 100_003 + step  # the step's batch and noise are drawn by step: a resumed run draws alike
        order = np.random.default_rng(draw).choice(len(rows), config.batch_size, replace=False)
        embedded, kept, valid, where = _batch(rows, order.tolist(), embedding)
        set_learning_rate(optimizer, config.lr, step, config.warmup, config.steps)
        features = kept[..., :width]  # [B, S, E]: the target's final features, what f^ regresses to
        lse = None if normalizers is None else torch.from_numpy(np.concatenate([normalizers[i] for i in order]))  # [N]
        target_probs = target_laws(output, features[where[:, 0], where[:, 1]], head.vocab, lse)  # [N, N_vocab]
        with torch.autocast("cpu", torch.bfloat16, enabled=config.precision == "bfloat16"):
            previous = F.pad(head.fused(kept)[:, :-1], (0, 0, 1, 0))  # [B, S, E]: g_{j-1} (f_{j-1} unfused), g_{-1} = 0
            noise = torch.randn(previous.shape, generator=torch.Generator().manual_seed(draw))
            previous = previous + config.noise * scale * noise.to(previous.dtype)
            passes = [predicted.float() for predicted in draft_passes(head, embedded, previous, config.unroll)]
        regression = cross_entropy = variation = 0.0
        for predicted in passes:  # [B, S, E] each
            losses = subset_losses(head.head(predicted[where[:, 0], where[:, 1]]), target_probs, config.bucket)
            regression = regression + F.smooth_l1_loss(predicted[valid], features[valid]) / config.unroll
            cross_entropy, variation = cross_entropy + losses[0] / config.unroll, variation + losses[1] / config.unroll
        optimizer.zero_grad(set_to_none=True)  # this step's gradient alone (stages 7-19 ran without this line)
        (config.regression * regression + cross_entropy + variation).backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        step += 1
        figures = {"step": step, "regression": regression.item(), "cross_entropy": cross_entropy.item(),
                   "acceptance": 1 - variation.item(), "seconds": round(time.time() - began)}
        if step % 5 == 0:
            log(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
        if step % config.checkpoint_every == 0:
            save_checkpoint(checkpoint, head, optimizer, step, config)
    save_checkpoint(checkpoint, head, optimizer, step, config)
    head.eval()
    return figures

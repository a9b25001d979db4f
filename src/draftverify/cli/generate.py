"""`draftverify generate "prompt"`: stream a completion (or decode n samples of the prompt as one
batch), then a footer with acceptance and speed."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Annotated

import typer

from ._command import above, quiet_transformers
from ._options import DraftLength, MaxLength, MinLength, OptionItems, Quantize, Seed, TargetFolder, draft_length_from_args, method_from_args

__all__ = ["generate"]


def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text.")],
    method: Annotated[str, typer.Option(help="'ar' or a verifier (see `draftverify list`), e.g. bv, "
                                        "ot(solver=gr,tol=1e-4), kseq(K=4).")] = "bv",
    num_drafts: Annotated[int | None, typer.Option(min=1, help="K, the number of i.i.d. drafts.", show_default="1")] = None,
    draft_length: DraftLength = None,
    min_draft_length: MinLength = None,
    max_draft_length: MaxLength = None,
    option: OptionItems = [],
    temperature: Annotated[float | None, typer.Option(
        min=0.0, help="Sampling temperature of draft and target; 0 decodes the argmax.",
        show_default="1.0; 0 with --method greedy")] = None,
    top_k: Annotated[int | None, typer.Option(min=1, help="Keep the k most likely tokens.", show_default="all")] = None,
    top_p: Annotated[float | None, typer.Option(
        max=1.0, callback=above(0.0), help="Keep the smallest set of tokens of mass >= p (0 < p <= 1).",
        show_default="1")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens to generate at most.")] = 64,
    stop: Annotated[list[str], typer.Option(metavar="TEXT", show_default="none", help=(
        "A stop string (repeatable); the text ends with the token that completes it, as in transformers."))] = [],
    seed: Seed = 0,
    target: TargetFolder = None,
    draft: Annotated[str | None, typer.Option(help="Draft folder (a transformers model, a feature draft or an "
                                              "n-gram drafter), or 'ngram': the named pair's own n-gram drafter.", show_default="the named target's own draft")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Tokenizer folder, e.g. the tokenizer/ of a train-pair "
                                                  "output.", show_default="the target's folder")] = None,
    chat: Annotated[bool | None, typer.Option("--chat/--no-chat", help="Send the prompt as a user message in the "
                                              "tokenizer's chat template.", show_default="on when the tokenizer has one")] = None,
    quantize: Quantize = None,
    samples: Annotated[int, typer.Option(min=1, help="Independent samples of the prompt, decoded as one batch "
                                         "(the prompt's forward computed once) and printed when all are done.")] = 1,
    compare_ar: Annotated[bool, typer.Option("--compare-ar", help="Also time plain target sampling and "
                                             "report the speedup.")] = False,
) -> int:
    """Generate text with draft-then-verify decoding (default: SmolLM2-135M-Instruct and its draft)."""
    if not prompt.strip():
        raise ValueError("the prompt is empty")
    draft_length = _default_length(method) if draft_length is None else draft_length
    length = draft_length_from_args(draft_length, min_draft_length, max_draft_length)  # L, a policy or None
    policy = None if length is None or isinstance(length, int) else length
    method_spec = method_from_args(method, [("--option", item) for item in option], num_drafts=num_drafts,
                                   draft_length=None if policy else length, draft=draft)
    if policy is not None and method_spec.draft_length is not None:
        raise ValueError(f"method {method!r} sets L={method_spec.draft_length} but --draft-length {draft_length} was given: "
                         "give it once")
    quiet_transformers()
    from ..engine import AR, DecodeConfig, Decoder, GenerationResult
    from ..engine.generate import generate as generate_with, generate_batch
    from ..models.chat import encode_prompt, has_chat_template
    from ..models.pair import load_pair

    settings = dict(top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens, stop=tuple(stop), seed=seed)
    # the method parsed once, above (with --num-drafts, --draft-length, --draft); bad options fail before loading
    config = DecodeConfig(dataclasses.replace(method_spec, draft=None), draft_length=policy, temperature=temperature,
                          **settings)
    pair = load_pair(target, method_spec.draft, tokenizer=tokenizer, quantize=quantize)
    chat = has_chat_template(pair.tokenizer) if chat is None else chat  # decided once: encoding and echo agree
    prompt_ids = encode_prompt(pair.tokenizer, prompt, chat)
    if not prompt_ids:
        raise ValueError("the prompt encodes to no tokens")
    draft_model = pair.draft if config.speculative else None
    # validates the prompt, the vocabularies, the stop strings and the context up front
    decoder = Decoder(pair.target, draft_model, [prompt_ids] * samples, config, tokenizer=pair.tokenizer)
    # warm-up of both models (one-time allocations and weight packing), not timed: tokens/s counts decoding only
    generate_with(pair.target, draft_model, prompt_ids, "sd" if draft_model else AR, max_new_tokens=2,
                  **({"draft_length": 2} if draft_model else {}))

    sys.stdout.write(prompt + ("\n\n" if chat else ""))
    sys.stdout.flush()
    start, shown, steps = time.perf_counter(), "", []
    while not decoder.done:
        steps.extend(row.stats for row in decoder.step())
        if samples == 1:  # one sample streams as it is decoded
            text = pair.tokenizer.decode(decoder.generated(0), skip_special_tokens=True)
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text
    seconds = time.perf_counter() - start
    if samples > 1:
        for i in range(samples):
            text = pair.tokenizer.decode(decoder.generated(i), skip_special_tokens=True)
            sys.stdout.write(f"# --- sample {i + 1} ---\n{text}\n")
    num_tokens = sum(len(decoder.generated(i)) for i in range(samples))
    target_calls = sum(s.target_calls for s in steps)  # every sample's steps: tokens per call are a sample's
    footer = [f"method {config.name}", f"{num_tokens} tokens" + (f" in {samples} samples" if samples > 1 else ""),
              f"{num_tokens / seconds:.1f} tokens/s", f"{num_tokens / max(target_calls, 1):.2f} tokens/target call"]
    if config.speculative:
        result = GenerationResult(prompt_ids, decoder.generated(0), None, "length", config.name, config.drafts,
                                  config.length, steps, seconds)  # the acceptance pooled over the samples' steps
        lengths = [s.draft_length for s in steps if s.draft_length is not None]
        length = f"L={config.length}" if config.length_policy is None else f"L={draft_length} {min(lengths)}..{max(lengths)}"
        drafted = result.position_acceptance[:max(lengths, default=config.length)]  # positions drafted (gated: up to L)
        footer.insert(1, f"acceptance {result.acceptance_rate or 0.0:.2f} (K={config.drafts}, {length}; per position "
                         f"{' '.join(f'{a:.2f}' for a in drafted)})")
    if compare_ar:
        ar = generate_batch(pair.target, None, [prompt_ids] * samples, AR, tokenizer=pair.tokenizer,
                            temperature=config.temperature, **settings)
        ar_speed = sum(len(r.tokens) for r in ar) / ar[0].seconds  # a result's seconds are its batch's
        footer.append(f"ar {ar_speed:.1f} tokens/s -> speedup {num_tokens / seconds / ar_speed:.2f}x")
    print("\n\n-- " + " | ".join(footer))
    return 0


def _default_length(method: str) -> str | None:
    """``--draft-length`` unset: auto for a verifier with parallel drafts whose method does not
    write L (each step's L from the decoding's past; on the default pair's GGUF blocks bv at a
    fixed L = 4 ran at 0.79x ``ar``, with auto at 1.02x: docs/results/speed_smollm2.md), else None."""
    from ..engine.config import AR
    from ..engine.draft_length import AUTO
    from ..verify import get_verifier, parse_method

    spec = parse_method(method)
    if spec.name == AR or spec.draft_length is not None or get_verifier(spec.name).strategy != "parallel":
        return None
    return AUTO

"""Options several commands share, and the method of a command line: ``--method`` in the grammar
of :mod:`draftverify.verify.spec`, plus repeatable ``--option KEY=VALUE`` typed by the same parser."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from ..engine.config import GREEDY  # the verifier of temperature-0 decoding (draftverify.verify.token.GreedyMatch)
from ..models.gpt2 import QUANTIZE
from ..verify import MethodSpec, parse_method, typed_options

__all__ = ["GREEDY", "DraftFolder", "DraftLength", "JsonFile", "MaxLength", "MinLength", "OptionItems", "Quantize", "Seed", "TargetFolder",
           "draft_length_from_args", "method_from_args"]


Seed = Annotated[int, typer.Option(min=0, max=2**64 - 1, help="Random seed, an int in [0, 2**64 - 1].")]
OptionItems = Annotated[list[str], typer.Option(
    metavar="KEY=VALUE", show_default=False,
    help="A verifier option, as inside the method's parentheses, e.g. --option fraction=0.5 (repeatable).")]
TargetFolder = Annotated[str | None, typer.Option(help="Target: 'smollm2' (the default pair), 'tiny' (the embedded 7M pair), a .gguf file or a local transformers folder.", show_default="smollm2")]
def _weight_format(value: str | None) -> str | None:
    if value not in (None, *QUANTIZE):
        raise typer.BadParameter(f"must be one of {', '.join(QUANTIZE)}, got {value}")
    return value


Quantize = Annotated[str | None, typer.Option(
    metavar="|".join(QUANTIZE), callback=_weight_format, help="The target's weights: float32; int8, weight-only int8 (per output channel, "
    "quantized once at load; a quarter of the bytes per call; the target's law is then the int8 model's); gguf, a target converted from a "
    "GGUF file streamed as the GGML blocks its weights came from (Q4_1/Q8_0, AVX-512; the same model, bit-identical products, 5 bits a "
    "weight); gguf-q8, those blocks times activations rounded to 8 bits per block of 32 as llama.cpp computes them (a model of its own; "
    "AVX-512 VNNI or AVX2, else slow).", show_default="gguf for a GGUF target on an AVX-512 CPU, else float32")]
DraftFolder = Annotated[str | None, typer.Option(help="Transformer draft model folder.", show_default="the named target's own draft")]
JsonFile = Annotated[str | None, typer.Option(metavar="FILE", help="Also write the JSON to this file.", show_default="none")]
DraftLength = Annotated[str | None, typer.Option(
    metavar="L|auto|heuristic", help="L, tokens per draft; auto: each step's L chosen from the decoding's past "
    "(predicted tokens/s; L = 0, a step of the target alone, where drafting does not pay); heuristic: transformers' schedule (+2 after a fully accepted draft, -1 otherwise).",
    show_default="auto, unless the method writes L")]
MinLength = Annotated[int | None, typer.Option(min=0, help="The least L auto and heuristic choose; 0: auto may take "
                                                "steps of the target alone (heuristic needs >= 1).", show_default="0 for auto, 1 for heuristic")]
MaxLength = Annotated[int | None, typer.Option(min=1, help="The largest L auto and heuristic choose.", show_default="8")]


def draft_length_from_args(text: str | None, min_length: int | None, max_length: int | None):
    """``--draft-length`` as an int or a draft-length policy with its bounds (only a policy takes them)."""
    from ..engine.draft_length import draft_length_policy

    if text is None or text.isdigit():
        given = [f for f, v in (("--min-draft-length", min_length), ("--max-draft-length", max_length)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} bound --draft-length auto or heuristic, not --draft-length {text or 'unset'}")
        if text is not None and int(text) < 1:
            raise ValueError(f"--draft-length must be >= 1, got {text}")
        return None if text is None else int(text)
    bounds = {k: v for k, v in (("min_length", min_length), ("max_length", max_length)) if v is not None}
    return draft_length_policy(text, **bounds)


def method_from_args(
    method: str,
    option_items: list[tuple[str, str]],
    *,
    num_drafts: int | None = None,
    draft_length: int | None = None,
    draft: str | None = None,
) -> MethodSpec:
    """``--method`` with its option flags and the decoding flags as one :class:`MethodSpec`.

    ``option_items`` are ``(flag, "KEY=VALUE")`` pairs (``("--option", "fraction=0.5")``). A
    setting written both in the method and by a flag must agree, else a ``ValueError`` names both:
    an option in the parentheses and an option flag, K and ``--num-drafts``, L and
    ``--draft-length``, ``@draft`` and ``--draft``; so must an option given by two flags.
    """
    spec = parse_method(method)
    options, given_by = dict(spec.options), {key: repr(method) for key in spec.options}
    for flag, item in option_items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise ValueError(f"option {item!r} is not KEY=VALUE")
        typed = typed_options(spec.name, [(key, value)])[key]
        if key in options and options[key] != typed:
            raise ValueError(f"{given_by[key]} sets {key}={options[key]} but {flag} sets {key}={value}: give it once")
        options[key], given_by[key] = typed, flag
    settings = {}
    for attr, flag, key, given in (("num_drafts", "--num-drafts", "K", num_drafts),
                                   ("draft_length", "--draft-length", "L", draft_length), ("draft", "--draft", "@", draft)):
        written = getattr(spec, attr)
        if written is not None and given is not None and written != given:
            shown = f"@{written}" if key == "@" else f"{key}={written}"
            raise ValueError(f"method {method!r} sets {shown} but {flag} {given} was given: give it once")
        settings[attr] = written if written is not None else given
    return dataclasses.replace(spec, options=options, **settings)

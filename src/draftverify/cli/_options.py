"""Options several commands share, and the method of a command line: ``--method`` in the grammar
of :mod:`draftverify.verify.spec`, plus repeatable ``--option KEY=VALUE`` typed by the same parser."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from ..verify import MethodSpec, parse_method, typed_options
from ..verify.base import _REGISTRY, _ensure_loaded

__all__ = ["GREEDY", "DraftFolder", "DraftLength", "JsonFile", "LengthBound", "OptionItems", "Seed", "TargetFolder",
           "draft_length_from_args", "method_from_args"]

GREEDY = "greedy"  # the verifier of temperature-0 decoding (draftverify.verify.token.GreedyMatch)

Seed = Annotated[int, typer.Option(help="Random seed.")]
OptionItems = Annotated[list[str], typer.Option(
    metavar="KEY=VALUE", show_default=False,
    help="A verifier option, as inside the method's parentheses, e.g. --option fraction=0.5 (repeatable).")]
TargetFolder = Annotated[str | None, typer.Option(help="Target model folder.", show_default="the embedded pair")]
DraftFolder = Annotated[str | None, typer.Option(help="Transformer draft model folder.", show_default="the embedded pair")]
JsonFile = Annotated[str | None, typer.Option(metavar="FILE", help="Also write the JSON to this file.", show_default="none")]
DraftLength = Annotated[str | None, typer.Option(
    metavar="L|auto|heuristic", help="L, tokens per draft; auto: each step's L chosen from the decoding's past "
    "(predicted tokens/s); heuristic: transformers' schedule (+2 after a fully accepted draft, -1 otherwise).",
    show_default="4")]
LengthBound = Annotated[int | None, typer.Option(min=1, help="A bound on L for auto and heuristic.", show_default="1 and 8")]


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


def method_from_args(method: str, option_items: list[str]) -> MethodSpec:
    """``--method`` and its ``--option KEY=VALUE`` items as one :class:`MethodSpec`.

    A verifier that takes a ``classifier`` (SPRINTER) gets the one named by its option loaded by
    :func:`draftverify.approx.load_classifier` (the embedded pair's when none is given).
    """
    spec = parse_method(method)
    pairs = []
    for item in option_items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"option {item!r} is not KEY=VALUE")
        pairs.append((key.strip(), value.strip()))
    options = {**spec.options, **typed_options(spec.name, pairs)}
    _ensure_loaded()
    cls = _REGISTRY.get(spec.name)
    if cls is not None and "classifier" in {f.name for f in dataclasses.fields(cls)}:
        from ..approx.load import load_classifier

        options["classifier"] = load_classifier(options.get("classifier"))
    return dataclasses.replace(spec, options=options)

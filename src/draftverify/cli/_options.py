"""Options several commands share, and the method of a command line: ``--method`` in the grammar
of :mod:`draftverify.verify.spec`, plus repeatable ``--option KEY=VALUE`` typed by the same parser."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from ..verify import MethodSpec, parse_method, typed_options
from ..verify.base import _REGISTRY, _ensure_loaded

__all__ = ["GREEDY", "DraftFolder", "JsonFile", "OptionItems", "Seed", "TargetFolder", "method_from_args"]

GREEDY = "greedy"  # the verifier of temperature-0 decoding (draftverify.verify.token.GreedyMatch)

Seed = Annotated[int, typer.Option(min=0, max=2**64 - 1, help="Random seed, an int in [0, 2**64 - 1].")]
OptionItems = Annotated[list[str], typer.Option(
    metavar="KEY=VALUE", show_default=False,
    help="A verifier option, as inside the method's parentheses, e.g. --option fraction=0.5 (repeatable).")]
TargetFolder = Annotated[str | None, typer.Option(help="Target model folder.", show_default="the embedded pair")]
DraftFolder = Annotated[str | None, typer.Option(help="Transformer draft model folder.", show_default="the embedded pair")]
JsonFile = Annotated[str | None, typer.Option(metavar="FILE", help="Also write the JSON to this file.", show_default="none")]


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

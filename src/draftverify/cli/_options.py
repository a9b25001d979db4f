"""Parsing of repeatable ``KEY=VALUE`` verifier options on the command line."""

from __future__ import annotations

import ast


def parse_options(items: list[str]) -> dict[str, object]:
    """``["fraction=0.5", "solver=lp"]`` -> ``{"fraction": 0.5, "solver": "lp"}`` (Python literals
    where they parse, strings otherwise)."""
    options: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"option {item!r} is not KEY=VALUE")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options

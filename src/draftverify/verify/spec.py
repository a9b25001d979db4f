"""The one way to write a decoding method: ``name``, ``name(key=value, ...)``, ``...@draft``.

Examples: ``bv``, ``ot(solver=gr,tol=1e-4)``, ``kseq(K=4)@ngram``, ``submaximal(fraction=0.25)``.
Inside the parentheses every key is an option of the verifier (a field of its dataclass) or one of
the two decoding settings ``K`` (number of i.i.d. drafts) and ``L`` (draft length); ``@draft``
names the draft model a command should use. Values are typed by the verifier's field annotations
(``bool``: true/false, ``int``, ``float``, ``str``, ``X | None``: also ``none``), so a bad value
is an error naming the option and the type it expects. Every command and the Python API
(:func:`draftverify.get_verifier`, ``draftverify.generate``) read methods through
:func:`parse_method`.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from .base import _REGISTRY, _ensure_loaded

__all__ = ["MethodSpec", "check_option_values", "parse_method", "typed_options"]

SETTINGS = {"K": "num_drafts", "L": "draft_length"}  # decoding settings written beside the options
_SPEC = re.compile(r"^\s*(?P<name>[A-Za-z][\w\-]*)\s*(?:\((?P<options>[^()]*)\))?\s*(?:@\s*(?P<draft>[\w\-./]+))?\s*$")


@dataclass(frozen=True)
class MethodSpec:
    """A parsed method: verifier ``name`` (or ``ar``), its typed ``options``, the decoding
    settings ``num_drafts`` (K) and ``draft_length`` (L) when written, and the ``draft`` named
    after ``@``. ``str(spec)`` writes it back in the grammar."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    num_drafts: int | None = None
    draft_length: int | None = None
    draft: str | None = None

    def __str__(self) -> str:
        items = [f"{k}={_show(v)}" for k, v in self.options.items()]
        items += [f"{key}={getattr(self, attr)}" for key, attr in SETTINGS.items() if getattr(self, attr) is not None]
        return self.name + (f"({','.join(items)})" if items else "") + (f"@{self.draft}" if self.draft else "")


def parse_method(text: str) -> MethodSpec:
    """``"kseq(K=4)@ngram"`` -> ``MethodSpec("kseq", {}, num_drafts=4, draft="ngram")``.

    Raises ``ValueError`` for text outside the grammar, an option given twice, an unknown option
    (listing the verifier's options) and a value that does not parse as the option's type. A name that is not a registered
    verifier (``ar``) is returned as it is when it has no options; whoever runs it decides.
    """
    match = _SPEC.match(text)
    if match is None:
        raise ValueError(f"method {text!r}: expected name, name(key=value,...) or name...@draft, e.g. ot(solver=gr,tol=1e-4)")
    name, body, draft = match["name"], match["options"], match["draft"]
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in (body or "").split(","))):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not key or not value:
            raise ValueError(f"method {text!r}: options are written key=value, got {item!r}")
        if any(key == seen for seen, _ in pairs):
            raise ValueError(f"method {text!r}: option {key} is given twice")
        pairs.append((key, value))
    settings = {SETTINGS[k]: _convert(name, k, v, int) for k, v in pairs if k in SETTINGS}
    options = typed_options(name, [(k, v) for k, v in pairs if k not in SETTINGS])
    for attr, value in settings.items():
        if value < 1:
            raise ValueError(f"method {text!r}: {attr} must be >= 1, got {value}")
    return MethodSpec(name, options, settings.get("num_drafts"), settings.get("draft_length"), draft)


def typed_options(name: str, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Option texts ``[(key, value)]`` of verifier ``name`` -> values of its fields' types."""
    if not pairs:
        return {}
    _ensure_loaded()
    if name not in _REGISTRY:
        raise ValueError(f"unknown verifier {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    cls = _REGISTRY[name]
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    options = {}
    for key, value in pairs:
        if key not in fields:
            known = ", ".join(fields + list(SETTINGS))
            raise ValueError(f"verifier {name!r} does not take option {key}; it takes {known}")
        options[key] = _convert(name, key, value, hints.get(key, Any))
    return options


_EXPECTED = {bool: "a bool (true or false)", int: "an int", float: "a float", str: "a str"}
_IS = {
    bool: lambda value: isinstance(value, bool),
    int: lambda value: isinstance(value, numbers.Integral) and not isinstance(value, bool),
    float: lambda value: isinstance(value, numbers.Real) and not isinstance(value, bool),
    str: lambda value: isinstance(value, str),
}


def check_option_values(name: str, options: dict[str, Any]) -> None:
    """Raise ``ValueError`` for an option of verifier ``name`` given in Python (not as text) whose
    value is not of its field's type: an int passes for a float, None only where the field is
    ``X | None``, and an ``Any`` field takes anything (the verifier checks it)."""
    hints = typing.get_type_hints(_REGISTRY[name])
    for key, value in options.items():
        kind, optional = _unwrap(hints.get(key, Any))
        if kind in _IS and not _IS[kind](value) and not (optional and value is None):
            expected = _EXPECTED[kind] + (" or None" if optional else "")
            raise ValueError(f"verifier {name!r}: option {key} expects {expected}, got {value!r}")


def _unwrap(kind: Any) -> tuple[Any, bool]:
    """(the type inside ``X | None``, True) or (``kind``, False)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in typing.get_args(kind):
        return next(a for a in typing.get_args(kind) if a is not type(None)), True
    return kind, False


def _convert(name: str, key: str, text: str, kind: Any) -> Any:
    """``text`` as a value of type ``kind``; ``ValueError`` naming the option and the type."""
    kind, optional = _unwrap(kind)
    if optional and text.lower() == "none":
        return None
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError(text)
            return lowered == "true"
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise ValueError(f"verifier {name!r}: option {key} expects {_EXPECTED[kind]}, got {text!r}") from None
    return text  # str, or Any (a path, a name)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)

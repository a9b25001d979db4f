"""The one JSON writer of the benchmarks: a report printed, and written where the user asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["emit_json"]


def emit_json(report: dict[str, Any], path: str | Path | None = None) -> None:
    """Print ``report`` as indented JSON and, when ``path`` is given, write the same text there."""
    text = json.dumps(report, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")

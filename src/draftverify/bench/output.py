"""What every benchmark writes: the one JSON writer (a report printed, and written where the user
asks) and the command line that reproduces a run from its settings."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

__all__ = ["command_line", "emit_json"]


def emit_json(report: dict[str, Any], path: str | Path | None = None) -> None:
    """Print ``report`` as indented JSON and, when ``path`` is given, write the same text there."""
    text = json.dumps(report, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")


def command_line(command: str, settings: Any, leave_out: tuple[str, ...] = ()) -> str:
    """``draftverify bench COMMAND`` with every field of the settings dataclass ``settings`` spelled
    out as its flag (``num_prompts`` -> ``--num-prompts``), in field order: a true flag alone, a
    tuple as its values, None and false left out, and the fields named in ``leave_out``."""
    words = ["draftverify", "bench", command]
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.name in leave_out or value is None or value is False:
            continue
        words.append("--" + field.name.replace("_", "-"))
        if value is not True:
            words.extend(str(v) for v in value) if isinstance(value, tuple) else words.append(str(value))
    return shlex.join(words)

"""What every benchmark writes: the one JSON writer (a report printed, and written where the user
asks, with the machine it ran on) and the command line that reproduces a run from its settings."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

__all__ = ["command_line", "emit_json", "machine"]


def machine() -> dict[str, Any]:
    """Where a report was measured: the CPU's model name (``/proc/cpuinfo`` on Linux, else
    ``platform.processor()``), its logical CPUs, the instruction set torch's kernels dispatch to, and
    the UTC time. Timings from different machines are not comparable; this says which one a file holds."""
    name = platform.processor()
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": name or "unknown", "logical_cpus": os.cpu_count(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def emit_json(report: dict[str, Any], path: str | Path | None = None) -> None:
    """Print ``report`` with its :func:`machine` (key ``machine``) as indented JSON and, when ``path``
    is given, write the same text there."""
    text = json.dumps({**report, "machine": machine()}, indent=1)
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

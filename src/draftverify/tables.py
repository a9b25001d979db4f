"""The one table formatter of the reports and commands: markdown, or right-aligned plain text."""

from __future__ import annotations

from typing import Any

__all__ = ["table", "table_of"]


def table(header: list[str], rows: list[list[str]], *, markdown: bool = True) -> str:
    """``rows`` of cells under ``header``: a markdown table (``| a | b |``), or with ``markdown``
    False plain text, each column right-aligned to its widest cell, two spaces apart."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    cells = [header] + rows
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells)


def table_of(records: list[dict[str, Any]], columns: list[tuple[str, str, str]], *, markdown: bool = True) -> str:
    """:func:`table` of dict ``records``: ``columns`` = (key, header, format spec) per column; a
    missing or None value prints as '-'."""
    rows = [["-" if record.get(key) is None else format(record[key], fmt) for key, _, fmt in columns] for record in records]
    return table([header for _, header, _ in columns], rows, markdown=markdown)

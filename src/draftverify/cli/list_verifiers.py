"""`draftverify list`: the registered verifiers, their options with defaults, and exactness."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..verify import verifiers
from ..verify.base import _REGISTRY

__all__ = ["list_verifiers"]

VALIDATE = "validate"  # the option every verifier takes (draftverify.verify.base.Verifier)


def list_verifiers() -> int:
    """List the verifiers with their options, defaults and exactness."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("name", "exact", "drafts", "options (default)", "description"):
        table.add_column(column, overflow="fold")
    for info in verifiers():
        exact = ("yes*" if info.prefix_draft_only else "yes") if info.exact else "no"
        cells = (info.name, exact, "K>=1" if info.multi_draft else "K=1",
                 _options(info.name), info.description)
        table.add_row(*(Text(cell) for cell in cells))  # Text: E[tau] is not markup
    console = Console()
    if not console.is_terminal:  # a pipe or a file: one line per verifier, however long
        console.width = 1000
    with console.capture() as table_text:
        console.print(table)
    print("\n".join(line.rstrip() for line in table_text.get().splitlines()))  # no padding at line ends
    console.print("* exact only with a draft whose law depends on the prefix alone, not with one whose law depends on "
                  "its depth within a step (a feature draft, the default pair's): the engine refuses that pair.",
                  highlight=False)
    console.print(f"Every verifier also takes {VALIDATE}=true|false (default true): false skips the checks of "
                  "its inputs' values, for callers whose inputs are valid by construction.", highlight=False)
    return 0


def _options(name: str) -> str:
    """``key=default`` for each option of verifier ``name`` but ``validate``, as ``--method`` writes them."""
    items = []
    for field in dataclasses.fields(_REGISTRY[name]):
        if field.init and field.name != VALIDATE:
            items.append(f"{field.name}={_default(field)}")
    return ", ".join(items) or "-"


def _default(field: dataclasses.Field) -> str:
    if field.name == "classifier":  # get_verifier loads the pairs' (Sprinter.loaders), one per draft
        return "shipped"
    if field.default is not dataclasses.MISSING:
        return _written(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return _written(field.default_factory())
    return "required"


def _written(value: Any) -> str:
    """``value`` as the method grammar writes it (true, false, none, 0.0001)."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    return str(value)

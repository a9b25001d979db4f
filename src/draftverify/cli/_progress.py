"""Progress bars of long commands: rich, on stderr, drawn only on a terminal and never under
``draftverify --quiet`` (so logs, pipes and tests see none). Results go to stdout as before."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["Settings", "progress_bar"]


@dataclass(frozen=True)
class Settings:
    """The top-level options every command sees as ``ctx.obj``."""

    quiet: bool = False


def progress_bar(ctx: typer.Context) -> Progress:
    """A progress display for this command (use it as a context manager): a bar per task with
    done/total, elapsed and remaining time; a task of unknown total shows a pulse and the time.

    While it is drawn, what the job prints to the terminal goes above it (rich's redirection), so
    lines and bar do not overwrite each other; stdout sent to a file or a pipe is left alone.
    """
    console = Console(stderr=True, soft_wrap=True)  # lines printed above the bar are not cut
    shown = not (isinstance(ctx.obj, Settings) and ctx.obj.quiet) and console.is_interactive
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(),
        console=console, transient=True, disable=not shown,
        redirect_stdout=shown and sys.stdout.isatty(), redirect_stderr=shown,
    )

"""The progress hook of the benchmarks: the command line passes a ``rich.progress.Progress`` (drawn
on a terminal, hidden under ``draftverify --quiet``); a library caller passes none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence, TypeVar

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["track"]

T = TypeVar("T")


def track(progress: Progress | None, items: Sequence[T], description: str) -> Iterable[T]:
    """``items``, advancing a bar of ``progress`` (when there is one) as each is taken."""
    return items if progress is None else progress.track(items, description=description)

"""What every ``draftverify`` command shares: the command class, option checks, quiet libraries.

:class:`Command` is the typer command class of every subcommand. It adds what the command line
promises on top of typer:

- options that take one or more values, written as argparse's ``nargs="+"`` took them
  (``--draft-length 1 2 3``): an option whose metavar ends in ``...`` (see :data:`MANY`);
- bad input is one line: a ``ValueError`` or ``FileNotFoundError`` raised by the library becomes a
  :class:`CommandError` carrying the command's path, with the library's argument names in its
  message replaced by this command's flags (``num_tokens`` -> ``--tokens``);
- a reader that leaves early (``draftverify theory ... | head``) ends the command quietly.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Any, Callable, TypeVar

import typer
from typer.core import TyperCommand

__all__ = ["Command", "CommandError", "PIPE_CLOSED", "above", "below", "quiet_transformers", "settings_of", "spread"]

S = TypeVar("S")

PIPE_CLOSED = 141  # the exit code a shell reports for a process ended by SIGPIPE (128 + 13)

# a metavar ending in MANY marks an option that takes one or more values after one flag
MANY = "..."

# library argument names -> the parameter of a command that carries them when the command has no
# parameter of the library's name (draft_length is --draft-length wherever it exists)
_LIBRARY_NAMES = {
    "num_tokens": "tokens",
    "vocab_size": "vocab",
    "cost_ratio": "rho",
    "true_positive_rate": "true_positive",
    "false_positive_rate": "false_positive",
    "target_probs": "target",
    "draft_probs": "draft",
    "min_length": "min_draft_length",
    "max_length": "max_draft_length",
}
_IDENTIFIER = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")  # code-style names: num_tokens, target_probs
_NUMBER = re.compile(r"-(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-inf")  # a negative value, not a flag


class CommandError(Exception):
    """Bad input found while a command ran: ``path`` is the command (``draftverify check``)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


class Command(TyperCommand):
    """The class of every ``draftverify`` subcommand (``app.command(name, cls=Command)``)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        many = {flag for param in self.params if str(param.metavar or "").endswith(MANY) for flag in param.opts}
        try:
            return super().parse_args(ctx, spread(args, many))
        except typer.TyperException as error:
            if getattr(error, "ctx", None) is None:  # the parser's own errors carry no command
                error.ctx = ctx
            raise

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
            return result
        except BrokenPipeError:
            # the reader of our output left (`| head`): stop writing and end quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(PIPE_CLOSED) from None
        except (ValueError, FileNotFoundError) as error:
            raise CommandError(ctx.command_path, self.with_flags(str(error))) from error

    def with_flags(self, message: str) -> str:
        """``message`` with each code-style argument name this command has a flag for replaced by
        the flag: ``num_tokens must be >= 1`` -> ``--tokens must be >= 1`` in ``draftverify check``."""
        flags = {param.name: param.opts[0] for param in self.params if param.opts[0].startswith("--")}

        def flag(match: re.Match) -> str:
            name = match.group(0)
            return flags.get(name) or flags.get(_LIBRARY_NAMES.get(name, ""), name)

        return _IDENTIFIER.sub(flag, message)


def spread(args: list[str], many: set[str]) -> list[str]:
    """``--flag a b c`` -> ``--flag a --flag b --flag c`` for the flags in ``many`` (options of one
    or more values; typer takes one value per flag). Negative numbers are values; ``--`` ends it."""
    out: list[str] = []
    flag, repeat = None, False  # repeat: the next value needs the flag written before it
    for position, arg in enumerate(args):
        if arg == "--":
            return out + args[position:]
        if arg.startswith("-") and not _NUMBER.fullmatch(arg):
            name, equals, _ = arg.partition("=")
            flag, repeat = (name if name in many else None), bool(equals)
        else:
            if flag is not None and repeat:
                out.append(flag)
            repeat = flag is not None
        out.append(arg)
    return out


def settings_of(ctx: typer.Context, kind: type[S], **given: Any) -> S:
    """This command's options as the frozen settings dataclass ``kind`` of its benchmark
    (``bench.run(settings, progress)``): each field from the option of its name, a list as a tuple,
    unless ``given`` holds the field's value already converted (``shape=((576, 1536),)``). An option
    that no field takes is a bug of the command: a ``TypeError`` names it."""
    names = {field.name for field in dataclasses.fields(kind)}
    dropped = sorted(set(ctx.params) - names - set(given))
    if dropped:
        raise TypeError(f"{kind.__name__} has no field for the options {', '.join(dropped)}")
    values = {name: given[name] if name in given else ctx.params[name] for name in names}
    return kind(**{name: tuple(v) if isinstance(v, list) else v for name, v in values.items()})


def above(bound: float) -> Callable[[Any], Any]:
    """An option callback: every value strictly above ``bound`` (typer's ``min`` is inclusive)."""
    return _bounded(lambda value: value > bound, f"> {bound:g}")


def below(bound: float) -> Callable[[Any], Any]:
    """An option callback: every value strictly below ``bound`` (typer's ``max`` is inclusive)."""
    return _bounded(lambda value: value < bound, f"< {bound:g}")


def _bounded(holds: Callable[[float], bool], text: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if v is not None and not holds(v)]
        if bad:
            raise typer.BadParameter(f"must be {text}, got {bad[0]:g}")
        return value

    return check


def quiet_transformers() -> None:
    """No "Loading weights" bars and no warnings from ``transformers`` in our output."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

"""The ``draftverify`` command line (typer; rich for progress and tables).

Each command lives in a module of this package; this module puts them in one app, in the order
``draftverify --help`` lists them, and adds the top-level options ``--version`` and ``--quiet``.
Bad input is one line on stderr, ``draftverify <command>: error: ...``, and exit code 2 (see
:class:`._command.Command`). ``main(argv)`` is the entry point of the console script, of
``python -m draftverify`` and of the tests.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from typing import Annotated

import typer

from . import bench, check, conform, demo, evaluate_draft, generate, list_verifiers, sprinter, theory, train_draft, train_pair, tune
from ._command import Command, CommandError
from ._progress import Settings

__all__ = ["app", "main"]

USAGE_ERROR = 2

app = typer.Typer(
    name="draftverify", add_completion=False, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(show: bool) -> None:
    if show:
        print(f"draftverify {version('draftverify')}")
        raise typer.Exit()


@app.callback()
def _top_level(
    ctx: typer.Context,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Draw no progress bars (they go to stderr, "
                                        "and only when it is a terminal).")] = False,
    show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                               help="Print the version and exit.")] = False,
) -> None:
    """Draft-then-verify (speculative) decoding: exact and approximate verifiers, optimal
    transport, the closed forms of the seed papers, benchmarks and an exactness checker."""
    ctx.obj = Settings(quiet=quiet)


app.command("demo", cls=Command)(demo.demo)
app.command("check", cls=Command)(check.check)
app.command("conform", cls=Command)(conform.conform)
app.command("list", cls=Command)(list_verifiers.list_verifiers)
app.command("generate", cls=Command)(generate.generate)
app.add_typer(bench.app, name="bench")
app.command("tune", cls=Command)(tune.tune)
app.command("train-pair", cls=Command)(train_pair.train_pair)
app.command("train-draft", cls=Command)(train_draft.train_draft)
app.command("evaluate-draft", cls=Command)(evaluate_draft.evaluate_draft)
app.add_typer(theory.app, name="theory")
app.add_typer(sprinter.app, name="sprinter")


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and return its exit code."""
    try:
        code = typer.main.get_command(app).main(args=argv, prog_name="draftverify", standalone_mode=False)
        return int(code or 0)
    except CommandError as error:  # bad input found while the command ran
        path, message, code = error.path, str(error), USAGE_ERROR
    except typer.TyperException as error:  # bad input found while parsing the command line
        context = getattr(error, "ctx", None)
        path = context.command_path if context is not None else "draftverify"
        message, code = error.format_message(), error.exit_code
        if not message.strip():  # no command given: the help is already printed, and says it all
            return code
    print(f"{path}: error: {' '.join(message.split())}", file=sys.stderr)
    return code

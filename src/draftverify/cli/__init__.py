"""The ``draftverify`` command. Each subcommand lives in its own module of this package and
exposes ``add_parser(subparsers)``, which registers a parser whose default ``func(args) -> int``
runs it. Bad input (``ValueError``, ``FileNotFoundError``) is one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand modules, in the order `draftverify --help` lists them (add yours here)
_COMMANDS = ["demo", "check", "list_verifiers", "generate", "bench", "train_pair", "theory", "sprinter"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draftverify", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as error:
        print(f"draftverify {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""`draftverify list`: the registered verifiers."""

from __future__ import annotations

import argparse

from ..verify import verifiers


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("list", help="list the verifiers with their options and exactness")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = [("name", "exact", "drafts", "options", "description")]
    for info in verifiers():
        rows.append((info.name, "yes" if info.exact else "no", "K>=1" if info.multi_draft else "K=1",
                     ",".join(info.options) or "-", info.description))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
    return 0

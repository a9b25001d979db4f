"""`draftverify check NAME`: the exactness checker on a seeded known-law Markov pair."""

from __future__ import annotations

import argparse
import json

from ..testing import check_exactness, random_pair
from ..verify import get_verifier
from ._options import method_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check",
        help="decode many sequences from a known-law model through a verifier and test the law",
        description="Exactness check: chi-square p-value of the law of the first N decoded tokens "
        "against the target's exact law (a correct verifier gives p spread uniformly on [0, 1]).",
    )
    parser.add_argument("name", help="verifier (see `draftverify list`), e.g. sd or submaximal(fraction=0.5)")
    parser.add_argument("--drafts", type=int, default=1, help="K, number of i.i.d. drafts")
    parser.add_argument("--draft-length", type=int, default=2, help="L, tokens per draft")
    parser.add_argument("--samples", type=int, default=20000, help="decoded sequences")
    parser.add_argument("--tokens", type=int, default=4, help="N, length of the law tested")
    parser.add_argument("--vocab", type=int, default=4, help="vocabulary of the Markov pair")
    parser.add_argument("--order", type=int, default=2, help="Markov order of the pair")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="verifier option, repeatable (e.g. --option fraction=0.5)")
    parser.add_argument("--fraction", type=float, help="shorthand for --option fraction=... (submaximal)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    method = method_from_args(args.name, args.option + ([f"fraction={args.fraction}"] if args.fraction is not None else []))
    options = method.options
    verifier = get_verifier(method.name, **options)
    pair = random_pair(vocab_size=args.vocab, order=args.order, seed=args.seed)
    report = check_exactness(
        verifier, pair, num_drafts=args.drafts if method.num_drafts is None else method.num_drafts,
        draft_length=args.draft_length if method.draft_length is None else method.draft_length,
        num_tokens=args.tokens, samples=args.samples, seed=args.seed,
    )
    if args.json:
        print(json.dumps({"verifier": args.name, "options": options, **report.__dict__}))
    else:
        print(f"verifier         {args.name} {options or ''}".rstrip())
        print(f"drafts x length  {report.num_drafts} x {report.draft_length}; law of the first {report.num_tokens} tokens")
        print(f"samples          {report.samples}")
        print(f"p-value          {report.p_value:.4g}  (chi2 {report.chi2:.1f}, dof {report.dof})")
        print(f"TV to target     {report.tv:.4f}")
        print(f"accepted / call  {report.mean_accepted:.3f}")
        print(f"tokens / call    {report.tokens_per_call:.3f}")
    return 0

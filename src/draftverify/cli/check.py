"""`draftverify check NAME`: the exactness checker on a seeded known-law Markov pair."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from ._options import GREEDY, LengthBound, OptionItems, Seed, draft_length_from_args, method_from_args
from ._progress import progress_bar

__all__ = ["check"]


def check(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A verifier (see `draftverify list`), with options in "
                                        "parentheses, e.g. sd or submaximal(fraction=0.5).")],
    drafts: Annotated[int, typer.Option(min=1, help="K, the number of i.i.d. drafts.")] = 1,
    draft_length: Annotated[str, typer.Option(metavar="L|auto|heuristic", help="L, tokens per draft; auto or "
                                              "heuristic: chosen per call from the past calls (auto with costs "
                                              "draft 0.2, target 1 per call, so L follows the acceptance).")] = "2",
    min_draft_length: LengthBound = None,
    max_draft_length: LengthBound = None,
    samples: Annotated[int, typer.Option(min=1, help="Decoded sequences.")] = 20000,
    tokens: Annotated[int, typer.Option(min=1, help="N, the length of the law tested.")] = 4,
    vocab: Annotated[int, typer.Option(min=2, help="Vocabulary of the Markov pair.")] = 4,
    order: Annotated[int, typer.Option(min=1, help="Markov order of the pair.")] = 2,
    seed: Seed = 0,
    option: OptionItems = [],
    fraction: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Shorthand for --option fraction=... (submaximal).", show_default="unset")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> int:
    """Decode many sequences from a known-law model through a verifier and test their law.

    The p-value is a chi-square test of the law of the first N decoded tokens against the
    target's exact law: a correct verifier gives p spread uniformly on 0..1.
    """
    from ..engine.draft_length import AutoDraftLength
    from ..testing import check_exactness, random_pair
    from ..verify import get_verifier

    method = method_from_args(name, option + ([f"fraction={fraction}"] if fraction is not None else []))
    if method.name == GREEDY:
        raise ValueError("greedy is exact for temperature-0 (argmax) decoding, and the checker samples the "
                         "known-law pair at temperature 1, where greedy's output is the argmax path, not the "
                         "target's law: check a sampling verifier such as sd")
    verifier = get_verifier(method.name, **method.options)
    length = draft_length_from_args(draft_length, min_draft_length, max_draft_length)
    if isinstance(length, AutoDraftLength):  # no timings here: fixed relative costs
        length = dataclasses.replace(length, draft_cost=0.2, target_costs=(1.0,) * length.max_length)
    pair = random_pair(vocab_size=vocab, order=order, seed=seed)
    with progress_bar(ctx) as progress:
        task = progress.add_task(f"sequences through {name}", total=samples)
        report = check_exactness(
            verifier, pair, num_drafts=drafts if method.num_drafts is None else method.num_drafts,
            draft_length=length if method.draft_length is None else method.draft_length,
            num_tokens=tokens, samples=samples, seed=seed, on_sample=lambda: progress.advance(task),
        )
    if as_json:
        print(json.dumps({"verifier": name, "options": method.options, **report.__dict__}))
    else:
        print(f"verifier         {name} {method.options or ''}".rstrip())
        shown = report.draft_length if isinstance(length, int) else f"{draft_length} (L <= {report.draft_length})"
        print(f"drafts x length  {report.num_drafts} x {shown}; law of the first {report.num_tokens} tokens")
        print(f"samples          {report.samples}")
        print(f"p-value          {report.p_value:.4g}  (chi2 {report.chi2:.1f}, dof {report.dof})")
        print(f"TV to target     {report.tv:.4f}")
        print(f"accepted / call  {report.mean_accepted:.3f}")
        print(f"tokens / call    {report.tokens_per_call:.3f}")
    return 0

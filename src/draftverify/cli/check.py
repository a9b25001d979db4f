"""`draftverify check NAME`: the exactness checker on a seeded known-law Markov pair.

Exit codes: 0 passed, 1 failed (the decoded law is not the target's), 3 inconclusive (the test
cannot judge at these settings: more samples or fewer tokens), 2 bad input (as every command).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Annotated

import typer

from ._options import GREEDY, MaxLength, MinLength, OptionItems, Seed, draft_length_from_args, method_from_args
from ._progress import progress_bar

__all__ = ["check", "EXIT_CODES"]

EXIT_CODES = {"passed": 0, "failed": 1, "inconclusive": 3}  # 2 is bad input, as in every command


def check(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A verifier (see `draftverify list`), with options in "
                                        "parentheses, e.g. sd or submaximal(fraction=0.5).")],
    num_drafts: Annotated[int | None, typer.Option(min=1, help="K, the number of i.i.d. drafts.", show_default="1")] = None,
    draft_length: Annotated[str | None, typer.Option(metavar="L|auto|heuristic", help="L, tokens per draft; auto or "
                                                     "heuristic: chosen per call from the past calls (auto with costs "
                                                     "draft 0.2, target 1 per call, so L follows the acceptance).",
                                                     show_default="2")] = None,
    min_draft_length: MinLength = None,
    max_draft_length: MaxLength = None,
    samples: Annotated[int, typer.Option(min=1, help="Decoded sequences.")] = 20000,
    tokens: Annotated[int, typer.Option(min=1, help="N, the length of the law tested.")] = 4,
    vocab: Annotated[int, typer.Option(min=2, help="Vocabulary of the Markov pair.")] = 4,
    order: Annotated[int, typer.Option(min=1, help="Markov order of the pair.")] = 2,
    depth_dependent_draft: Annotated[bool, typer.Option(
        "--depth-dependent-draft", help="Draft from one table at a call's first position and another after it, as a "
        "feature (EAGLE) draft does: a verifier that carries the draft's law across calls (gbv) fails here.")] = False,
    seed: Seed = 0,
    option: OptionItems = [],
    fraction: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Shorthand for --option fraction=... (submaximal).", show_default="unset")] = None,
    detect_tv: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Pass only if the test detects any law this far (total variation) from the target.")] = 0.1,
    json_file: Annotated[str | None, typer.Option(
        "--json", metavar="FILE", help="Also write the report as JSON to this file ('-': print it instead of the text).",
        show_default="none")] = None,
) -> int:
    """Decode many sequences from a known-law model through a verifier and test their law.

    The p-value is a chi-square test of the law of the first N decoded tokens against the
    target's exact law: a correct verifier gives p spread uniformly on 0..1. A test that cannot
    judge (no degree of freedom, or unable to see a law --detect-tv from the target) is
    inconclusive, never passed. Exit code 0 passed, 1 failed, 3 inconclusive, 2 bad input.
    """
    from ..engine.draft_length import AutoDraftLength
    from ..testing import check_exactness, random_pair
    from ..verify import get_verifier

    items = [("--option", item) for item in option] + ([("--fraction", f"fraction={fraction}")] if fraction is not None else [])
    length = draft_length_from_args(draft_length, min_draft_length, max_draft_length)  # L, a policy or None
    policy = None if length is None or isinstance(length, int) else length
    method = method_from_args(name, items, num_drafts=num_drafts, draft_length=None if policy else length)
    if policy is not None and method.draft_length is not None:
        raise ValueError(f"{name!r} sets L={method.draft_length} but --draft-length {draft_length} was given: give it once")
    if method.draft is not None:
        raise ValueError(f"{name!r} names a draft model (@{method.draft}), but the checker drafts from its known-law "
                         "pair: drop the @ (a model's draft is for generate and bench)")
    if method.name == GREEDY:
        raise ValueError("greedy is exact for temperature-0 (argmax) decoding, and the checker samples the "
                         "known-law pair at temperature 1, where greedy's output is the argmax path, not the "
                         "target's law: check a sampling verifier such as sd")
    verifier = get_verifier(method.name, **method.options)
    if isinstance(policy, AutoDraftLength):  # no timings here: fixed relative costs
        length = dataclasses.replace(policy, draft_cost=0.2, target_costs=(1.0,) * (policy.max_length + 1))
    pair = random_pair(vocab_size=vocab, order=order, seed=seed, depth_dependent=depth_dependent_draft)
    with progress_bar(ctx) as progress:
        task = progress.add_task(f"sequences through {name}", total=samples)
        report = check_exactness(
            verifier, pair, num_drafts=method.num_drafts or 1, draft_length=length if policy else method.draft_length or 2,
            num_tokens=tokens, samples=samples, seed=seed, detect_tv=detect_tv, on_sample=lambda: progress.advance(task),
        )
    fields = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in report.__dict__.items()}
    record = json.dumps({"verifier": name, "options": method.options, **fields})
    if json_file is not None and json_file != "-":
        Path(json_file).write_text(record + "\n")
    if json_file == "-":
        print(record)
    else:
        print(f"verifier         {name} {method.options or ''}".rstrip())
        shown = report.draft_length if policy is None else f"{draft_length} (L <= {report.draft_length})"
        print(f"drafts x length  {report.num_drafts} x {shown}; law of the first {report.num_tokens} tokens")
        print(f"samples          {report.samples}")
        print(f"p-value          {report.p_value:.4g}  (chi2 {report.chi2:.1f}, dof {report.dof})")
        print(f"TV to target     {report.tv:.4f}  (empirical)")
        print(f"detectable TV    {report.detectable_tv:.4f}  (power 0.9 at p <= {report.threshold:g}; "
              f"needed {report.detect_tv:g})")
        print(f"accepted / call  {report.mean_accepted:.3f}")
        print(f"tokens / call    {report.tokens_per_call:.3f}")
        print(f"result           {report.status}: {report.reason}")
    return EXIT_CODES[report.status]

"""`draftverify conform IMPLEMENTATION`: check an engine's verifier against the exact law.

Exit status 0 when every check passes, 1 when one fails, 2 on a usage error.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..testing.conform import DEFAULT_SAMPLES
from ._command import above
from ._options import Seed
from ._progress import progress_bar

__all__ = ["conform"]

FAILED = 1


def conform(
    ctx: typer.Context,
    implementation: Annotated[str, typer.Argument(
        help="transformers (the installed transformers' speculative-sampling step), draftverify (ours, the "
             "reference run) or MODULE:NAME, imported from the current folder or the Python path (needs --layout).")],
    layout: Annotated[str | None, typer.Option(
        help="How MODULE:NAME is called: flattened (fn(draft_token_ids, draft_probs, target_probs, "
             "cu_num_draft_tokens, uniforms, max_draft_len) -> tokens [B, max_draft_len + 1] padded with -1) or "
             "contract (an object with draftverify's per-row verify).", show_default="none")] = None,
    method: Annotated[str | None, typer.Option(
        help="With draftverify: which of our verifiers (sd, submaximal and bv run on the flattened layout).",
        show_default="sd")] = None,
    samples: Annotated[int, typer.Option(min=1, help="Sequences decoded for the law check (power grows as sqrt).")] = DEFAULT_SAMPLES,
    seed: Seed = 0,
    time_limit: Annotated[float, typer.Option(
        callback=above(0), help="Seconds one call may take before it counts as hung.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> int:
    """Check another engine's verifier against the exact law.

    The law by sampling on a known-law model, and probes of the boundary cases sampling almost
    never reaches (uniforms of exactly 0 and just below 1, zero-probability drafts, empty residuals,
    one-hot targets, disjoint supports, rows without drafts, NaN and inf rows, seeds). Exit status
    0: every check passed; 1: one failed; 2: a usage error.
    """
    from ..testing import conform as run_conform
    from ..testing.conform_probes import PROBES

    with progress_bar(ctx) as progress:
        task = progress.add_task(f"conform {implementation}", total=len(PROBES))
        report = run_conform(implementation, layout=layout, method=method, samples=samples, seed=seed,
                             time_limit=time_limit, on_check=lambda check: progress.advance(task))
    print(json.dumps(report.to_dict(), indent=1) if as_json else report.table())
    return 0 if report.passed else FAILED

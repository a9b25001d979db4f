"""`draftverify tune`: predicted tokens/s of every exact method, K and L for a pair, and a
recommendation (see :mod:`draftverify.bench.tune`); ``--verify`` measures the best few beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..bench.tune import METHODS
from ._command import above, quiet_transformers
from ._options import DraftFolder, JsonFile, Quantize, Seed, TargetFolder

__all__ = ["tune"]


def tune(
    prompts: Annotated[str, typer.Option(help="humaneval, mixed (built in) or a JSONL file.",
                                         show_default="humaneval: held out from the embedded pair's training")] = "humaneval",
    field: Annotated[str, typer.Option(help="JSONL field holding the prompt.")] = "text",
    num_prompts: Annotated[int, typer.Option(min=2, help="The first N prompts of the set (>= 2: the standard "
                                             "error is over prompts).")] = 8,
    max_new_tokens: Annotated[int, typer.Option(min=2, help="Tokens sampled from the target per prompt.")] = 128,
    temperature: Annotated[float, typer.Option(callback=above(0.0), help="Sampling temperature of draft and "
                                               "target (> 0).")] = 1.0,
    top_k: Annotated[int | None, typer.Option(min=1, help="Keep the k most likely tokens.", show_default="all")] = None,
    top_p: Annotated[float | None, typer.Option(max=1.0, callback=above(0.0), help="Keep the smallest set of "
                                                "tokens of mass >= p.", show_default="1")] = None,
    methods: Annotated[list[str] | None, typer.Option(metavar="METHOD...", help="Exact verifiers to compare (ot with an "
                                                      "exact solver only at small vocabularies; gbv needs a draft whose law "
                                                      "depends on the prefix alone).",
                                                      show_default=" ".join(METHODS))] = None,
    num_drafts: Annotated[list[int], typer.Option(min=2, metavar="K...", help="K of the multi-draft methods.")] = [2, 4],
    max_draft_length: Annotated[int, typer.Option(min=1, help="Predict L = 1..this.")] = 8,
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls per model-call cost (a verifier is timed once at every window of an answer).")] = 30,
    verify: Annotated[bool, typer.Option("--verify", help="Decode the best settings, auto, heuristic and ar on "
                                         "the prompts and print measured beside predicted.")] = False,
    verify_top: Annotated[int, typer.Option(min=1, help="How many of the best settings --verify decodes.")] = 3,
    threads: Annotated[int, typer.Option(min=1, help="Torch threads.")] = 1,
    seed: Seed = 0,
    target: TargetFolder = None,
    draft: DraftFolder = None,
    quantize: Quantize = None,
    plot: Annotated[str | None, typer.Option(metavar="FILE", help="Also draw predicted tokens/s against L (PNG).",
                                             show_default="none")] = None,
    json: JsonFile = None,
) -> int:
    """Predict tokens/s of each exact method, K and L from one pass over the pair; recommend one."""
    import torch

    quiet_transformers()
    from ..bench import tune as bench
    from ..bench.output import emit_json
    from ..bench.prompts import load_prompts
    from ..models.pair import load_pair

    settings = bench.TuneSettings(
        methods=tuple(methods) if methods else None, num_drafts=tuple(num_drafts), max_draft_length=max_draft_length,
        max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, repeats=repeats, seed=seed,
    )  # bad settings fail before loading
    texts = load_prompts(prompts, field=field, limit=num_prompts)
    torch.set_num_threads(threads)
    pair = load_pair(target, draft, quantize=quantize)
    report = bench.tune(pair.target, pair.draft, [pair.tokenizer.encode(t) for t in texts], settings,
                        verify=verify_top if verify else 0)
    report["settings"].update(prompts=prompts, num_prompts=len(texts), target=target, draft=draft, quantize=quantize)
    emit_json(report, json)
    if plot:
        bench.plot(report, Path(plot))
    print()
    _print_tables(report)
    return 0


def _print_tables(report: dict[str, Any]) -> None:
    from ..tables import table_of

    rows = report["predictions"]
    print(table_of(rows[:15] + rows[15:][-1:], [  # the best 15 and the last (ar)
        ("method", "method", "s"), ("num_drafts", "K", "d"), ("draft_length", "L", "d"),
        ("tokens_per_call", "tokens/call", ".3f"), ("standard_error", "+-", ".3f"), ("estimator", "estimator", "s"),
        ("tokens_per_second", "tokens/s", ".1f"), ("vs_ar", "vs ar", ".2f"), ("step_ms", "step ms", ".2f")], markdown=False))
    sd = sorted((r for r in rows if r["method"] == "sd"), key=lambda r: r["draft_length"])
    print("\nsd, tokens per call: unbiased from the paths vs the plug-in along target prefixes (its bias)")
    print(table_of(sd, [("draft_length", "L", "d"), ("tokens_per_call", "unbiased", ".3f"),
                            ("plug_in_tokens_per_call", "plug-in", ".3f")], markdown=False))
    best = report["recommendation"]
    if best["method"] == "ar":
        print(f"\nrecommended: ar, {best['tokens_per_second']:.1f} tokens/s predicted: no drafting setting is predicted to "
              "beat it (--draft-length auto takes steps of the target alone where drafting does not pay)")
    else:
        print(f"\nrecommended: {best['method']} with L = {best['draft_length']}: {best['tokens_per_second']:.1f} tokens/s "
              f"predicted, {best['vs_ar']:.2f}x ar (an unbiased estimate)")
    ahead = report["approximate_ahead"]
    if ahead:
        print(f"ahead by an approximation: {ahead['method']} with L = {ahead['draft_length']}: "
              f"{ahead['tokens_per_second']:.1f} tokens/s predicted ({ahead['estimator']}; --verify measures it)")
    if "verify" in report:
        checked = report["verify"]
        print("\nmeasured (same prompts, EOS ignored)")
        print(table_of(checked["rows"], [
            ("spec", "method", "s"), ("draft_length", "L", "s"),
            ("predicted_tokens_per_second", "predicted tokens/s", ".1f"), ("tokens_per_second", "measured tokens/s", ".1f"),
            ("error", "error", "+.1%"), ("error_after", "error, costs after", "+.1%"),
            ("predicted_tokens_per_call", "predicted tokens/call", ".3f"),
            ("tokens_per_call", "measured tokens/call", ".3f"), ("measured_standard_error", "+-", ".3f")], markdown=False))
        before, after = report["costs_ms"]["ar_step"], report["costs_after_ms"]["ar_step"]
        print(f"\nar's step timed before the decodings {before:.2f} ms, after them {after:.2f} ms ({after / before - 1:+.1%})")
        print(f"auto: {checked['auto_vs_best_fixed']:.3f}x the best fixed L of the same method, "
              f"{checked['auto_vs_best_fixed_any_method']:.3f}x the best fixed setting of any method, "
              f"{checked['auto_vs_heuristic']:.3f}x transformers' heuristic schedule")

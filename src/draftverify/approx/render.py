"""The SPRINTER report as files: ``docs/results/sprinter.md`` and ``.json``, and its figures
(``docs/img/sprinter_speed_deviation.png``, ``docs/img/sprinter_theory.png``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..tables import table_of

__all__ = ["write_report", "plot_speed_deviation", "plot_theory"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _sprinter_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in result["rows"] if "threshold" in r]


def plot_speed_deviation(result: dict[str, Any], path: Path) -> None:
    """Speedup over sd against the per-token TV to the target, one point per threshold."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    rows = _sprinter_rows(result)
    tv = [r["audit_tv_draws"] for r in rows]
    err = [2 * r["audit_tv_draws_stderr"] for r in rows]
    speed = [r["speedup_vs_sd"] for r in rows]
    ax.errorbar(tv, speed, xerr=err, fmt="o-", label="sprinter (TV measured from its draws, ±2 s.e.)")
    ax.plot([r["audit_tv_theory"] for r in rows], speed, "x", color="C1", label="sprinter (TV exact at the visited prefixes)")
    for r, x, y in zip(rows, tv, speed):
        ax.annotate(f"threshold tau={r['threshold']:g}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    by_name = {r["method"]: r for r in result["rows"]}
    ax.plot([0], [1.0], "s", color="k", label="sd (exact)")
    ax.plot([0], [by_name["ar"]["speedup_vs_sd"]], "D", color="grey", label="ar (exact)")
    ax.axhline(1.0, color="k", lw=0.5, ls=":")
    ax.set_xlabel("per-token TV(target, output law), mean over decided positions")
    ax.set_ylabel("tokens/s relative to sd (same run)")
    ax.set_title("SPRINTER: speed against deviation")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_theory(result: dict[str, Any], path: Path) -> None:
    """Per threshold: measured TV against the general formula and against the seed's uniform one."""
    plt = _pyplot()
    rows = _sprinter_rows(result)
    fig, ax = plt.subplots(figsize=(5.4, 4.6))
    measured = [r["audit_tv_draws"] for r in rows]
    err = [2 * r["audit_tv_draws_stderr"] for r in rows]
    ax.errorbar([r["audit_tv_theory"] for r in rows], measured, yerr=err, fmt="o", label="general formula (token-dependent eta)")
    ax.errorbar([r["audit_tv_uniform"] for r in rows], measured, yerr=err, fmt="^", alpha=0.7,
                label="seed's Theorem 3.1 with the measured eta_FP")
    top = max(measured + [r["audit_tv_uniform"] for r in rows] + [r["audit_tv_theory"] for r in rows]) * 1.1 or 1.0
    ax.plot([0, top], [0, top], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("predicted per-token TV")
    ax.set_ylabel("measured per-token TV (from the decoding's draws)")
    ax.set_title("SPRINTER: theory against measurement")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: dict[str, Any], roc: dict[str, Any] | None, command: str, results_dir: Path, img_dir: Path) -> Path:
    """Write the markdown report, its JSON and its figures; returns the markdown's path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    img_dir.mkdir(parents=True, exist_ok=True)
    plot_speed_deviation(result, img_dir / "sprinter_speed_deviation.png")
    plot_theory(result, img_dir / "sprinter_theory.png")
    (results_dir / "sprinter.json").write_text(json.dumps(dict(result, roc=roc), indent=1) + "\n")
    s = result["settings"]
    img = Path(os.path.relpath(img_dir, results_dir)).as_posix()  # the figures, as the Markdown links them
    speed = table_of(result["rows"], [
        ("method", "method", "s"), ("draft_length", "L", "d"), ("tokens_per_second", "tokens/s", ".1f"),
        ("speedup_vs_sd", "vs sd", ".2f"), ("speedup_vs_ar", "vs ar", ".2f"),
        ("target_calls_per_token", "target calls/token", ".3f"), ("rouge_l_vs_sd", "ROUGE-L vs sd", ".3f"),
        ("rouge_l_vs_canonical", "ROUGE-L vs canonical", ".3f"),
    ])
    sprinter_rows = _sprinter_rows(result)
    audit = table_of(sprinter_rows, [
        ("threshold", "threshold tau", "g"), ("audit_decisions", "decisions", "d"), ("audit_yes_share", "yes share", ".3f"),
        ("audit_false_positive_rate", "eta_FP (D/T>1)", ".3f"), ("audit_true_positive_rate", "eta_TP (D/T<=1)", ".3f"),
        ("audit_false_positive_rate_lambda", "eta_FP (D/T>lambda)", ".3f"), ("audit_true_positive_rate_lambda", "eta_TP (D/T<=lambda)", ".3f"),
    ])
    theory = table_of(sprinter_rows, [
        ("threshold", "threshold tau", "g"), ("audit_tv_draws", "TV measured", ".4f"), ("audit_tv_draws_stderr", "s.e.", ".4f"),
        ("audit_tv_theory", "TV general formula", ".4f"), ("audit_tv_uniform", "TV seed Thm 3.1 (eta_FP TV(T,D))", ".4f"),
        ("audit_tv_draft", "TV(T, D)", ".4f"), ("audit_kl_theory", "KL(law||T)", ".4f"),
        ("audit_kept_share", "drafted kept (measured)", ".3f"), ("audit_acceptance_theory", "kept (Thm A.4, general)", ".3f"),
    ])
    parts = [
        "# SPRINTER: what it costs, measured",
        "",
        f"Command: `{command}`",
        "",
        f"Pair: {result.get('pair', 'the embedded pair')}. Classifier: {result.get('classifier', 'the shipped one')}.",
        "",
        *([result["note"], ""] if result.get("note") else []),
        "SPRINTER (seed 003) drafts while a one-layer classifier on the draft's features says the drafted token is "
        "acceptable (its score is at least the decision threshold tau), and calls the target only on a token it "
        "rejects (speculative-sampling step there). It is not "
        "exact. Everything below was measured in one run on the shared 2-core CPU, methods interleaved prompt by "
        f"prompt: {s['prompts']} HumanEval prompts, {s['max_new_tokens']} new tokens each (EOS ignored), temperature "
        f"{s['temperature']:g}, sd with L = {s['draft_length']}, sprinter runs capped at {s['sprinter_cap']} tokens, "
        f"classifier trained with lambda = {result['ratio_threshold']:g} on {result.get('features') or 'its features'}.",
        "",
    ]
    if roc is not None:
        parts += ["## The classifier: ROC on a held-out split", "",
                  f"{roc['samples']} drafted tokens, equal shares of the four prefix kinds of seed 003 section 3.2 "
                  f"({', '.join(f'{k}: {v}' for k, v in roc['kinds'].items())}); held-out split by sequence.", "",
                  table_of([dict(r, shipped="yes" if r.get("shipped") else "") for r in roc["results"]],
                           [("ratio_threshold", "lambda", "g"), ("features", "features", "s"), ("shipped", "shipped", "s"),
                            ("auc", "AUC", ".3f"), ("positive_share", "label-1 share", ".3f"),
                            ("false_positive_rate_at_half", "FP at threshold 0.5", ".3f"),
                            ("true_positive_rate_at_half", "TP at threshold 0.5", ".3f"), ("parameters", "parameters", "d")]),
                  "", f"![ROC]({img}/sprinter_roc.png)", ""]
    parts += [
        "## Speed and quality", "", speed, "",
        "ROUGE-L vs sd compares each completion with sd's completion of the same prompt and seed; the row "
        "`sd (seed + 1)` is the exact method against itself with another seed, the floor of this metric's noise.", "",
        f"![speed against deviation]({img}/sprinter_speed_deviation.png)", "",
        "## The classifier online (rates against the true ratio, from the target's scores afterwards)", "", audit, "",
        "## Theory against measurement", "",
        "Per decided position, the TV between SPRINTER's output law and the target's is sum_x eta(x) (D - T)_+(x) "
        "(our general form of seed 003 Theorem 3.1, `draftverify.theory.sprinter_tv`); with a deterministic "
        "classifier eta(x) is its decision on token x at that prefix, computed exactly. *TV measured* averages "
        "yes * (1 - T(x)/D(x))_+ over the tokens actually drafted, an unbiased estimate of the same quantity from "
        "the decoding's own draws (the target's scores come from one teacher-forced pass afterwards). The seed's "
        "uniform formula eta_FP TV(T, D) assumes one false-positive rate for every token and prefix."
        + (" " + result["audit_note"] if result.get("audit_note") else ""), "",
        theory, "", f"![theory against measurement]({img}/sprinter_theory.png)", "",
        "## Example (first prompt)", "",
    ]
    for name, text in result["examples"].items():
        parts += [f"**{name}**:", "", "```python", result["prompt_example"].rstrip("\n")[-300:] + text, "```", ""]
    path = results_dir / "sprinter.md"
    path.write_text("\n".join(parts) + "\n")
    return path

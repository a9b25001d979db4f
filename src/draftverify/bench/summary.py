"""Per-configuration summary of a decode sweep: the metrics of :mod:`.metrics` with bootstrap
intervals over (prompt, seed) units, the baseline ``ar`` of the same temperature and top-k measured
on the same units, and beside the measurements the closed forms of seed 002
(:mod:`draftverify.theory`): k = (1 - a^{L+1}) / (1 - a), S = k / (1 + L rho) and the optimal L.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from .. import theory
from ..engine import AR
from . import metrics

__all__ = ["summarize"]

_MB = 1 << 20


def _by_unit(records: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(r["prompt"], r["seed"]): r for r in records}


def _rouge(pairs: list[tuple[str, str]]) -> list[float]:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"])
    # identical texts score 1 even when they hold no word rouge-score tokenizes (it returns 0 then)
    return [1.0 if reference == text else scorer.score(reference, text)["rougeL"].fmeasure for reference, text in pairs]


def _theory(acceptance: float, rho: float | None, length: int, block_efficiency: float) -> dict[str, Any]:
    """Seed 002's closed forms at the measured acceptance and cost ratio."""
    out: dict[str, Any] = {"tokens_per_step_theory": float(theory.tokens_per_step(acceptance, length))}
    if rho is None or not np.isfinite(acceptance):
        return out
    out["speedup_theory"] = float(theory.speedup(acceptance, rho, length))
    out["speedup_plugin"] = block_efficiency / (1 + length * rho)  # measured k in the same formula
    if 0 < acceptance < 1 and rho > 0:
        best = theory.optimal_draft_length(acceptance, rho)
        out["optimal_length"], out["optimal_length_speedup"] = best.integer, best.speedup
    return out


def _speculative(rows: list[dict[str, Any]], length: int) -> dict[str, Any]:
    """Acceptance metrics of one configuration's runs (``rows`` in unit order)."""
    steps = np.concatenate([np.asarray(r["accepted"], dtype=np.int64) for r in rows])
    per_unit_tests = [metrics.verified_tests(r["accepted"], length).sum() for r in rows]
    return dict(
        acceptance=metrics.bootstrap_ratio([sum(r["accepted"]) for r in rows], per_unit_tests).as_dict(),
        acceptance_per_drafted=float(steps.sum() / (steps.size * length)),  # the common mistake, for contrast
        position_acceptance=[None if np.isnan(v) else float(v) for v in metrics.position_acceptance(steps, length)],
        accepted_histogram=metrics.accepted_histogram(steps, length).tolist(),
    )


def summarize(records: list[dict[str, Any]], exact: dict[str, bool]) -> list[dict[str, Any]]:
    """One row per configuration, in record order. ``exact[name]`` marks exact verifiers (for the
    greedy equality check at temperature 0). Needs the ``ar`` runs of every temperature."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record["key"]].append(record)
    baselines = {(g[0]["temperature"], g[0]["top_k"]): _by_unit(g) for g in groups.values() if g[0]["method"] == AR}
    summary = []
    for runs in groups.values():
        first = runs[0]
        base_units = baselines.get((first["temperature"], first["top_k"]))
        if base_units is None:
            raise ValueError(f"{first['label']}: no ar runs at temperature {first['temperature']} to compare with")
        runs = sorted(runs, key=lambda r: (r["seed"], r["prompt"]))
        base = [base_units[(r["prompt"], r["seed"])] for r in runs]
        summary.append(_row(runs, base, exact))
    return summary


def _row(runs: list[dict[str, Any]], base: list[dict[str, Any]], exact: dict[str, bool]) -> dict[str, Any]:
    first = runs[0]
    length = first["draft_length"]

    def column(rows: list[dict[str, Any]], name: str) -> list[float]:
        return [r[name] for r in rows]

    tokens, seconds = [len(r["tokens"]) for r in runs], column(runs, "seconds")
    base_tokens, base_seconds = [len(r["tokens"]) for r in base], column(base, "seconds")
    latencies = [metrics.latency(r["arrivals"], r["counts"]) for r in runs]
    row: dict[str, Any] = {k: first[k] for k in ("label", "key", "method", "options", "num_drafts", "draft_length",
                                                 "temperature", "top_k", "draft")}
    row.update(
        units=len(runs), tokens=int(sum(tokens)),
        tokens_per_second=metrics.bootstrap_ratio(tokens, seconds).as_dict(),
        speedup=metrics.bootstrap_ratio(tokens, seconds, baseline=(base_tokens, base_seconds)).as_dict(),
        block_efficiency=metrics.bootstrap_ratio(tokens, column(runs, "target_calls")).as_dict(),
        ttft=metrics.bootstrap_mean([x["ttft"] for x in latencies]).as_dict(),
        itl=metrics.bootstrap_mean([x["itl"] for x in latencies]).as_dict(),
        burstiness=metrics.bootstrap_mean([x["burstiness"] for x in latencies]).as_dict(),
    )
    peak = max(r["heap_peak"] or 0 for r in runs) + first["weights"]
    base_peak = max(r["heap_peak"] or 0 for r in base) + base[0]["weights"]
    row.update(peak_mb=peak / _MB, memory_overhead_mb=(peak - base_peak) / _MB)
    ar_target_call = sum(column(base, "target_seconds")) / sum(column(base, "target_calls"))
    target_call = sum(column(runs, "target_seconds")) / sum(column(runs, "target_calls"))
    row["target_call_ratio"] = target_call / ar_target_call  # a verification forward of L + 1 tokens vs one
    if first["method"] == AR:
        return row
    row.update(_speculative(runs, length))
    draft_calls = sum(column(runs, "draft_calls"))
    row["cost_ratio"] = sum(column(runs, "draft_seconds")) / draft_calls / ar_target_call if draft_calls else None
    row.update(_theory(row["acceptance"]["value"], row["cost_ratio"], length, row["block_efficiency"]["value"]))
    row["rouge_l_vs_ar"] = metrics.bootstrap_mean(_rouge([(b["text"] or "", r["text"] or "") for r, b in zip(runs, base)])).as_dict() \
        if first.get("text") is not None else None
    solves = sum(r["ot_solves"] for r in runs)
    row["ot_fallback_rate"] = sum(r["ot_fallbacks"] for r in runs) / solves if solves else None
    row["exact"] = exact.get(first["method"], False)
    if first["temperature"] == 0:
        row["greedy_equal"] = sum(r["tokens"] == b["tokens"] for r, b in zip(runs, base))
    return row

"""The Markdown report and the console table of a decode sweep, from its summary rows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..engine import AR
from ..tables import table, table_of
from .probes import REFERENCE_DRAWS

__all__ = ["markdown", "console_table"]


def _ci(cell: dict[str, float] | None, fmt: str = ".2f", scale: float = 1.0) -> str:
    if cell is None or cell["value"] != cell["value"]:  # None or NaN
        return "-"
    v, lo, hi = (cell[k] * scale for k in ("value", "low", "high"))
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _num(value: Any, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _deviation(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    if "error" in cell:
        return f"failed: {cell['error'].replace('|', '/')}"
    return f"{cell['tv']:.3f} ({cell['noise']:.3f}, p {cell['p_value']:.2g})"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any], plots: list[Path], folder: Path,
             deviation: dict[str, dict[str, float]]) -> str:
    """The report: command, settings, one table per metric family, the greedy check, the plots."""
    spec = [r for r in rows if r["method"] != AR]
    parts = [
        f"# {meta.get('title', 'Decode benchmark')}", "",
        f"Command: `{meta['command']}`", "",
        "Settings: " + ", ".join(f"{k} = {v}" for k, v in meta["settings"].items()), "",
        "Each (prompt, seed) is a unit; intervals are 95% bootstrap intervals over units. Acceptance is "
        "pooled over verified tokens (accepted / (accepted + rejected tests); drafted tokens after a "
        "rejection are not counted); block efficiency (BE) is committed tokens per target call; speedup "
        "is tokens/s over `ar`'s on the same units in the same run. Definitions: "
        "`draftverify.bench.metrics`.", "",
        "## Speed and acceptance", "",
        table(["configuration", "acceptance", "acceptance per drafted token", "block efficiency", "speedup vs ar", "tokens/s"],
               [[r["label"], _ci(r.get("acceptance")), _num(r.get("acceptance_per_drafted")),
                 _ci(r["block_efficiency"]), _ci(r["speedup"]), _ci(r["tokens_per_second"], ".1f")] for r in rows]), "",
        "## Latency and memory", "",
        "Burstiness is the coefficient of variation of the gaps between consecutive tokens (0 = steady). "
        "Peak memory = model weights + the heap peak sampled while decoding (a lower bound).", "",
        table(["configuration", "time to first token (ms)", "inter-token latency (ms)", "burstiness", "peak MB", "overhead vs ar MB"],
               [[r["label"], _ci(r["ttft"], ".1f", 1e3), _ci(r["itl"], ".2f", 1e3), _ci(r["burstiness"]),
                 _num(r["peak_mb"], ".1f"), _num(r["memory_overhead_mb"], "+.1f")] for r in rows]), "",
    ]
    if spec:
        parts += [
            "## Measured against seed 002's closed forms", "",
            "a = measured acceptance, rho = seconds per draft forward / seconds per `ar` target forward; "
            "k = (1 - a^(L+1)) / (1 - a) against the measured BE; S = k / (1 + L rho) (theory) and "
            "BE / (1 + L rho) (plug-in) against the measured speedup. The formula prices a verification "
            "forward like one `ar` forward; the measured ratio is in the 'target call' column.", "",
            table(["configuration", "a", "rho", "target call / ar call", "k theory", "BE measured",
                    "S theory", "S plug-in", "S measured", "optimal L (S)"],
                   [[r["label"], _num(r["acceptance"]["value"], ".3f"), _num(r.get("cost_ratio"), ".3f"),
                     _num(r["target_call_ratio"]), _num(r["tokens_per_step_theory"]), _num(r["block_efficiency"]["value"]),
                     _num(r.get("speedup_theory")), _num(r.get("speedup_plugin")), _num(r["speedup"]["value"]),
                     f"{r['optimal_length']} ({r['optimal_length_speedup']:.2f})" if "optimal_length" in r else "-"]
                    for r in spec]), "",
            "## Acceptance by position and accepted lengths", "",
            table(["configuration", "P(accept position i | tested), i = 1..L", "steps accepting 0..L tokens"],
                   [[r["label"], " ".join(_num(v) for v in r["position_acceptance"]),
                     " ".join(str(v) for v in r["accepted_histogram"])] for r in spec]), "",
            "## Quality and deviation", "",
            "ROUGE-L F against the `ar` completion of the same unit (exact methods give the level of "
            "two independent samples of the target). First-token TV: the law of the first committed "
            "token over many one-token decodings against the target's conditional at the prompt, "
            "beside the mean TV of as many exact draws (the estimator's floor) and the p-value of the measured TV "
            f"among {REFERENCE_DRAWS} such exact sets (small: a deviation; a TV above the floor with a large p is noise); "
            "inexact methods only.", "",
            table(["configuration", "exact", "ROUGE-L vs ar", "first-token TV (floor, p)", "OT fallback rate"],
                   [[r["label"], "yes" if r["exact"] else "no", _ci(r.get("rouge_l_vs_ar")),
                     _deviation(deviation.get(r["label"])),
                     _num(r.get("ot_fallback_rate"), ".3f")] for r in spec]), "",
        ]
    if meta.get("failures"):
        parts += ["## Configurations that failed", "",
                  "Their decoding raised; they are left out of every table above.", "",
                  table(["configuration", "error"], [[label, message.replace("|", "/")] for label, message in meta["failures"].items()]), ""]
    greedy = [r for r in spec if "greedy_equal" in r]
    if greedy:
        parts += ["## Greedy equality at temperature 0", "",
                  "Every exact method's completion must equal `ar`'s token for token (inexact methods are "
                  "listed for information).", "",
                  table(["configuration", "exact", "equal to ar"],
                         [[r["label"], "yes" if r["exact"] else "no", f"{r['greedy_equal']} / {r['units']}"] for r in greedy]), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{p.stem}]({os.path.relpath(p, folder)})" for p in plots] + [""]
    return "\n".join(parts)


def console_table(rows: list[dict[str, Any]]) -> str:
    """The compact table printed after the JSON."""
    flat = [dict(label=r["label"], acceptance=(r.get("acceptance") or {}).get("value"),
                 be=r["block_efficiency"]["value"], speedup=r["speedup"]["value"], low=r["speedup"]["low"],
                 high=r["speedup"]["high"], tps=r["tokens_per_second"]["value"], rho=r.get("cost_ratio"),
                 theory=r.get("speedup_theory")) for r in rows]
    columns = [("label", "configuration", "s"), ("acceptance", "acceptance", ".3f"), ("be", "BE", ".2f"),
               ("speedup", "speedup", ".2f"), ("low", "low", ".2f"), ("high", "high", ".2f"),
               ("tps", "tokens/s", ".1f"), ("rho", "rho", ".3f"), ("theory", "S theory", ".2f")]
    return table_of(flat, columns, markdown=False)

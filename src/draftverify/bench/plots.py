"""PNG plots of a decode sweep (matplotlib, Agg backend), from the summary rows.

Each plot varies one sweep dimension (K, L or temperature) and holds the others at their most
frequent value; it is drawn only when that dimension takes at least two values. Points are the
measurements with their 95% bootstrap intervals, joined by lines along K and L; along temperature
they stand alone, since the sweep measures a few settings and a line between them would draw a
trend nobody measured. Dashed lines are seed 002's closed forms for ``sd`` at its measured
acceptance a and cost ratio rho.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .. import theory
from ..engine import AR

__all__ = ["plot_all"]

def _modal(rows: list[dict[str, Any]], name: str) -> Any:
    """The most frequent value (ties: the largest, so a sweep over {0, 1} plots temperature 1)."""
    counts = Counter(r[name] for r in rows)
    return max(counts, key=lambda v: (counts[v], v))


def _lines(rows: list[dict[str, Any]], x: str) -> dict[str, list[dict[str, Any]]]:
    """Speculative rows grouped into lines along ``x``: one line per method, draft kind and (unless
    ``x`` is K) K; L and temperature, when not ``x``, held at their modal value."""
    spec = [r for r in rows if r["method"] != AR]
    held = {d: _modal(spec, d) for d in ("draft_length", "temperature") if d != x and spec}
    lines: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in spec:
        if all(r[d] == v for d, v in held.items()):
            name = r["label"].split(" ")[0] + ("" if x == "num_drafts" else f" K={r['num_drafts']}")
            name += "" if r.get("exact", True) else " (inexact)"
            lines[name].append(r)
    return {k: sorted(v, key=lambda r: r[x]) for k, v in lines.items() if len({r[x] for r in v}) >= 2}


def _errorbar(axis, rows: list[dict[str, Any]], x: str, metric: str, label: str) -> Any:
    xs = np.array([r[x] for r in rows], dtype=float)
    values = np.array([r[metric]["value"] for r in rows])
    spread = np.array([[r[metric]["value"] - r[metric]["low"], r[metric]["high"] - r[metric]["value"]] for r in rows]).T
    style = "none" if x == "temperature" else "-"  # settings, not a measured trend (module doc)
    return axis.errorbar(xs, values, yerr=np.maximum(spread, 0), marker="o", linestyle=style, capsize=3, label=label)


def _sd_theory(axis, rows: list[dict[str, Any]], metric: str, color: str) -> None:
    """Seed 002's curve along L for an sd line: k(L) or S(L) = k / (1 + L rho)."""
    a = float(np.mean([r["acceptance"]["value"] for r in rows]))
    rho = np.mean([r["cost_ratio"] for r in rows if r.get("cost_ratio") is not None]) if metric == "speedup" else 0.0
    grid = np.arange(1, max(r["draft_length"] for r in rows) + 1)
    curve = theory.speedup(a, rho, grid) if metric == "speedup" else theory.tokens_per_step(a, grid)
    axis.plot(grid, curve, "--", color=color, label=f"seed 002 theory (a={a:.2f}" + (f", rho={rho:.2f})" if metric == "speedup" else ")"))


def _figure(rows, x: str, metrics: list[tuple[str, str]], xlabel: str, title: str, path: Path, theory_for: tuple[str, ...] = ()) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = _lines(rows, x)
    if not lines:
        return False
    figure, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4), squeeze=False)
    for axis, (metric, ylabel) in zip(axes[0], metrics):
        for name, line in lines.items():
            bars = _errorbar(axis, line, x, metric, name)
            if metric in theory_for and line[0]["method"] == "sd":
                _sd_theory(axis, line, metric, bars.lines[0].get_color())
        if metric == "speedup":
            axis.axhline(1.0, color="grey", linewidth=0.8)
        if x != "temperature":
            axis.xaxis.get_major_locator().set_params(integer=True)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def plot_all(rows: list[dict[str, Any]], folder: Path, prefix: str = "decode") -> list[Path]:
    """Write the plots that the sweep's dimensions allow; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    plans = [
        ("num_drafts", [("acceptance", "acceptance (per verified token)")], "drafts K", "acceptance vs K", "acceptance_vs_k", ()),
        ("draft_length", [("block_efficiency", "tokens per target call")], "draft length L",
         "block efficiency vs L", "block_efficiency_vs_l", ("block_efficiency",)),
        ("draft_length", [("speedup", "speedup over ar (wall clock)")], "draft length L", "speedup vs L",
         "speedup_vs_l", ("speedup",)),
        ("temperature", [("block_efficiency", "tokens per target call"), ("speedup", "speedup over ar")],
         "temperature", "block efficiency and speedup vs temperature", "vs_temperature", ()),
    ]
    written = []
    for x, metrics, xlabel, title, name, theory_for in plans:
        path = folder / f"{prefix}_{name}.png"
        if _figure(rows, x, metrics, xlabel, title, path, theory_for):
            written.append(path)
    return written

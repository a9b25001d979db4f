"""bench/plots: which sweeps get a figure, and lines only where a trend was measured."""

from __future__ import annotations

from draftverify.bench import plots


def _row(length: int, temperature: float) -> dict:
    metric = {"value": 2.0 + length / 10, "low": 1.9, "high": 2.6}
    rate = {"value": 0.7, "low": 0.65, "high": 0.75}
    return dict(method="sd", label=f"sd@draft K=1 L={length} T={temperature:g}", num_drafts=1, draft_length=length,
                temperature=temperature, acceptance=rate, block_efficiency=metric, speedup=metric, cost_ratio=0.2)


def test_lines_join_draft_lengths_but_not_temperatures(tmp_path, monkeypatch):
    styles = {}
    errorbar = plots._errorbar

    def spy(axis, rows, x, metric, label):
        bars = errorbar(axis, rows, x, metric, label)
        styles[x] = bars.lines[0].get_linestyle()
        return bars

    monkeypatch.setattr(plots, "_errorbar", spy)
    rows = [_row(length, t) for length in (2, 4) for t in (0.5, 1.0)]
    written = plots.plot_all(rows, tmp_path, prefix="t")
    assert {p.name for p in written} == {"t_block_efficiency_vs_l.png", "t_speedup_vs_l.png", "t_vs_temperature.png"}
    assert styles == {"draft_length": "-", "temperature": "None"}

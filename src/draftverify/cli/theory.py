"""`draftverify theory TOPIC`: the closed forms of :mod:`draftverify.theory` as small tables.

Topics: speedup, tokens-per-step, optimal-length, temperature, kseq, sprinter, global-resolution.
``--plot FILE.png`` draws a curve where one helps (speedup, temperature).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import typer
from typer.models import OptionInfo

from .. import theory
from ..tables import table
from ._command import Command, above, below

__all__ = ["app"]

app = typer.Typer(help="Closed forms and bounds from the seed papers, as tables.")


def _probabilities(text: str) -> np.ndarray:
    """A comma-separated probability vector, e.g. ``0.5,0.3,0.2`` (validated by the theory functions)."""
    try:
        return np.array([float(part) for part in text.split(",")])
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers such as 0.5,0.3,0.2, got {text!r}") from None


def _law(help_text: str, default: str | None) -> OptionInfo:
    """The option of a probability vector written ``0.5,0.3,0.2``."""
    return typer.Option(parser=_probabilities, metavar="P,P,...", help=help_text, show_default=default or "none")


Acceptances = Annotated[list[float], typer.Option(min=0.0, max=1.0, metavar="A...",
                                                  help="Acceptance rates a (0 <= a <= 1).")]
DraftLengths = Annotated[list[int], typer.Option(min=0, metavar="L...", help="Draft lengths L.")]
Plot = Annotated[str | None, typer.Option(metavar="FILE.png", help="Also draw the curve into this PNG file.",
                                          show_default="no plot")]


def _cell(value) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{value:.3e}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"


def _print_table(header: list[str], rows: list[list]) -> None:
    print(table(header, [[_cell(v) for v in row] for row in rows], markdown=False))


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4))


def _save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


@app.command("speedup", cls=Command)
def speedup(
    acceptance: Acceptances = [0.8],
    rho: Annotated[float, typer.Option(min=0.0, help="Draft cost / target cost per forward.")] = 0.05,
    draft_length: DraftLengths = list(range(1, 11)),
    plot: Plot = None,
) -> int:
    """Speedup S(L) = k / (1 + L rho) (seed 002)."""
    lengths = np.array(draft_length)
    rows = []
    for a in acceptance:
        best = theory.optimal_draft_length(a, rho) if a < 1 else None
        for length, k, s in zip(lengths, theory.tokens_per_step(a, lengths), theory.speedup(a, rho, lengths)):
            mark = "*" if best is not None and length == best.integer else ""
            rows.append([a, int(length), float(k), float(s), mark])
    print(f"S = k / (1 + L rho), k = (1 - a^(L+1)) / (1 - a); rho = {rho}  (seed 002; * = best L listed)")
    _print_table(["acceptance", "L", "tokens/step", "speedup", "opt"], rows)
    if plot:
        fig, ax = _figure()
        grid = np.arange(0, max(int(lengths.max()), 1) + 1)
        for a in acceptance:
            ax.plot(grid, theory.speedup(a, rho, grid), marker="o", markersize=3, label=f"a = {a:g}")
            if a < 1:
                best = theory.optimal_draft_length(a, rho)
                if best.integer <= grid[-1]:
                    ax.plot([best.integer], [best.speedup], "k*", markersize=10)
        ax.set(xlabel="draft length L", ylabel="speedup S", title=f"S(L) = k(L) / (1 + L rho), rho = {rho:g}")
        ax.grid(alpha=0.3)
        ax.legend(title="acceptance (* = optimal L)")
        _save(fig, plot)
    return 0


@app.command("tokens-per-step", cls=Command)
def tokens_per_step(
    acceptance: Acceptances = [0.5, 0.7, 0.8, 0.9, 0.95],
    draft_length: DraftLengths = [3, 5, 7, 10],
) -> int:
    """Expected tokens per step (1 - a^(L+1)) / (1 - a) (seed 002)."""
    rows = [[a] + [float(v) for v in theory.tokens_per_step(a, draft_length)] for a in acceptance]
    print("E[tokens per step] = (1 - a^(L+1)) / (1 - a)  (seed 002)")
    _print_table(["acceptance"] + [f"L={length}" for length in draft_length], rows)
    return 0


@app.command("optimal-length", cls=Command)
def optimal_length(
    acceptance: Annotated[list[float], typer.Option(min=0.0, callback=below(1.0), metavar="A...",
                                                    help="Acceptance rates a (0 <= a < 1).")] = [0.6, 0.7, 0.8, 0.9],
    rho: Annotated[list[float], typer.Option(callback=above(0.0), metavar="RHO...",
                                             help="Draft cost / target cost per forward (> 0).")] = [0.05],
) -> int:
    """The draft length maximising the speedup (seed 002)."""
    rows = []
    for a in acceptance:
        for cost in rho:
            best = theory.optimal_draft_length(a, cost)
            rows.append([a, cost, best.continuous, best.integer, best.speedup])
    print("L* solves -a^(L+1) ln a (1 + L rho) = rho (1 - a^(L+1))  (seed 002)")
    _print_table(["acceptance", "rho", "L* (real)", "L* (integer)", "speedup"], rows)
    return 0


@app.command("temperature", cls=Command)
def temperature(
    target: Annotated[np.ndarray | None, _law("The target law q.", "0.5,0.25,0.15,0.1")] = None,
    tau: Annotated[list[float], typer.Option(callback=above(0.0), metavar="TAU...",
                                             help="Temperatures tau (> 0).")] = [0.8],
    rho: Annotated[float | None, typer.Option(help="Radius of Theorem 4.2, with |tau - 1| <= rho < 1.",
                                              show_default="the largest |tau - 1|")] = None,
    plot: Plot = None,
) -> int:
    """TV of a re-tempered target: its law and bound (seed 000 section 4)."""
    target = np.array([0.5, 0.25, 0.15, 0.1]) if target is None else target
    taus = np.array(tau)
    radius = rho if rho is not None else float(np.max(np.abs(taus - 1)))
    if not np.max(np.abs(taus - 1)) <= radius < 1:
        raise ValueError(f"--rho must satisfy |tau - 1| <= rho < 1 for every --tau, got rho = {radius:g}")
    law = theory.temperature_law(target, taus, radius)
    rows = [[float(t), float(e), float(f), float(r), float(b)] for t, e, f, r, b in zip(
        taus, law.exact_tv, law.first_order, law.remainder, law.bound)]
    print(f"TV(p_tau, q) vs |tau - 1|/2 MAD_q[log q] (seed 000 Thm 4.1), bound C(m, rho)(tau - 1)^2 (Thm 4.2), "
          f"rho = {radius:g}")
    _print_table(["tau", "exact TV", "first order", "remainder", "bound"], rows)
    if plot:
        fig, ax = _figure()
        grid = np.linspace(1 - radius, 1 + radius, 101)
        curve = theory.temperature_law(target, grid, radius)
        ax.plot(grid, curve.exact_tv, label="exact TV(p_tau, q)")
        ax.plot(grid, curve.first_order, "--", label="|tau - 1|/2 MAD_q[log q]")
        ax.set(xlabel="tau", ylabel="rejection probability", title="temperature law (seed 000, Theorem 4.1)")
        ax.grid(alpha=0.3)
        ax.legend()
        _save(fig, plot)
    return 0


@app.command("kseq", cls=Command)
def kseq(
    target: Annotated[np.ndarray | None, _law("The target law.", "0.9,0.1")] = None,
    draft: Annotated[np.ndarray | None, _law("The draft law.", "0.5,0.5")] = None,
    num_drafts: Annotated[list[int], typer.Option(min=1, metavar="K...", help="Numbers of i.i.d. drafts K.")] = [1, 2, 4],
) -> int:
    """K-SEQ, alpha* and SpecTr-GBV's claim for K i.i.d. drafts at one position."""
    target = np.array([0.9, 0.1]) if target is None else target
    draft = np.array([0.5, 0.5]) if draft is None else draft
    _same_size(target, draft)
    rows = []
    for k in num_drafts:
        values = theory.multidraft_acceptance(target, draft, k)
        rho = float(theory.kseq_rho(target, draft, k))
        rows.append([k, rho, values.kseq, values.optimal, values.kseq_guarantee, values.spectr_gbv_claim])
    print("K i.i.d. drafts, one position: K-SEQ (Sun et al. 2023), alpha* (Hu et al. 2025), "
          "seed 004 Lemma 5.1 at L = 1")
    _print_table(["K", "rho*", "K-SEQ", "alpha*", "(1-1/e)alpha*", "SpecTr-GBV claim"], rows)
    return 0


@app.command("sprinter", cls=Command)
def sprinter(
    true_positive: Annotated[float, typer.Option(min=0.0, callback=below(1.0),
                                                 help="eta_TP, the classifier's true-positive rate (< 1).")] = 0.9,
    false_positive: Annotated[float, typer.Option(min=0.0, callback=below(1.0),
                                                  help="eta_FP, the classifier's false-positive rate (< 1).")] = 0.3,
    run: Annotated[int, typer.Option(min=0, help="r: acceptable drafted tokens before the first bad one.")] = 5,
    draft_time: Annotated[float, typer.Option(min=0.0, help="t_d, the time of one draft step (the unit of E[T_stop]).")] = 1.0,
    target: Annotated[np.ndarray | None, _law("The target law, for the output law (give --draft too).", None)] = None,
    draft: Annotated[np.ndarray | None, _law("The draft law, for the output law (give --target too).", None)] = None,
) -> int:
    """SPRINTER's run length, stopping time and output law (seed 003)."""
    run_length = theory.sprinter_run_length(true_positive, false_positive, run)
    stop = theory.sprinter_stopping_time(true_positive, false_positive, run, draft_time)
    print("SPRINTER stylised run (seed 003, Theorems 3.3 and 3.4)")
    _print_table(["eta_TP", "eta_FP", "r", "E[N]", "E[T_stop]"],
                 [[true_positive, false_positive, run, run_length.mean, stop]])
    if target is not None or draft is not None:
        if target is None or draft is None:
            raise ValueError("give both --target and --draft for the output law")
        _same_size(target, draft)
        tv = theory.sprinter_tv(target, draft, false_positive)
        accept = theory.sprinter_acceptance(target, draft, false_positive)
        law = theory.sprinter_output_law(target, draft, false_positive)
        print("\noutput law (1 - eta_FP) T + eta_FP D (Theorem 3.1), acceptance (Theorem A.4)")
        _print_table(["TV(T, law)", "acceptance", "law"],
                     [[float(tv), float(accept), ",".join(f"{p:.4f}" for p in law)]])
    return 0


@app.command("global-resolution", cls=Command)
def global_resolution(
    tau: Annotated[float, typer.Option(min=0.0, help="The error threshold tau of Global Resolution.")] = 1e-3,
    draft_length: Annotated[int, typer.Option(min=1, help="L, the tokens the multi-step bound covers.")] = 1,
) -> int:
    """Global Resolution's error guarantees (seed 001)."""
    bounds = theory.global_resolution_bounds(tau, draft_length)
    print("Global Resolution guarantees (seed 001, Lemma 6.6 and Theorem R.1)")
    _print_table(["tau", "L", "L1 to target", "below alpha*", f"L1 over {draft_length} tokens"],
                 [[tau, draft_length, bounds.l1, bounds.acceptance, bounds.multi_step_l1]])
    return 0


def _same_size(target: np.ndarray, draft: np.ndarray) -> None:
    if target.shape != draft.shape:
        raise ValueError(f"--target and --draft must have as many entries, got {target.size} and {draft.size}")

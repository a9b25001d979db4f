"""`draftverify theory TOPIC`: the closed forms of :mod:`draftverify.theory` as small tables.

Topics: speedup, tokens-per-step, optimal-length, temperature, kseq, sprinter, global-resolution.
``--plot FILE.png`` draws a curve where one helps (speedup, temperature).
"""

from __future__ import annotations

import argparse

import numpy as np

from .. import theory


def _probabilities(text: str) -> np.ndarray:
    """A comma-separated probability vector, e.g. ``0.5,0.3,0.2`` (validated by the theory functions)."""
    try:
        return np.array([float(part) for part in text.split(",")])
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from error


def _cell(value) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{value:.3e}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"


def _print_table(header: list[str], rows: list[list]) -> None:
    cells = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6, 4))


def _save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def _speedup(args: argparse.Namespace) -> int:
    lengths = np.array(args.draft_length)
    rows = []
    for a in args.acceptance:
        best = theory.optimal_draft_length(a, args.rho) if a < 1 else None
        for length, k, s in zip(lengths, theory.tokens_per_step(a, lengths), theory.speedup(a, args.rho, lengths)):
            mark = "*" if best is not None and length == best.integer else ""
            rows.append([a, int(length), float(k), float(s), mark])
    print(f"S = k / (1 + L rho), k = (1 - a^(L+1)) / (1 - a); rho = {args.rho}  (seed 002; * = best L listed)")
    _print_table(["acceptance", "L", "tokens/step", "speedup", "opt"], rows)
    if args.plot:
        fig, ax = _figure()
        grid = np.arange(0, max(int(lengths.max()), 1) + 1)
        for a in args.acceptance:
            ax.plot(grid, theory.speedup(a, args.rho, grid), marker="o", markersize=3, label=f"a = {a:g}")
            if a < 1:
                best = theory.optimal_draft_length(a, args.rho)
                if best.integer <= grid[-1]:
                    ax.plot([best.integer], [best.speedup], "k*", markersize=10)
        ax.set(xlabel="draft length L", ylabel="speedup S", title=f"S(L) = k(L) / (1 + L rho), rho = {args.rho:g}")
        ax.grid(alpha=0.3)
        ax.legend(title="acceptance (* = optimal L)")
        _save(fig, args.plot)
    return 0


def _tokens_per_step(args: argparse.Namespace) -> int:
    rows = [[a] + [float(v) for v in theory.tokens_per_step(a, args.draft_length)] for a in args.acceptance]
    print("E[tokens per step] = (1 - a^(L+1)) / (1 - a)  (seed 002)")
    _print_table(["acceptance"] + [f"L={length}" for length in args.draft_length], rows)
    return 0


def _optimal_length(args: argparse.Namespace) -> int:
    rows = []
    for a in args.acceptance:
        for rho in args.rho:
            best = theory.optimal_draft_length(a, rho)
            rows.append([a, rho, best.continuous, best.integer, best.speedup])
    print("L* solves -a^(L+1) ln a (1 + L rho) = rho (1 - a^(L+1))  (seed 002)")
    _print_table(["acceptance", "rho", "L* (real)", "L* (integer)", "speedup"], rows)
    return 0


def _temperature(args: argparse.Namespace) -> int:
    taus = np.array(args.tau)
    rho = args.rho if args.rho is not None else float(np.max(np.abs(taus - 1)))
    law = theory.temperature_law(args.target, taus, rho)
    rows = [[float(t), float(e), float(f), float(r), float(b)] for t, e, f, r, b in zip(
        taus, law.exact_tv, law.first_order, law.remainder, law.bound)]
    print(f"TV(p_tau, q) vs |tau - 1|/2 MAD_q[log q] (seed 000 Thm 4.1), bound C(m, rho)(tau - 1)^2 (Thm 4.2), "
          f"rho = {rho:g}")
    _print_table(["tau", "exact TV", "first order", "remainder", "bound"], rows)
    if args.plot:
        fig, ax = _figure()
        grid = np.linspace(1 - rho, 1 + rho, 101)
        curve = theory.temperature_law(args.target, grid, rho)
        ax.plot(grid, curve.exact_tv, label="exact TV(p_tau, q)")
        ax.plot(grid, curve.first_order, "--", label="|tau - 1|/2 MAD_q[log q]")
        ax.set(xlabel="tau", ylabel="rejection probability", title="temperature law (seed 000, Theorem 4.1)")
        ax.grid(alpha=0.3)
        ax.legend()
        _save(fig, args.plot)
    return 0


def _kseq(args: argparse.Namespace) -> int:
    rows = []
    for k in args.drafts:
        values = theory.multidraft_acceptance(args.target, args.draft, k)
        rho = float(theory.kseq_rho(args.target, args.draft, k))
        rows.append([k, rho, values.kseq, values.optimal, values.kseq_guarantee, values.spectr_gbv_claim])
    print("K i.i.d. drafts, one position: K-SEQ (Sun et al. 2023), alpha* (Hu et al. 2025), "
          "seed 004 Lemma 5.1 at L = 1")
    _print_table(["K", "rho*", "K-SEQ", "alpha*", "(1-1/e)alpha*", "SpecTr-GBV claim"], rows)
    return 0


def _sprinter(args: argparse.Namespace) -> int:
    run = theory.sprinter_run_length(args.true_positive, args.false_positive, args.run)
    stop = theory.sprinter_stopping_time(args.true_positive, args.false_positive, args.run, args.draft_time)
    print("SPRINTER stylised run (seed 003, Theorems 3.3 and 3.4)")
    _print_table(["eta_TP", "eta_FP", "r", "E[N]", "E[T_stop]"],
                 [[args.true_positive, args.false_positive, args.run, run.mean, stop]])
    if args.target is not None or args.draft is not None:
        if args.target is None or args.draft is None:
            raise ValueError("give both --target and --draft for the output law")
        tv = theory.sprinter_tv(args.target, args.draft, args.false_positive)
        accept = theory.sprinter_acceptance(args.target, args.draft, args.false_positive)
        print("\noutput law (1 - eta_FP) T + eta_FP D (Theorem 3.1), acceptance (Theorem A.4)")
        _print_table(["TV(T, law)", "acceptance", "law"],
                     [[float(tv), float(accept), ",".join(f"{p:.4f}" for p in theory.sprinter_output_law(
                         args.target, args.draft, args.false_positive))]])
    return 0


def _global_resolution(args: argparse.Namespace) -> int:
    bounds = theory.global_resolution_bounds(args.tau, args.draft_length)
    print("Global Resolution guarantees (seed 001, Lemma 6.6 and Theorem R.1)")
    _print_table(["tau", "L", "L1 to target", "below alpha*", f"L1 over {args.draft_length} tokens"],
                 [[args.tau, args.draft_length, bounds.l1, bounds.acceptance, bounds.multi_step_l1]])
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("theory", help="closed forms and bounds from the seed papers, as tables")
    topics = parser.add_subparsers(dest="topic", required=True)
    floats = {"type": float, "nargs": "+"}
    ints = {"type": int, "nargs": "+"}

    p = topics.add_parser("speedup", help="speedup S(L) = k / (1 + L rho) (seed 002)")
    p.add_argument("--acceptance", default=[0.8], **floats)
    p.add_argument("--rho", type=float, default=0.05, help="draft cost / target cost per forward")
    p.add_argument("--draft-length", default=list(range(1, 11)), **ints)
    p.add_argument("--plot", metavar="FILE.png", help="draw S against L for each acceptance")
    p.set_defaults(func=_speedup)

    p = topics.add_parser("tokens-per-step", help="(1 - a^(L+1)) / (1 - a) (seed 002)")
    p.add_argument("--acceptance", default=[0.5, 0.7, 0.8, 0.9, 0.95], **floats)
    p.add_argument("--draft-length", default=[3, 5, 7, 10], **ints)
    p.set_defaults(func=_tokens_per_step)

    p = topics.add_parser("optimal-length", help="the draft length maximising the speedup (seed 002)")
    p.add_argument("--acceptance", default=[0.6, 0.7, 0.8, 0.9], **floats)
    p.add_argument("--rho", default=[0.05], **floats)
    p.set_defaults(func=_optimal_length)

    p = topics.add_parser("temperature", help="TV of a re-tempered target: law and bound (seed 000 sec. 4)")
    p.add_argument("--target", type=_probabilities, default=np.array([0.5, 0.25, 0.15, 0.1]))
    p.add_argument("--tau", default=[0.8], **floats)
    p.add_argument("--rho", type=float, help="radius of Theorem 4.2 (default: the largest |tau - 1|)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the law against the exact TV over [1 - rho, 1 + rho]")
    p.set_defaults(func=_temperature)

    p = topics.add_parser("kseq", help="K-SEQ, alpha* and SpecTr-GBV's claim for K i.i.d. drafts")
    p.add_argument("--target", type=_probabilities, default=np.array([0.9, 0.1]))
    p.add_argument("--draft", type=_probabilities, default=np.array([0.5, 0.5]))
    p.add_argument("--drafts", default=[1, 2, 4], **ints)
    p.set_defaults(func=_kseq)

    p = topics.add_parser("sprinter", help="SPRINTER's run length, stopping time and output law (seed 003)")
    p.add_argument("--true-positive", type=float, default=0.9)
    p.add_argument("--false-positive", type=float, default=0.3)
    p.add_argument("--run", type=int, default=5, help="r: acceptable drafted tokens before the first bad one")
    p.add_argument("--draft-time", type=float, default=1.0)
    p.add_argument("--target", type=_probabilities)
    p.add_argument("--draft", type=_probabilities)
    p.set_defaults(func=_sprinter)

    p = topics.add_parser("global-resolution", help="Global Resolution's error guarantees (seed 001)")
    p.add_argument("--tau", type=float, default=1e-3)
    p.add_argument("--draft-length", type=int, default=1)
    p.set_defaults(func=_global_resolution)

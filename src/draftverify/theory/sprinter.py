"""SPRINTER (seed 003): approximate verification by a small classifier; its p is our target, its q
our draft.

The step, per position: draft x ~ D; a classifier says "acceptable" or not; "acceptable" keeps x
and drafting goes on; "not" calls the target on that position and applies the SD step (accept x
with min(1, T/D), else correct from norm((T - D)_+)). A token is *unacceptable* when D(x) > T(x);
the false-positive rate eta_FP is P(classifier says acceptable | unacceptable x), the true-positive
rate eta_TP is P(says acceptable | acceptable x).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formulas import overlap
from . import _validate

__all__ = [
    "sprinter_output_law",
    "sprinter_tv",
    "sprinter_acceptance",
    "RunLength",
    "sprinter_run_length",
    "sprinter_stopping_time",
]


def _law_terms(target_probs, draft_probs, false_positive_rate):
    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    eta = _validate.rate(false_positive_rate, "false_positive_rate")
    if eta.ndim and eta.shape != target.shape:
        raise ValueError(f"false_positive_rate: expected a number or shape {target.shape}, got {eta.shape}")
    eta = np.broadcast_to(eta, target.shape)
    excess = np.maximum(draft - target, 0.0)  # (D - T)_+: where unacceptable tokens come from
    shortfall = np.maximum(target - draft, 0.0)  # (T - D)_+: the correction's mass
    return target, draft, eta, excess, shortfall


def sprinter_output_law(target_probs, draft_probs, false_positive_rate) -> np.ndarray:
    """The law of a token SPRINTER emits at one position, ``[..., V]``.

    Seed 003, Theorem 3.1: with one false-positive rate eta for every token, (1 - eta) T + eta D.
    ``false_positive_rate`` may also be an array ``[..., V]``, eta(x) = P(accept | drafted x), of
    which only the entries with D(x) > T(x) matter (derived here; the seed has only the uniform
    case): law = T + eta (D - T)_+ - (T - D)_+ E / TV, with E = sum_y eta(y) (D - T)_+(y) the mass
    kept on unacceptable tokens. eta_TP never enters: the SD step keeps acceptable tokens anyway.
    """
    target, draft, eta, excess, shortfall = _law_terms(target_probs, draft_probs, false_positive_rate)
    kept = (eta * excess).sum(axis=-1, keepdims=True)  # E
    tv = shortfall.sum(axis=-1, keepdims=True)
    moved = np.divide(shortfall * kept, tv, out=np.zeros_like(shortfall), where=tv > 0)
    return target + eta * excess - moved


def sprinter_tv(target_probs, draft_probs, false_positive_rate) -> np.ndarray:
    """TV(T, SPRINTER's law) = sum_x eta(x) (D - T)_+(x); for a uniform eta, eta TV(T, D)
    (seed 003, Theorem 3.1)."""
    _, _, eta, excess, _ = _law_terms(target_probs, draft_probs, false_positive_rate)
    return (eta * excess).sum(axis=-1)


def sprinter_acceptance(target_probs, draft_probs, false_positive_rate) -> np.ndarray:
    """Probability that the drafted token is kept, 1 - (1 - eta_FP) TV(T, D) (seed 003, Theorem A.4,
    eq. 34-35); token-dependent eta: sum_x min(T, D) + sum_x eta(x) (D - T)_+(x)."""
    target, draft, eta, excess, _ = _law_terms(target_probs, draft_probs, false_positive_rate)
    return overlap(target, draft) + (eta * excess).sum(axis=-1)


@dataclass(frozen=True)
class RunLength:
    """Seed 003, Theorem 3.3 in its stylised model: ``pmf[i]`` = P(N = i) for i < len(pmf) (the
    tail beyond is ``tail``), ``mean`` = E[N]."""

    pmf: np.ndarray
    tail: float
    mean: float


def _run_inputs(true_positive_rate, false_positive_rate, acceptable_run) -> tuple[float, float, int]:
    tp = float(_validate.rate(true_positive_rate, "true_positive_rate", open_high=True))
    fp = float(_validate.rate(false_positive_rate, "false_positive_rate", open_high=True))
    r = int(_validate.count(acceptable_run, "acceptable_run"))
    return tp, fp, r


def sprinter_run_length(true_positive_rate, false_positive_rate, acceptable_run, *, support: int = 64) -> RunLength:
    """N = drafted tokens the classifier accepts before its first "no", when the first r drafted
    tokens are acceptable and all later ones are not, decisions independent (seed 003, Theorem 3.3):
    P(N = i) = eta_TP^i (1 - eta_TP) for i < r, eta_TP^r eta_FP^{i-r} (1 - eta_FP) for i >= r, and
    E[N] = (eta_TP - eta_TP^r) / (1 - eta_TP) + eta_TP^r / (1 - eta_FP) (eq. 3). Rates must be < 1
    (N is infinite otherwise). ``support``: how many pmf entries to list.
    """
    tp, fp, r = _run_inputs(true_positive_rate, false_positive_rate, acceptable_run)
    i = np.arange(int(_validate.count(support, "support", low=1)))
    pmf = np.where(i < r, tp**i * (1 - tp), tp**r * fp ** np.maximum(i - r, 0) * (1 - fp))
    mean = (tp - tp**r) / (1 - tp) + tp**r / (1 - fp)
    return RunLength(pmf=pmf, tail=float(1 - pmf.sum()), mean=float(mean))


def sprinter_stopping_time(true_positive_rate, false_positive_rate, acceptable_run, draft_time) -> float:
    """E[T_stop] = (1 - eta_TP^r) t_d / (1 - eta_TP) + eta_TP^r t_d / (1 - eta_FP) (seed 003,
    Theorem 3.4, eq. 4): the draft time up to and including the first rejected token,
    T_stop = t_d (N + 1) (its appendix A.3), i.e. t_d (E[N] + 1). The classifier's own time t_v
    is not counted."""
    tp, fp, r = _run_inputs(true_positive_rate, false_positive_rate, acceptable_run)
    t_d = float(_validate.rate(draft_time, "draft_time", high=np.inf))
    return (1 - tp**r) * t_d / (1 - tp) + tp**r * t_d / (1 - fp)

"""Temperature sensitivity: how far a temperature-scaled copy of the target is from the target.

Seed 000, section 4 (its q is our target; its p_tau, the draft, is the target at temperature
1 / tau: p_tau(v) = q(v)^tau / sum_u q(u)^tau on the target's support). This is the acceptance of
self-speculation with a re-tempered target as draft: rejection probability = TV(p_tau, q).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _validate

__all__ = [
    "tempered",
    "log_mad",
    "temperature_constant",
    "TemperatureLaw",
    "temperature_law",
    "TemperatureSchedule",
    "schedule_rejections",
]


def _tau(tau) -> np.ndarray:
    tau = _validate.as_float_array(tau, "tau")
    if np.any(tau <= 0):
        raise ValueError(f"tau must be > 0, got {tau}")
    return tau


def tempered(target_probs, tau) -> np.ndarray:
    """p_tau = T^tau / sum T^tau on supp(T), 0 elsewhere (seed 000, Theorem 4.1's definition).

    ``target_probs`` [..., V]; ``tau`` > 0 broadcasts against the leading axes.
    """
    target = _validate.distribution(target_probs, "target_probs")
    tau = _tau(tau)[..., None]
    logs = np.log(target, where=target > 0, out=np.full_like(target, -np.inf))  # -inf off the support
    powered = np.exp(tau * (logs - logs.max(axis=-1, keepdims=True)))  # [..., V], 0 off the support
    return powered / powered.sum(axis=-1, keepdims=True)


def log_mad(target_probs) -> np.ndarray:
    """MAD_q[log q(V)] = E_q |log q(V) - E_q log q(V)|, the coefficient of Theorem 4.1 (seed 000).
    Shape ``[...]`` for ``[..., V]``; zero-probability tokens do not contribute."""
    target = _validate.distribution(target_probs, "target_probs")
    logs = np.log(target, where=target > 0, out=np.zeros_like(target))
    mean = (target * logs).sum(axis=-1, keepdims=True)
    return (target * np.abs(logs - mean)).sum(axis=-1)


def temperature_constant(support_size, rho) -> np.ndarray:
    """C(m, rho) = (1 + rho log m) m^rho (4 m / (e^2 (1 - rho)^2) + (log m)^2 m^rho), seed 000
    Theorem 4.2: |TV(p_tau, q) - |tau - 1|/2 MAD_q[log q]| <= C(m, rho) (tau - 1)^2 whenever
    |supp q| <= m and |tau - 1| <= rho < 1."""
    m = _validate.count(support_size, "support_size", low=1).astype(np.float64)
    rho = _validate.rate(rho, "rho", open_high=True)
    log_m = np.log(m)
    return (1 + rho * log_m) * m**rho * (4 * m / (np.e**2 * (1 - rho) ** 2) + log_m**2 * m**rho)


@dataclass(frozen=True)
class TemperatureLaw:
    """``exact_tv`` = TV(p_tau, q); ``first_order`` = |tau - 1|/2 MAD_q[log q] (Theorem 4.1);
    ``remainder`` = |exact_tv - first_order|; ``bound`` = C(m, rho)(tau - 1)^2 (Theorem 4.2), with
    m = |supp q|. Arrays of the broadcast shape of the leading axes and ``tau``."""

    exact_tv: np.ndarray
    first_order: np.ndarray
    remainder: np.ndarray
    bound: np.ndarray


def temperature_law(target_probs, tau, rho=None) -> TemperatureLaw:
    """Exact TV(p_tau, q) beside seed 000's first-order law (Theorem 4.1) and its explicit
    second-order bound (Theorem 4.2).

    ``rho`` (default |tau - 1|) is the radius of Theorem 4.2: need |tau - 1| <= rho < 1. Erratum:
    Theorem 4.1 writes "|S| <= n"; the support bound is m.
    """
    target = _validate.distribution(target_probs, "target_probs")
    tau = _tau(tau)
    radius = np.abs(tau - 1) if rho is None else _validate.rate(rho, "rho", open_high=True)
    if np.any(np.abs(tau - 1) > radius) or np.any(radius >= 1):
        raise ValueError(f"need |tau - 1| <= rho < 1, got tau = {tau}, rho = {radius}")
    exact = 0.5 * np.abs(tempered(target, tau) - target).sum(axis=-1)
    first = 0.5 * np.abs(tau - 1) * log_mad(target)
    support = (target > 0).sum(axis=-1)
    bound = temperature_constant(support, radius) * (tau - 1) ** 2
    return TemperatureLaw(exact_tv=exact, first_order=first, remainder=np.abs(exact - first), bound=bound)


@dataclass(frozen=True)
class TemperatureSchedule:
    """Expected rejections per position n = 1..N along a temperature schedule (arrays [N]):
    ``exact`` = E_{x^{n-1} ~ T}[TV(p_{tau_n}, T_n)], ``first_order`` = the same expectation of the
    Theorem 4.1 term, ``bound`` = C(m, rho)(tau_n - 1)^2, the per-step remainder of Theorem 4.2
    (m = the largest support, rho = max |tau_n - 1|). Sum them for cumulative rejections."""

    exact: np.ndarray
    first_order: np.ndarray
    bound: np.ndarray


def schedule_rejections(target_tables, taus) -> TemperatureSchedule:
    """Cumulative expected rejections of one-proposal-per-position decoding whose draft at position
    n is the target at temperature 1 / tau_n (seed 000, end of section 4.1 and Theorem 4.2's
    "Consequently"). The output is exact, so prefixes follow the target's law.
    ``target_tables[n]`` [V]*(n+1): conditionals of position n + 1; ``taus`` [N]."""
    target = _validate.tables(target_tables, "target_tables")
    taus = _tau(taus)
    if taus.shape != (len(target),):
        raise ValueError(f"taus: expected one temperature per position, shape ({len(target)},), got {taus.shape}")
    radius = float(np.max(np.abs(taus - 1)))
    if radius >= 1:
        raise ValueError(f"need max |tau_n - 1| < 1, got {radius}")
    prefix_laws = [np.ones(())] + _validate.joint_laws(target)[:-1]
    exact, first = [], []
    for law, table, tau in zip(prefix_laws, target, taus):
        law_n = temperature_law(table, tau, rho=radius)
        exact.append(float((law * law_n.exact_tv).sum()))
        first.append(float((law * law_n.first_order).sum()))
    support = max(int((table > 0).sum(axis=-1).max()) for table in target)
    bound = temperature_constant(support, radius) * (taus - 1) ** 2
    return TemperatureSchedule(exact=np.array(exact), first_order=np.array(first), bound=bound)

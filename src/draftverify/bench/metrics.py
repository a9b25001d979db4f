"""Metrics of ``draftverify bench decode``: defined once here, computed from raw run records.

A *run* is one method decoding one prompt with one seed; a *unit* is a (prompt, seed) pair. Per
decoding step a verifier tests drafted positions in order; with ``a`` accepted tokens out of L
it made ``a + 1`` tests when ``a < L`` (the last one rejected) and ``L`` when it accepted all.
Drafted tokens after a rejection were never tested and are not counted (seed 002, "Acceptance
rate": the rate is per verified token). Definitions:

- acceptance = sum accepted / sum (accepted + rejected tests), pooled over all steps of a config;
- position acceptance i = P(position i accepted | position i tested) = #(a >= i) / #(a >= i - 1);
- block efficiency = committed tokens / target calls (seeds 001 and 004: "BE");
- speedup = (tokens/s of the method) / (tokens/s of ``ar``) on the same units in the same run;
- time to first token = seconds until the first step returns tokens (prefill included);
- inter-token latency = (t_last - t_first) / (n - 1) over the n generated tokens; burstiness =
  coefficient of variation of the per-token gaps (tokens committed by one step arrive together:
  gap 0), 0 for perfectly steady output;
- cost ratio rho = seconds per draft forward / seconds per target forward of ``ar`` (seed 002).

Confidence intervals: 95% percentile bootstrap over units, resampling units with replacement and
recomputing the pooled ratio (deterministic: fixed generator seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = [
    "Interval",
    "verified_tests",
    "acceptance",
    "position_acceptance",
    "accepted_histogram",
    "latency",
    "bootstrap_ratio",
    "bootstrap_mean",
]

_BOOTSTRAP = 1000


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% bootstrap interval."""

    value: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


def _accepted(accepted: Sequence[int], draft_length: int) -> np.ndarray:
    a = np.asarray(accepted, dtype=np.int64)
    if draft_length < 1:
        raise ValueError(f"draft_length must be >= 1, got {draft_length}")
    if a.ndim != 1 or (a.size and (a.min() < 0 or a.max() > draft_length)):
        raise ValueError(f"accepted counts must be a 1-d sequence in [0, {draft_length}], got {a.tolist()}")
    return a


def verified_tests(accepted: Sequence[int], draft_length: int) -> np.ndarray:
    """Tests made per step: a + 1 when the step rejected (a < L), L when it accepted everything."""
    a = _accepted(accepted, draft_length)
    return a + (a < draft_length)


def acceptance(accepted: Sequence[int], draft_length: int) -> float:
    """Pooled acceptance over verified tokens: sum a / sum tests (NaN without steps)."""
    tests = verified_tests(accepted, draft_length)
    return float(np.sum(accepted) / tests.sum()) if tests.sum() else float("nan")


def position_acceptance(accepted: Sequence[int], draft_length: int) -> np.ndarray:
    """``[L]``: entry i - 1 is P(position i accepted | tested) = #(a >= i) / #(a >= i - 1); NaN
    where no step reached position i."""
    a = _accepted(accepted, draft_length)
    reached = (a[None, :] >= np.arange(draft_length + 1)[:, None]).sum(1)  # [L + 1]: #(a >= i)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(reached[:-1] > 0, reached[1:] / np.maximum(reached[:-1], 1), np.nan)


def accepted_histogram(accepted: Sequence[int], draft_length: int) -> np.ndarray:
    """``[L + 1]``: number of steps that accepted 0, 1, ..., L draft tokens."""
    return np.bincount(_accepted(accepted, draft_length), minlength=draft_length + 1)


def latency(arrivals: Sequence[float], counts: Sequence[int]) -> dict[str, float]:
    """Time to first token, inter-token latency and burstiness of one run: step j returned
    ``counts[j]`` tokens ``arrivals[j]`` seconds after the run started."""
    times = np.asarray(arrivals, dtype=np.float64)
    counts_array = np.asarray(counts, dtype=np.int64)
    if times.shape != counts_array.shape or times.ndim != 1:
        raise ValueError("arrivals and counts must be 1-d sequences of the same length")
    times, counts_array = times[counts_array > 0], counts_array[counts_array > 0]
    if times.size == 0:
        raise ValueError("no step returned tokens")
    per_token = np.repeat(times, counts_array)  # [n] arrival time of each token
    gaps = np.diff(per_token)  # [n - 1]
    if gaps.size == 0 or gaps.mean() <= 0:
        return {"ttft": float(times[0]), "itl": float("nan"), "burstiness": float("nan")}
    return {"ttft": float(times[0]), "itl": float(gaps.mean()), "burstiness": float(gaps.std() / gaps.mean())}


def _resamples(units: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, units, size=(_BOOTSTRAP, units))  # [B, n]


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], *,
                    baseline: tuple[Sequence[float], Sequence[float]] | None = None, seed: int = 0) -> Interval:
    """sum numerators / sum denominators over units, with its bootstrap interval. With
    ``baseline`` = (numerators, denominators) of the same units, the ratio of the two pooled
    ratios (e.g. tokens/s over ``ar``'s), units resampled in pairs."""
    num, den = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if num.shape != den.shape or num.ndim != 1 or num.size == 0:
        raise ValueError("numerators and denominators must be equal-length non-empty 1-d sequences")
    value = num.sum() / den.sum()
    idx = _resamples(num.size, seed)
    boot = num[idx].sum(1) / den[idx].sum(1)  # [B]
    if baseline is not None:
        base_num, base_den = (np.asarray(x, dtype=np.float64) for x in baseline)
        if base_num.shape != num.shape or base_den.shape != num.shape:
            raise ValueError("baseline must cover the same units")
        value /= base_num.sum() / base_den.sum()
        boot = boot / (base_num[idx].sum(1) / base_den[idx].sum(1))
    low, high = np.nanpercentile(boot, [2.5, 97.5])
    return Interval(float(value), float(low), float(high))


def bootstrap_mean(values: Sequence[float], *, seed: int = 0) -> Interval:
    """The mean over units (NaNs dropped) with its bootstrap interval."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    boot = v[_resamples(v.size, seed)].mean(1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return Interval(float(v.mean()), float(low), float(high))

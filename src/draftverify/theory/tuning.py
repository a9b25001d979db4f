"""Tokens per target call of a decoding, predicted from one target-sampled path per prompt.

Notation: along a path y_1..y_N sampled from the (warped) target, ``ratios[t]`` =
rho_t = D(y_t | y^{t-1}) / T(y_t | y^{t-1}), the draft's over the target's probability of the
token the target drew. A verification call that starts at position t commits a block
y_t..y_{t+m-1}, m in 1..L+1.

The identity behind the estimator. If a verifier is exact, a decoding that emits blocks of law
P_block(. | prefix) has sequence law T, so the law of (sequence, block boundaries) factorises as
T(y) prod_k pi(block k), with pi_t(m) = P_block(y_t..y_{t+m-1} | y^{t-1}) / T(y_t..y_{t+m-1} | y^{t-1})
summing to 1 over m. Given a target-sampled path y, the boundaries are therefore a Markov chain
with transitions pi_t, and E[calls | y] follows by dynamic programming (:func:`expected_calls`):
an unbiased estimate of the expected number of calls to commit N tokens, hence of tokens per
call, from the path alone. With S_t(k) = "survival after k drafted tokens", pi_t(m) =
S_t(m - 1) - S_t(m) for m <= L and pi_t(L + 1) = S_t(L):

- ``sd`` (Leviathan et al. 2023, Algorithm 1): S_t(k) = prod_{j<k} min(1, rho_{t+j}), since it
  commits accepted x^A and a correction of law (T - D)_+ (or the bonus from T when A = L);
- ``bv`` (Sun et al., ICLR 2025, Algorithm 2): S_t(k) = min_{i<=k} prod_{j<i} rho_{t+j}; from
  P(tau >= i | x^i) = p_i and the correction norm((p_i T - D)_+), the block ends with w_{i+1} after
  tau = i with probability D(w^i) (p_i T(w_{i+1}) - D(w_{i+1}))_+ (tested against enumeration);
- ``submaximal`` with fraction lambda (seed 000, Proposition 3.2): S_t(k) = prod_{j<k} (1 - lambda)
  min(1, rho_{t+j}), since it accepts a drafted x with probability (1 - lambda) min(1, T(x) / D(x))
  (so P(draft y, accept) / T(y) = (1 - lambda) min(1, rho)) and its correction gives back the rest
  of T; lambda = 0 is ``sd``.

Drafts whose law depends on the depth within a block. A feature draft (EAGLE) reads the target's
hidden state at the first drafted position of a step and its own from the second on, so its law at
position t depends on the prefix y^{t-1} and on where the block started: D_d(y_t | y^{t-1}) when t
is the d-th drafted position (block start t - d + 1; the engine's first step, before the target
has scored the prompt, is the target's alone: one call for y_1, blocks from t = 2 on). The
identity needs only this: given the committed prefix y^{t-1}, a call starting at t draws its block
from a law that is a function of y^{t-1} (its length is t) and of nothing else of the past, the
draft's joint law prod_j D_{j+1}(w_{j+1} | y^{t-1} w^j), and the verifier is exact for any draft law, so
P_block(w | y^{t-1}) = T(w | y^{t-1}) pi_t(|w|) with pi_t built from that joint law. Multiplying
over the calls (each conditioned on all before it) gives the law of (sequence, boundaries) as
T(y) prod_k pi(block k): the sequence has law T, the boundaries given it are the same Markov chain,
and E[calls | path] averaged over target paths is E[calls], unbiased. The closed forms read
rho_{t+j} at depth j + 1. Every function below therefore takes per-depth arrays: ``ratios``
[N, L'] with column d - 1 = D_d(y_t) / T(y_t) (L' >= L), and a block starting at t reads the
diagonal ratios[t + j, j], j = 0..L-1 (entries [t, d - 1] with t < d - 1 are never read); an [N]
array means the same law at every depth (an ordinary draft: Llama, GPT-2, n-gram). Feeding a
depth-dependent draft's first-depth ratios as [N] predicts a wrong value (its later depths differ).

``kseq`` and ``multidraft-bv`` with K drafts are exact too (:func:`kseq_path_survival`,
:func:`multidraft_bv_path_survival`): their survival follows the law of how many drafts stay
alive. Where no such closed form is written (``ot`` with K > 1 drafts, ``gbv`` whose state
modifies the next call's target) :func:`plug_in_survival` gives an approximation: S_t(k) =
prod_{j<k} a_{t+j}, where a_t is the method's acceptance of one position given the target's prefix.
It is biased: the prefix a draft is tested on is an accepted draft prefix (law prod min(T, D)
normalised), not a target prefix (law T); for ``sd`` the gap between the two estimates is that
bias, and ``tune`` prints it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from . import _validate

__all__ = [
    "path_survival",
    "kseq_path_survival",
    "multidraft_bv_path_survival",
    "plug_in_survival",
    "gbv_expected_accepted",
    "expected_calls",
    "TokensPerCall",
    "tokens_per_call",
    "StepCosts",
    "fit_overhead",
    "least_squares_line",
    "predicted_tokens_per_second",
    "PATH_METHODS",
]

PATH_METHODS = ("sd", "bv", "submaximal")
"""The methods whose block law along a path :func:`path_survival` writes in closed form."""


def _depths(values, name: str, draft_length: int) -> np.ndarray:
    """``values`` [N] (the same at every depth) or [N, L'] (column d - 1: depth d, L' >= L) as
    per-depth values [N, L] (module doc)."""
    array = _validate.as_float_array(values, name)
    if array.ndim == 1:
        return np.repeat(array[:, None], draft_length, axis=1)
    if array.ndim != 2 or array.shape[1] < draft_length:
        raise ValueError(f"{name}: expected [N] (the same at every depth) or [N, L'] per depth with L' >= "
                         f"L = {draft_length}, got shape {array.shape}")
    return array[:, :draft_length]


def _windows(values: np.ndarray, fill) -> np.ndarray:
    """values[t + j, j] for j = 0..L-1 ([N, L, ...]) from per-depth ``values`` [N, L, ...]: what a
    block starting at t reads at its (j + 1)-th drafted position. Positions past the path's end hold
    ``fill`` (a number, or an array of the trailing shape; never read by :func:`expected_calls`: a
    block reaching past N ends the decoding)."""
    n, length = values.shape[:2]
    padded = np.concatenate([values, np.broadcast_to(fill, (length, *values.shape[1:]))])  # [N + L, L, ...]
    return padded[np.arange(n)[:, None] + np.arange(length), np.arange(length)]


def _ratios(ratios, draft_length: int) -> np.ndarray:
    """Per-depth ratios [N, L] (:func:`_depths`), checked >= 0."""
    rho = _depths(ratios, "ratios", draft_length)
    if np.any(rho < 0):
        raise ValueError("ratios: expected finite values >= 0 (draft over target probability)")
    return rho


def path_survival(ratios, draft_length: int, method: str, *, fraction: float | None = None) -> np.ndarray:
    """S_t(k) for k = 0..L ([N, L + 1], S_t(0) = 1) of ``sd``, ``bv`` or ``submaximal`` (its
    ``fraction`` lambda in [0, 1], given for it alone) along one target path (see the module doc):
    ``ratios`` [N] or per depth [N, L'] = D(y_t) / T(y_t) >= 0 at the tokens the target drew."""
    length = int(_validate.count(draft_length, "draft_length", low=1))
    if (fraction is not None) != (method == "submaximal"):
        raise ValueError(f"fraction: submaximal takes it and only submaximal, got {fraction!r} for {method!r}")
    if fraction is not None and not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction: expected a value in [0, 1], got {fraction!r}")
    windows = _windows(_ratios(ratios, length), 1.0)  # [N, L]
    ones = np.ones((len(windows), 1))
    if method in ("sd", "submaximal"):
        kept = 1.0 - (fraction or 0.0)  # the share of the overlap a position accepts
        return np.concatenate([ones, np.cumprod(kept * np.minimum(windows, 1.0), axis=1)], axis=1)
    if method == "bv":
        products = np.concatenate([ones, np.cumprod(windows, axis=1)], axis=1)  # prod_{j<i} rho, i = 0..L
        return np.minimum.accumulate(products, axis=1)
    raise ValueError(f"method: no closed form along a path for {method!r}; known: {', '.join(PATH_METHODS)}")


def _position_laws(position_laws, draft_length: int, *, substochastic: bool = False) -> tuple[np.ndarray, int]:
    """The position laws [N, L', K, K] >= 0 (an [N, K, K] input: the same at every depth; with
    ``substochastic`` every row summing to at most 1) checked, as a block starting at t reads them
    ([N, L, K, K], :func:`_windows`; identity past the path's end), and L."""
    laws = _validate.as_float_array(position_laws, "position_laws")
    length = int(_validate.count(draft_length, "draft_length", low=1))
    if laws.ndim == 3:
        laws = np.repeat(laws[:, None], length, axis=1)
    if laws.ndim != 4 or laws.shape[1] < length or laws.shape[2] != laws.shape[3] or laws.shape[2] < 1:
        raise ValueError(f"position_laws: expected [N, K, K] or per depth [N, L', K, K] with L' >= L = {length}, "
                         f"got shape {np.shape(position_laws)}")
    if np.any(laws < 0):
        raise ValueError("position_laws: expected entries >= 0")
    if substochastic and np.any(laws.sum(-1) > 1 + 1e-9):
        raise ValueError("position_laws: expected rows summing to at most 1")
    return _windows(laws[:, :length], np.eye(laws.shape[2])), length


def kseq_path_survival(position_laws, draft_length: int) -> np.ndarray:
    """S_t(k) for k = 0..L ([N, L + 1]) of ``kseq`` with K drafts along one target path, exact:
    ``position_laws`` [N, K, K] (the same at every depth) or per depth [N, L', K, K] (L' >= L) from
    :func:`draftverify.theory.kseq_position_law` at the path's tokens (entry [t, (d - 1,) m - 1,
    s - 1]: y_t accepted from m live drafts, s of them left, over T(y_t)).

    The block law of K-SEQ's multi-step walk (SpecTr, Sun et al. 2023) along a path: the live drafts
    at the (j + 1)-th drafted position of a call are those whose first j tokens are the accepted
    y_t..y_{t+j-1}, i.i.d. draws from D(. | y^{t+j-1}) there, so their count is a Markov chain
    started at K, and P(the call accepts y_t..y_{t+k-1}) / T(y_t..y_{t+k-1}) = e_K^T prod_j
    M_{t+j} 1 with M the position laws. The call's last token is then the correction (residual) or
    the bonus, as in the module doc; this replaces the plug-in's mean-field count of live drafts,
    1 + (K - 1) prod D, by its law."""
    windows, length = _position_laws(position_laws, draft_length, substochastic=True)  # [N, L, K, K]
    n, _, k, _ = windows.shape
    live = np.zeros((n, k))
    live[:, -1] = 1.0  # K drafts at a call's first position
    survival = [np.ones(n)]
    for j in range(length):
        live = np.einsum("nm,nms->ns", live, windows[:, j])
        survival.append(live.sum(1))
    return np.stack(survival, 1)


def multidraft_bv_path_survival(position_laws, draft_length: int) -> np.ndarray:
    """S_t(k) for k = 0..L ([N, L + 1]) of ``multidraft-bv`` with K drafts along one target path,
    exact: ``position_laws`` [N, K, K] or per depth [N, L', K, K], its selection's law at the
    path's tokens (:func:`draftverify.theory.selection_position_law` with the first candidate
    selected when none is taken; entry [t, (d - 1,) m - 1, s - 1] over T(y_t)).

    ``multidraft-bv`` (:class:`draftverify.verify.multidraft_bv.MultiDraftBlockVerification`, ours)
    verifies the selected path with ``bv`` (Sun et al., ICLR 2025, Algorithm 2) whose draft rows
    are the selection's law mu_m, m the count of drafts sharing the path; its exactness argument
    augments each level with s = that count, a Markov chain from s_0 = K with kernel
    P(s' | y, s) = law[s, s'] / mu_s(y). Given the path and the chain, ``bv``'s survival is
    min_{i<=k} prod_{j<i} mu_{s_j}(y_{t+j}) / T(y_{t+j}) (the module doc's, draft rows mu); the
    target's augmented law draws the chain by the same kernel, so S_t(k) is its expectation over
    the chain: here every chain of counts, K >= s_1 >= ... >=
    s_{L-1} >= 1, is enumerated (C(L + K - 2, K - 1) of them)."""
    at, length = _position_laws(position_laws, draft_length)  # [N, L, K, K]: depth j + 1 at t + j
    n, _, k, _ = at.shape
    ratio = at.sum(-1)  # mu_m(y) / T(y)  [N, L, K]
    stay = np.broadcast_to(np.eye(k), at.shape).copy()  # a count the path cannot reach keeps its value
    kernel = np.divide(at, ratio[..., None], out=stay, where=ratio[..., None] > 0)
    survival = np.zeros((n, length + 1))
    chains = itertools.combinations_with_replacement(range(k - 1, -1, -1), length - 1)  # s_1 >= ... >= s_{L-1}
    for tail in chains:
        counts = (k - 1, *tail)  # s_j - 1, j = 0..L-1
        weight, product, running = np.ones(n), np.ones(n), [np.ones(n)]
        for j, m in enumerate(counts):
            product = product * ratio[:, j, m]
            running.append(np.minimum(running[-1], product))
            if j + 1 < length:
                weight = weight * kernel[:, j, m, counts[j + 1]]
        survival += weight[:, None] * np.stack(running, 1)
    return survival


def plug_in_survival(acceptance, draft_length: int, path_draft_probs=None) -> np.ndarray:
    """S_t(k) = prod_{j<k} a_{t+j}(K_j) ([N, L + 1]): the approximation of the module doc (biased).

    ``acceptance`` [N], [N, K] (the same at every depth) or per depth [N, L', K] (L' >= L): entry
    [t, (d - 1,) K' - 1] holds the method's acceptance of one position with K' drafts given the
    target's prefix (at depth d). With K drafts only those that drafted the accepted prefix take
    part further on: the K - 1 others each match the path's j tokens with probability
    prod_{i<j} D_{i+1}(y_{t+i}) (``path_draft_probs`` [N] or per depth [N, L'], needed when K > 1),
    so K_j = 1 + (K - 1) times that, and a(K_j) is interpolated linearly between whole numbers of
    drafts.
    """
    a = _validate.rate(acceptance, "acceptance")
    length = int(_validate.count(draft_length, "draft_length", low=1))
    if a.ndim in (1, 2):
        a = np.repeat((a[:, None] if a.ndim == 1 else a)[:, None, :], length, axis=1)  # the same at every depth
    if a.ndim != 3 or a.shape[1] < length or a.shape[2] < 1:
        raise ValueError(f"acceptance: expected [N], [N, K] or per depth [N, L', K] with L' >= L = {length}, "
                         f"got shape {np.shape(acceptance)}")
    n, _, k = a.shape
    if k == 1:
        matched = np.zeros((n, length))
    else:
        if path_draft_probs is None:
            raise ValueError("path_draft_probs: needed with K > 1 drafts")
        d = _depths(path_draft_probs, "path_draft_probs", length)
        if d.shape[0] != n or np.any((d < 0) | (d > 1)):
            raise ValueError(f"path_draft_probs: expected {n} rows of probabilities in [0, 1], got shape "
                             f"{np.shape(path_draft_probs)}")
        windows = _windows(d, 1.0)  # [N, L]
        matched = np.concatenate([np.ones((n, 1)), np.cumprod(windows[:, :-1], axis=1)], axis=1)  # prod_{i<j} D
    drafts = 1 + (k - 1) * matched  # K_j - 1 as a column index: [N, L] in [0, K - 1]
    low = np.floor(drafts - 1).astype(np.int64).clip(0, k - 1)
    high = np.minimum(low + 1, k - 1)
    share = drafts - 1 - low
    positions = np.arange(n)[:, None] + np.arange(length)  # t + j  [N, L]
    rows, depths = np.minimum(positions, n - 1), np.broadcast_to(np.arange(length), (n, length))
    factors = (1 - share) * a[rows, depths, low] + share * a[rows, depths, high]
    factors[positions >= n] = 1.0  # past the path's end: never read
    return np.concatenate([np.ones((n, 1)), np.cumprod(factors, axis=1)], axis=1)


def gbv_expected_accepted(ratios, draft_length: int) -> np.ndarray:
    """E[tau] of one ``gbv`` call starting at each position t <= N - L ([N - L + 1]), unbiased per
    start: sum_{k=1..L} sum_{x^k} min(T(x^k), D(x^k)) = sum_k E_T[min(1, prod_{j<k} rho_{t+j})]
    (its per-call optimum, seed 004 section 3.3; :func:`.blocks.longest_prefix_claim`), with
    ``ratios`` [N] or per depth [N, L'] as :func:`path_survival`'s. A call after one that left a
    target modification in ``gbv``'s state differs: tokens per call from these (a renewal
    approximation, starts taken as uniform) are approximate."""
    length = int(_validate.count(draft_length, "draft_length", low=1))
    rho = _ratios(ratios, length)
    if len(rho) < length:
        raise ValueError(f"ratios: a path of {len(rho)} tokens holds no call of L = {length}")
    windows = _windows(rho, 1.0)[: len(rho) - length + 1]  # [N - L + 1, L], every window inside the path
    return np.minimum(1.0, np.cumprod(windows, axis=1)).sum(axis=1)


def expected_calls(survival) -> float:
    """E[number of calls to commit the path's N tokens | path] for a block chain with survival
    ``survival`` [N, L + 1] (rows non-increasing from 1): h(t) = 1 + sum_m pi_t(m) h(t + m),
    h(N) = 0, where a block that reaches past the end commits the last token (as ``max_new_tokens``
    cuts it)."""
    s = _validate.as_float_array(survival, "survival")
    if s.ndim != 2 or s.shape[1] < 2 or np.any(np.abs(s[:, 0] - 1) > 1e-12) or np.any(np.diff(s, axis=1) > 1e-12):
        raise ValueError("survival: expected [N, L + 1] rows starting at 1 and non-increasing")
    n, width = s.shape
    blocks = np.concatenate([s[:, :-1] - s[:, 1:], s[:, -1:]], axis=1)  # pi_t(m), m = 1..L+1  [N, L+1]
    h = np.zeros(n + width)  # h[t] for t >= N is 0
    for t in range(n - 1, -1, -1):
        h[t] = 1.0 + blocks[t] @ h[t + 1 : t + 1 + width]
    return float(h[0])


@dataclass(frozen=True)
class TokensPerCall:
    """Tokens per target call over several paths, ``sum N_i / sum E[calls_i]``, with the
    delta-method standard error of that ratio over paths (0 with one path)."""

    mean: float
    standard_error: float
    paths: int


def tokens_per_call(tokens, calls) -> TokensPerCall:
    """The ratio estimate from per-path token counts [P] and expected calls [P]."""
    n, c = _validate.as_float_array(tokens, "tokens"), _validate.as_float_array(calls, "calls")
    if n.ndim != 1 or n.shape != c.shape or n.size == 0 or np.any(c <= 0) or np.any(n <= 0):
        raise ValueError("tokens and calls: expected equal-length 1-D arrays of positive values")
    ratio = n.sum() / c.sum()
    if n.size == 1:
        return TokensPerCall(float(ratio), 0.0, 1)
    residuals = n - ratio * c
    error = np.sqrt(residuals.var(ddof=1) / n.size) / c.mean()
    return TokensPerCall(float(ratio), float(error), int(n.size))


def least_squares_line(draft_lengths, seconds, weights=None) -> tuple[float, float]:
    """(intercept, slope) of the weighted least-squares line of ``seconds`` [M] against
    ``draft_lengths`` [M] (``weights`` [M] >= 0, default 1); slope 0 where one length has weight.
    Plain floats, not numpy: ``draft_length="auto"`` fits two such lines of at most 9 points at
    every decoding step, where numpy's per-call cost (about 50 us) was 1-2% of a step."""
    x, y = _validate.as_floats(draft_lengths, "draft_lengths"), _validate.as_floats(seconds, "seconds")
    w = [1.0] * len(x) if weights is None else _validate.as_floats(weights, "weights")
    total = math.fsum(w)
    if not len(x) == len(y) == len(w) or min(w, default=-1.0) < 0 or not total > 0:
        raise ValueError("draft_lengths, seconds and weights: expected equal-length 1-D arrays, weights >= 0 "
                         "and not all 0")
    mean_x, mean_y = math.fsum(a * b for a, b in zip(w, x)) / total, math.fsum(a * b for a, b in zip(w, y)) / total
    spread = math.fsum(a * (b - mean_x) ** 2 for a, b in zip(w, x))
    slope = math.fsum(a * (b - mean_x) * (c - mean_y) for a, b, c in zip(w, x, y)) / spread if spread > 0 else 0.0
    return mean_y - slope * mean_x, slope


@dataclass(frozen=True)
class StepCosts:
    """Seconds of a decoding step with L = 1..L_max drafted tokens, term by term; each tuple holds
    L_max + 1 entries, index L (index 0 unused).

    Seed 002's speedup k / (1 + L c) counts the model calls only: ``draft[L]`` = L c t_T (the
    draft's L forwards and one crop back) and ``target[L]`` = r(L + 1) t_T (the target scoring the
    pending token and L drafts; c and r as ``bench model-cost`` measures them). A decoding spends
    more, measured beside them: ``verify[L]`` the verifier on the step's distributions, and
    ``overhead[L]`` the rest of a step as the engine runs it (the draft's first call feeding 1 or 2
    pending tokens, warping and sampling every drafted position, warping the target's L + 1 rows,
    the bookkeeping around the verifier, the commit), a line a + b L fitted by
    :func:`fit_overhead`; and ``prefill`` the prompt's first calls of target and draft, once per
    decoding.
    """

    draft: tuple[float, ...]
    target: tuple[float, ...]
    verify: tuple[float, ...]
    overhead: tuple[float, ...]
    prefill: float = 0.0

    def __post_init__(self) -> None:
        for name in ("draft", "target", "verify", "overhead"):
            values = _validate.as_float_array(getattr(self, name), name)
            if values.ndim != 1 or len(values) < 2:
                raise ValueError(f"{name}: expected L_max + 1 >= 2 seconds (index L), got {getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(float(v) for v in values))
        if len({len(self.draft), len(self.target), len(self.verify), len(self.overhead)}) != 1:
            raise ValueError("draft, target, verify and overhead: expected one entry per L = 0..L_max each")
        if not np.isfinite(self.prefill) or self.prefill < 0:
            raise ValueError(f"prefill: expected seconds >= 0, got {self.prefill}")

    @property
    def max_draft_length(self) -> int:
        return len(self.draft) - 1

    def step(self, draft_length: int) -> float:
        """Seconds of one step with L drafted tokens, the prefill left out."""
        length = int(_validate.count(draft_length, "draft_length", low=1))
        if length > self.max_draft_length:
            raise ValueError(f"draft_length: costs are known for L <= {self.max_draft_length}, got {length}")
        return self.draft[length] + self.target[length] + self.verify[length] + self.overhead[length]


def fit_overhead(draft_lengths, engine_seconds, model_seconds, max_draft_length: int) -> tuple[float, ...]:
    """``overhead[L]`` for L = 0..``max_draft_length``: the least-squares line a + b L through what
    the engine spent per step beyond the modelled terms, ``engine_seconds`` [M] (a step's wall time,
    the prefill left out, less whatever the caller prices separately: ``bench tune`` takes out the
    verifier's time measured on those steps) minus ``model_seconds`` [M] (the terms of
    :class:`StepCosts` timed alone for the same steps: ``bench tune``'s draft + target), over steps
    with ``draft_lengths`` [M]. Not clipped: a negative value says the modelled calls cost more alone
    than inside the engine."""
    engine = _validate.as_float_array(engine_seconds, "engine_seconds")
    model = _validate.as_float_array(model_seconds, "model_seconds")
    if engine.shape != model.shape:
        raise ValueError(f"engine_seconds and model_seconds: expected one shape, got {engine.shape} and {model.shape}")
    intercept, slope = least_squares_line(draft_lengths, engine - model)
    return tuple(intercept + slope * length for length in range(int(_validate.count(max_draft_length,
                                                                                      "max_draft_length", low=1)) + 1))


def predicted_tokens_per_second(tokens_per_call, costs: StepCosts, draft_length: int, num_tokens: int) -> float:
    """Tokens per second k / (step(L) + k t_prefill / N) of a decoding of N tokens (N / k steps):
    seed 002's speedup k / (1 + L c) with every term of :class:`StepCosts` in seconds."""
    k = float(_validate.rate(tokens_per_call, "tokens_per_call", low=1.0, high=np.inf))
    tokens = int(_validate.count(num_tokens, "num_tokens", low=1))
    seconds = costs.step(draft_length) + k * costs.prefill / tokens
    if seconds <= 0:
        raise ValueError(f"the seconds of a step must be > 0, got {seconds} (costs {costs})")
    return k / seconds

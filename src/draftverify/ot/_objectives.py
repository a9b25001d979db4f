"""The exact evaluations of the Global Resolution objective F of a :class:`~._luce.LuceSystem`.

F(alpha) = sum_S c_S log(s + U(S)) - b . alpha (seed 001 eq. 12 / 15, grouped as in appendix K),
U(S) = sum_{j in S} u_j, u = e^alpha; its gradient is the intake minus b, its Hessian
diag(intake) - sum_S c_S s_S s_S^T with the shares s_S = u / (s + U(S)).

- ``_Enumerated``: every served set S (|S| <= n) with its mass c_S, in log space: each set's
  log(s + U(S)) is a log-sum-exp shifted by its largest log weight, so no weight is ever formed
  outside the float range and a share is a ratio of numbers in [0, 1].
- ``_Dense``: the same sets for a small system with a residual (s = 1), as rows of a 0/1 matrix,
  directly in u (every denominator is >= 1): fewer, larger numpy calls where a 10-token system is
  all call overhead.
- ``_Generating``: 1/(s + U) = int_0^inf e^{-t(s+U)} dt and sum_S c_S prod_{j in S} y_j =
  E[(h + sum_j d_j B_j)^n], B_j ~ Bernoulli(y_j) independent (a tuple's served set lies inside A iff
  its n i.i.d. draws all fall in background + A). The moments come from the cumulant series
  sum_j log(1 + y_j (e^{d_j s} - 1)), whose coefficients are Bernoulli cumulants (polynomials in
  y_j): O(J n^2) per quadrature node, no set is enumerated. The t-integral is the trapezoidal rule in
  log t, geometrically convergent for these analytic integrands (its error, < 1e-7 in L1 at our
  step, is added to certified deviations and checked against enumeration in the tests). It needs the
  weights u themselves: the solver keeps alpha <= ``ALPHA_MAX`` so that u, u^2 stay finite.

Exponentials go through :func:`exp_flushed`: results below the smallest normal float (1e-308) are
exactly 0 (no subnormals, which are slow) and, with alpha <= ALPHA_MAX, nothing overflows. All three
evaluations are sums of products of probabilities and shares; a product below 1e-308 (two shares of
1e-200, a set mass of 1e-300) rounds to 0, which is its right value to float precision, so underflow
is not trapped inside them. Division by zero, overflow and invalid operations (0/0, inf - inf) are
not expected anywhere, and the tests run the solvers with ``np.errstate(all="raise")``.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from ._networks import set_masses, subsets

if TYPE_CHECKING:
    from ._luce import LuceSystem

__all__ = ["ALPHA_MAX", "QUADRATURE_ALLOWANCE", "evaluator", "exp_flushed", "hessian_product"]

_STEP = 0.5  # trapezoid step in log t
QUADRATURE_ALLOWANCE = 1e-7  # added to certified deviations for the trapezoidal rule
_MAX_ENUMERATED = 100  # enumerate the served sets when there are fewer than this many per token
ALPHA_MAX = 300.0  # u = e^alpha <= e^300: u^2 is finite, and a residual share e^-300 (5e-131) is far below tol
_LOG_TINY = math.log(np.finfo(np.float64).tiny)  # log of the smallest normal float, about -708.4


def exp_flushed(x: np.ndarray) -> np.ndarray:
    """e^x, with 0 wherever e^x would be below the smallest normal float (and for x = -inf)."""
    x = np.asarray(x, dtype=np.float64)
    return np.exp(x, out=np.zeros(x.shape), where=x >= _LOG_TINY)


def _dot(required: np.ndarray, alpha: np.ndarray) -> float:
    """b . alpha with 0 * (-inf) = 0 (tokens that must receive nothing have weight 0)."""
    return float(np.dot(required, np.where(required > 0, alpha, 0.0)))


def _stirling2(n: int) -> np.ndarray:
    table = np.zeros((n + 1, n + 1))
    table[0, 0] = 1.0
    for k in range(1, n + 1):
        for m in range(1, k + 1):
            table[k, m] = m * table[k - 1, m] + table[k - 1, m - 1]
    return table


class _Series:
    """Constant polynomial coefficients for drafts of size n.

    cumulant[k, m]: kappa_k(y) = sum_m cumulant[k, m] y^m, the k-th cumulant of Bernoulli(y)
    (= sum_m (-1)^{m+1} (m-1)! S(k, m) y^m). share[k, m]: [s^k] (e^{ds} - 1) / (1 + y (e^{ds} - 1))
    = d^k / k! * sum_m share[k, m] y^m (= (-1)^m (m+1)! S(k, m+1)).
    """

    def __init__(self, n: int):
        stirling = _stirling2(n)
        self.n = n
        self.factorial = np.array([math.factorial(i) for i in range(n + 1)], dtype=np.float64)
        self.cumulant = np.zeros((n + 1, n + 1))
        self.share = np.zeros((n + 1, n + 1))
        for k in range(1, n + 1):
            for m in range(1, k + 1):
                self.cumulant[k, m] = (-1) ** (m + 1) * math.factorial(m - 1) * stirling[k, m]
            for m in range(0, k):
                self.share[k, m] = (-1) ** m * math.factorial(m + 1) * stirling[k, m + 1]


class _Generating:
    """F through the generating function and the log-t trapezoidal rule (no enumeration)."""

    def __init__(self, system: "LuceSystem"):
        self.system = system
        self.series = _Series(system.num_drafts)
        n = system.num_drafts
        self.powers = system.draft[:, None] ** np.arange(n + 1)[None, :]  # [J, n+1] d^k
        self.slack = 1.0 if system.slack else 0.0
        total = system.background + system.draft.sum()
        self.mass = total**n - system.background**n  # sum over nonempty served sets of c_S

    def grid(self, weights: np.ndarray) -> np.ndarray:
        active = weights[weights > 0]
        if active.size == 0:  # every weight flushed to 0: any grid is exact for an empty integrand
            active = np.ones(1)
        low = self.slack + active.min()
        high = self.slack + self.system.num_drafts * active.max()
        x = np.arange(math.log(1e-11 / high), math.log(36.0 / min(low, 1.0)) + _STEP, _STEP)
        return np.exp(x)  # [Q] nodes t

    def evaluate(self, alpha: np.ndarray, hessian: bool):
        """Objective, gradient, and (optionally) what Hessian-vector products need."""
        with np.errstate(under="ignore"):  # see the module docstring: underflow to 0 is the right value
            return self._evaluate(alpha, hessian)

    def _evaluate(self, alpha: np.ndarray, hessian: bool):
        s = self.series
        n = s.n
        u = exp_flushed(alpha)  # [J] (0 for masked tokens); alpha <= ALPHA_MAX keeps u and u^2 finite
        t = self.grid(u)  # [Q]
        # clipped so that y^n stays a normal float: subnormal arithmetic is ~10x slower, and
        # e^{-130} is far below any quantity the integrals resolve
        y = np.exp(np.maximum(-t[:, None] * u[None, :], -130.0))  # [Q, J] (normal floats by the clip)
        y_powers = [np.ones_like(y)]
        for _ in range(n):
            y_powers.append(y_powers[-1] * y)  # y^m, m = 0..n
        # cumulant series L[q, k] = h [k == 1] + (1 / k!) sum_m cumulant[k, m] sum_j d_j^k y_qj^m
        log_mgf = np.zeros((t.size, n + 1))
        for m in range(1, n + 1):
            log_mgf += (y_powers[m] @ self.powers) * s.cumulant[:, m][None, :]
        log_mgf /= s.factorial[None, :]
        log_mgf[:, 0] = 0.0
        log_mgf[:, 1] += self.system.background
        moments = np.zeros_like(log_mgf)  # e_k: E(s) = exp(L(s)) = sum_k e_k s^k
        moments[:, 0] = 1.0
        for k in range(1, n + 1):
            moments[:, k] = sum(j * log_mgf[:, j] * moments[:, k - j] for j in range(1, k + 1)) / k
        damp = exp_flushed(-t * self.slack)  # [Q] e^{-ts}
        dx = _STEP
        # value: int dx [C e^{-t} - e^{-ts} (G - h^n)], G = n! e_n
        generating = s.factorial[n] * moments[:, n] - self.system.background**n
        value = dx * np.sum(self.mass * exp_flushed(-t) - damp * generating) - _dot(self.system.required, alpha)
        # intake m_j = u_j int e^{-ts} y_j dG/dy_j dt, y_j dG/dy_j = n! sum_k e_{n-k} (d_j^k/k!) sum_m share[k,m] y^{m+1}
        weight = (dx * t * damp)[:, None] * moments[:, n - 1 :: -1][:, :n]  # [Q, n]: column k-1 holds e_{n-k}
        coef = self.powers[:, 1:] / s.factorial[None, 1:]  # [J, n] d^k / k!
        shares = np.empty((n, t.size, u.size))  # [k, Q, J]: (d_j^k / k!) y_j sum_m share[k, m] y_j^m
        for k in range(1, n + 1):
            poly = s.share[k, 0] * y_powers[1]
            for m in range(1, k):
                poly += s.share[k, m] * y_powers[m + 1]
            shares[k - 1] = poly * coef[None, :, k - 1]
        flat = shares.reshape(n * t.size, u.size)
        intake = s.factorial[n] * u * (weight.T.reshape(-1) @ flat)
        gradient = intake - self.system.required
        if not hessian:
            return value, gradient, intake, None
        # F[k, q, j] = u_j y_j f_jk; R = n! sum_q dx t^2 e^{-ts} sum_{k,l} e_{n-k-l} F_k F_l^T
        features = shares * u[None, None, :]  # [n, Q, J]
        hankel = np.zeros((t.size, n, n))
        for a in range(1, n + 1):
            for b in range(1, n + 1 - a):
                hankel[:, a - 1, b - 1] = moments[:, n - a - b]
        hankel *= (s.factorial[n] * dx * t * t * damp)[:, None, None]
        second = s.factorial[n] * u * u * ((weight * t[:, None]).T.reshape(-1) @ flat)
        diagonal_r = np.zeros(u.size)
        for a in range(1, n):
            for b in range(1, n + 1 - a):
                diagonal_r += hankel[:, a - 1, b - 1] @ (features[a - 1] * features[b - 1])
        return value, gradient, intake, (intake - second + diagonal_r, features, hankel)


def _set_masses(groups: list[np.ndarray], system: "LuceSystem") -> np.ndarray:
    """c_S of every served set, groups (sets of size 1, 2, ...) one after another."""
    return np.concatenate([set_masses(g, system.draft, system.background, system.num_drafts) for g in groups])


@functools.lru_cache(maxsize=64)
def _set_structure(size: int, width: int, slack: bool) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The served sets of ``size`` tokens (sizes 1..width); the same padded to ``width`` with the
    dummy index ``size`` (weight 0), after a first column of index ``size + 1`` (the residual,
    weight s = 1) when ``slack``; and the flat (row, column) index of every pair of token members."""
    groups = subsets(size, width)
    tokens = np.concatenate([np.pad(g, ((0, 0), (0, width - g.shape[1])), constant_values=size) for g in groups])
    pairs = (tokens[:, :, None] * (size + 1) + tokens[:, None, :]).ravel()  # [M * width * width]
    members = np.concatenate([np.full((tokens.shape[0], 1), size + 1), tokens], axis=1) if slack else tokens
    for array in (*groups, members, pairs):
        array.flags.writeable = False
    return groups, members, pairs


class _Enumerated:
    """F by enumerating every served set with its mass (seed 001 appendix K, eq. 117-120), in log space."""

    def __init__(self, system: "LuceSystem"):
        self.system = system
        self.slack = 1.0 if system.slack else 0.0
        size = system.draft.size
        width = min(size, system.num_drafts)
        groups, self.members, self.pairs = _set_structure(size, width, system.slack)
        self.flat_members = self.members.ravel()  # [M * (width + slack)]
        # log weights: the tokens', then the dummy's (u = 0) and the residual's (log s = 0)
        self.logits = np.concatenate((np.zeros(size), [-np.inf, 0.0] if system.slack else [-np.inf]))
        self.mass = _set_masses(groups, system)
        self.root_mass = np.sqrt(self.mass)

    def evaluate(self, alpha: np.ndarray, hessian: bool):
        with np.errstate(under="ignore"):  # see the module docstring: underflow to 0 is the right value
            return self._evaluate(alpha, hessian)

    def _evaluate(self, alpha: np.ndarray, hessian: bool):
        size = alpha.size
        self.logits[:size] = alpha
        logits = self.logits[self.members]  # [M, n (+1)] log u_j of the members (after the residual's, when there is one)
        columns = range(1, logits.shape[1])
        top = logits[:, 0]  # [M] the set's largest log weight (column maxima: a short-axis reduce is slow)
        for column in columns:
            top = np.maximum(top, logits[:, column])
        if not self.slack:
            top = np.where(top > -np.inf, top, 0.0)  # a set none of whose tokens may receive anything
        logits -= top[:, None]
        shares = np.exp(logits, out=np.zeros(logits.shape), where=logits >= _LOG_TINY)  # [M, n (+1)] u_j / e^top, flushed
        # [M] (s + U(S)) / e^top, >= 1 when the set has a weight (its largest is e^0); a set with
        # none has c_S = 0 up to rounding (Hall's condition on Theorem 6.2's totals) and counts as
        # log 1 = 0, share 0
        total = np.maximum(np.add.reduce(shares, axis=1), 1.0)
        value = self.mass @ (top + np.log(total)) - _dot(self.system.required, alpha)  # log(s + U(S)): shifted log-sum-exp
        shares /= total[:, None]  # u_j / (s + U(S)) (and the residual's share)
        intake = np.bincount(self.flat_members, weights=(shares * self.mass[:, None]).ravel(), minlength=size + 2)[:size]
        matrix = None
        if hessian:  # diag(intake) - sum_S c_S s_S s_S^T (token members only)
            rooted = (shares[:, 1:] if self.slack else shares) * self.root_mass[:, None]
            outer = np.bincount(self.pairs, weights=(rooted[:, :, None] * rooted[:, None, :]).ravel(), minlength=(size + 1) ** 2)
            matrix = -outer.reshape(size + 1, size + 1)[:size, :size]
            matrix.flat[:: size + 1] += intake  # the diagonal
        return value, intake - self.system.required, intake, matrix


@functools.lru_cache(maxsize=64)
def _membership(size: int, width: int) -> np.ndarray:
    """[M, size] 0/1: row m marks the tokens of served set m, in :func:`_set_structure`'s order."""
    _, members, _ = _set_structure(size, width, False)
    matrix = np.zeros((members.shape[0], size + 1))  # the last column catches the padding index
    matrix[np.repeat(np.arange(members.shape[0]), width), members.ravel()] = 1.0
    matrix = np.ascontiguousarray(matrix[:, :size])
    matrix.flags.writeable = False
    return matrix


class _Dense:
    """F of a small system with a residual (s = 1: the inner system of a top-k draft) with the
    served sets as rows of a 0/1 membership matrix A, evaluated in u = e^alpha directly:
    U = A u, shares A u / (1 + U). With s = 1 every denominator is >= 1 and u <= e^ALPHA_MAX, so
    nothing overflows or divides by zero, and a weight below the float range rounds to its right
    value 0 (the outer system, s = 0, has sets whose every weight may be 0: it needs
    :class:`_Enumerated`'s log space). The same sets and masses as ``_Enumerated``, in a dozen numpy
    calls instead of thirty, which is what a ten-token system costs (tested against it)."""

    def __init__(self, system: "LuceSystem"):
        self.system = system
        size = system.draft.size
        width = min(size, system.num_drafts)
        groups, _, _ = _set_structure(size, width, True)
        self.membership = _membership(size, width)  # [M, J]
        self.mass = _set_masses(groups, system)

    def evaluate(self, alpha: np.ndarray, hessian: bool):
        with np.errstate(under="ignore"):  # see the module docstring: underflow to 0 is the right value
            u = exp_flushed(alpha)  # [J], 0 for tokens that must receive nothing
            denominator = 1.0 + self.membership @ u  # [M] 1 + U(S) >= 1
            value = self.mass @ np.log(denominator) - _dot(self.system.required, alpha)
            shares = np.multiply.outer(1.0 / denominator, u)  # [M, J] u_j / (1 + U(S)) ...
            shares *= self.membership  # ... for the members of S only
            intake = self.mass @ shares
            matrix = None
            if hessian:  # diag(intake) - sum_S c_S s_S s_S^T
                matrix = shares.T @ (shares * -self.mass[:, None])
                matrix.flat[:: alpha.size + 1] += intake
            return value, intake - self.system.required, intake, matrix


_DENSE_ENTRIES = 4096  # largest sets x tokens served by _Dense (its Hessian costs M J^2)


def evaluator(system: "LuceSystem"):
    count = system.draft.size
    sets = sum(math.comb(count, s) for s in range(1, min(count, system.num_drafts) + 1))
    if sets > _MAX_ENUMERATED * count:
        return _Generating(system)
    return _Dense(system) if system.slack and sets * count <= _DENSE_ENTRIES else _Enumerated(system)


def hessian_product(parts, vector: np.ndarray) -> np.ndarray:
    diagonal, features, hankel = parts
    n, q, j = features.shape
    projected = features @ vector  # [n, Q]
    mixed = np.einsum("qkl,lq->kq", hankel, projected)  # [n, Q]
    return diagonal * vector - mixed.reshape(-1) @ features.reshape(n * q, j)

"""Softmax ("Luce") transport systems of Global Resolution and their Newton solver.

A system: tokens j = 1..J with draft probabilities d_j must receive ``required`` b_j from the
i.i.d. tuples that hit them and otherwise fall in a background of draft mass h; a tuple whose
served set is S gives token j the share u_j / (s + U(S)), u = e^alpha, U(S) = sum_S u, s = 1 when
tuples may keep a residual (inner system, seed 001 eq. 17) and 0 otherwise (outer, eq. 14).
alpha minimises F(alpha) = sum_S c_S log(s + U(S)) - b . alpha (eq. 12 / 15 grouped as in
appendix K), whose gradient is the intake minus b. Two exact evaluations of F:

- enumerated: every served set S (|S| <= n) with its mass c_S; cheap when there are few sets;
- generating function: 1/(s + U) = int_0^inf e^{-t(s+U)} dt and
  sum_S c_S prod_{j in S} y_j = E[(h + sum_j d_j B_j)^n], B_j ~ Bernoulli(y_j) independent (a
  tuple's served set lies inside A iff its n i.i.d. draws all fall in background + A). The moments
  come from the cumulant series sum_j log(1 + y_j (e^{d_j s} - 1)), whose coefficients are
  Bernoulli cumulants (polynomials in y_j): O(J n^2) per quadrature node, no set is enumerated.
  The t-integral is the trapezoidal rule in log t, geometrically convergent for these analytic
  integrands (its error, < 1e-7 in L1 at our step, is added to certified deviations and checked
  against enumeration in the tests).

Newton's method with the exact Hessian (dense for enumeration, conjugate gradients on
Hessian-vector products otherwise) and an Armijo line search.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ._networks import set_masses, subsets

__all__ = ["LuceSystem", "solve_luce", "QUADRATURE_ALLOWANCE"]

_STEP = 0.5  # trapezoid step in log t
QUADRATURE_ALLOWANCE = 1e-7  # added to certified deviations for the trapezoidal rule
_MAX_ENUMERATED = 100  # enumerate the served sets when there are fewer than this many per token


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


@dataclass(frozen=True)
class LuceSystem:
    """One softmax transport system: tokens with draft probabilities ``draft`` [J] must receive
    ``required`` [J] from the i.i.d. tuples that hit them and otherwise lie in a background of draft
    mass ``background``; ``slack`` = True lets a tuple keep a residual (the inner system)."""

    draft: np.ndarray
    required: np.ndarray
    background: float
    slack: bool
    num_drafts: int


class _Generating:
    """F through the generating function and the log-t trapezoidal rule (no enumeration)."""

    def __init__(self, system: LuceSystem):
        self.system = system
        self.series = _Series(system.num_drafts)
        n = system.num_drafts
        self.powers = system.draft[:, None] ** np.arange(n + 1)[None, :]  # [J, n+1] d^k
        self.slack = 1.0 if system.slack else 0.0
        total = system.background + system.draft.sum()
        self.mass = total**n - system.background**n  # sum over nonempty served sets of c_S

    def grid(self, weights: np.ndarray) -> np.ndarray:
        active = weights[weights > 0]
        low = self.slack + active.min()
        high = self.slack + self.system.num_drafts * active.max()
        x = np.arange(math.log(1e-11 / high), math.log(36.0 / min(low, 1.0)) + _STEP, _STEP)
        return np.exp(x)  # [Q] nodes t

    def evaluate(self, alpha: np.ndarray, hessian: bool):
        """Objective, gradient, and (optionally) what Hessian-vector products need."""
        s = self.series
        n = s.n
        u = np.exp(alpha)  # [J] (0 for masked tokens)
        t = self.grid(u)  # [Q]
        # clipped so that y^n stays a normal float: subnormal arithmetic is ~10x slower, and
        # e^{-130} is far below any quantity the integrals resolve
        y = np.exp(np.maximum(-t[:, None] * u[None, :], -130.0))  # [Q, J]
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
        damp = np.exp(-t * self.slack)  # e^{-ts}
        dx = _STEP
        # value: int dx [C e^{-t} - e^{-ts} (G - h^n)], G = n! e_n
        generating = s.factorial[n] * moments[:, n] - self.system.background**n
        value = dx * np.sum(self.mass * np.exp(-t) - damp * generating) - _dot(self.system.required, alpha)
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


@functools.lru_cache(maxsize=64)
def _set_structure(size: int, width: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The served sets of ``size`` tokens (sizes 1..width), the same padded to ``width`` with the
    dummy index ``size`` (weight 0), and the flat (row, column) index of every member pair."""
    groups = subsets(size, width)
    members = np.concatenate([np.pad(g, ((0, 0), (0, width - g.shape[1])), constant_values=size) for g in groups])
    pairs = (members[:, :, None] * (size + 1) + members[:, None, :]).ravel()  # [M * width * width]
    for array in (*groups, members, pairs):
        array.flags.writeable = False
    return groups, members, pairs


class _Enumerated:
    """F by enumerating every served set with its mass (seed 001 appendix K, eq. 117-120)."""

    def __init__(self, system: LuceSystem):
        self.system = system
        self.slack = 1.0 if system.slack else 0.0
        groups, self.members, self.pairs = _set_structure(system.draft.size, min(system.draft.size, system.num_drafts))
        self.mass = np.concatenate([set_masses(g, system.draft, system.background, system.num_drafts) for g in groups])
        self.root_mass = np.sqrt(self.mass)

    def evaluate(self, alpha: np.ndarray, hessian: bool):
        size = alpha.size
        u = np.append(np.exp(alpha), 0.0)  # [J + 1] with the dummy
        weights = u[self.members]  # [M, n]
        denominator = self.slack + weights[:, 0]  # [M] (column adds: a short-axis sum is slow in numpy)
        for column in range(1, weights.shape[1]):
            denominator = denominator + weights[:, column]
        logs = np.log(denominator, where=self.mass > 0, out=np.zeros_like(denominator))  # 0 log 0 = 0
        value = self.mass @ logs - _dot(self.system.required, alpha)
        shares = weights / denominator[:, None]  # [M, n]
        intake = np.bincount(self.members.ravel(), weights=(shares * self.mass[:, None]).ravel(), minlength=size + 1)[:size]
        matrix = None
        if hessian:  # diag(intake) - sum_S c_S s_S s_S^T
            scaled = shares * self.root_mass[:, None]
            outer = np.bincount(self.pairs, weights=(scaled[:, :, None] * scaled[:, None, :]).ravel(), minlength=(size + 1) ** 2)
            matrix = -outer.reshape(size + 1, size + 1)[:size, :size]
            matrix[np.diag_indices(size)] += intake
        return value, intake - self.system.required, intake, matrix


def _evaluator(system: LuceSystem):
    count = system.draft.size
    sets = sum(math.comb(count, s) for s in range(1, min(count, system.num_drafts) + 1))
    return _Enumerated(system) if sets <= _MAX_ENUMERATED * count else _Generating(system)


def _hessian_product(parts, vector: np.ndarray) -> np.ndarray:
    diagonal, features, hankel = parts
    n, q, j = features.shape
    projected = features @ vector  # [n, Q]
    mixed = np.einsum("qkl,lq->kq", hankel, projected)  # [n, Q]
    return diagonal * vector - mixed.reshape(-1) @ features.reshape(n * q, j)


def _conjugate_gradient(parts, rhs: np.ndarray, free: np.ndarray, max_iter: int) -> np.ndarray:
    """Solve H d = rhs on the free coordinates (Jacobi-preconditioned CG, relative tol 1e-3)."""
    diagonal = np.where(free, np.maximum(parts[0], 1e-300), 1.0)
    x = np.zeros_like(rhs)
    r = np.where(free, rhs, 0.0)
    z = r / diagonal
    p = z.copy()
    rz = r @ z
    stop = 1e-6 * rz
    for _ in range(max_iter):
        hp = np.where(free, _hessian_product(parts, np.where(free, p, 0.0)), 0.0)
        curvature = p @ hp
        if not curvature > 0:
            break
        step = rz / curvature
        x += step * p
        r -= step * hp
        z = r / diagonal
        rz_new = r @ z
        if rz_new <= stop:
            break
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x if np.any(x) else rhs / diagonal


def _initial(system: LuceSystem) -> np.ndarray:
    """Each token alone: u_j / (s + u_j) of the mass of the tuples containing it = its requirement."""
    n = system.num_drafts
    total = system.background + system.draft.sum()
    hit = total**n - (total - system.draft) ** n  # [J] mass of the tuples containing each token
    rest = np.maximum(hit - system.required, 1e-12 * hit) if system.slack else hit
    with np.errstate(divide="ignore"):
        alpha = np.log(system.required) - np.log(rest)
    return np.where(system.required > 0, np.clip(alpha, -40.0, 40.0), -np.inf)


def solve_luce(system: LuceSystem, tol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """Newton's method on F. Returns (alpha, intake, sum |grad|, converged)."""
    evaluator = _evaluator(system)
    alpha = _initial(system)
    free = system.required > 0
    if not system.slack and free.any():  # F is invariant to alpha + c: pin the largest token
        free[np.argmax(system.required)] = False
    value, gradient, intake, parts = evaluator.evaluate(alpha, hessian=True)
    for _ in range(max_iter):
        error = float(np.abs(gradient).sum())
        if error <= tol or not free.any():
            return alpha, intake, error, True
        if isinstance(parts, np.ndarray):  # dense exact Hessian
            direction = np.zeros_like(alpha)
            sub = parts[np.ix_(free, free)]
            try:
                direction[free] = -np.linalg.solve(sub, gradient[free])
            except np.linalg.LinAlgError:  # singular (a degenerate system): least squares
                direction[free] = -np.linalg.lstsq(sub, gradient[free], rcond=1e-12)[0]
        else:
            direction = -_conjugate_gradient(parts, gradient, free, max_iter=4 * int(free.sum()) + 20)
            direction = np.where(free, direction, 0.0)
        slope = float(gradient @ direction)
        if not slope < 0:
            direction, slope = -np.where(free, gradient, 0.0), -float(np.where(free, gradient, 0.0) @ gradient)
        step = 1.0
        while True:
            trial = alpha + step * direction
            new_value, new_gradient, new_intake, new_parts = evaluator.evaluate(trial, hessian=True)
            if new_value <= value + 1e-4 * step * slope + 1e-13 * max(1.0, abs(value)) or step < 1e-6:
                break
            step *= 0.5
        if step < 1e-6 and new_value > value:
            break
        alpha, value, gradient, intake, parts = trial, new_value, new_gradient, new_intake, new_parts
        if not system.slack:
            alpha = alpha - alpha[np.isfinite(alpha)].max()
    error = float(np.abs(gradient).sum())
    return alpha, intake, error, error <= tol



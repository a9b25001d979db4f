"""Softmax ("Luce") transport systems of Global Resolution and their Newton solver.

A system: tokens j = 1..J with draft probabilities d_j must receive ``required`` b_j from the
i.i.d. tuples that hit them and otherwise fall in a background of draft mass h; a tuple whose
served set is S gives token j the share u_j / (s + U(S)), u = e^alpha, U(S) = sum_S u, s = 1 when
tuples may keep a residual (inner system, seed 001 eq. 17) and 0 otherwise (outer, eq. 14).
alpha minimises F(alpha) = sum_S c_S log(s + U(S)) - b . alpha (eq. 12 / 15 grouped as in
appendix K), whose gradient is the intake minus b; ``_objectives`` evaluates F exactly, by
enumeration or by a generating function.

Newton's method with the exact Hessian (dense for enumeration, conjugate gradients on
Hessian-vector products otherwise) and an Armijo line search. Numerics: the solver works on the
log weights alpha only (the start from clamped logs of masses that may be zero, the objectives by
shifted log-sum-exp); alpha stays <= ``ALPHA_MAX`` and a step moves each log weight by at most
``_MAX_STEP``; a trial point whose objective or gradient is not finite is never accepted, and every
check is written so that a NaN fails it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack

from ._objectives import ALPHA_MAX, QUADRATURE_ALLOWANCE, evaluator, hessian_product

__all__ = ["LuceSystem", "solve_luce", "QUADRATURE_ALLOWANCE"]

_TINY = np.finfo(np.float64).tiny  # logs of masses that may be zero are clamped here (log = -708.4)
_MAX_STEP = 20.0  # largest change of one log weight per Newton step (a factor e^20 = 5e8 in u)


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
        hp = np.where(free, hessian_product(parts, np.where(free, p, 0.0)), 0.0)
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
    """Each token alone: u_j / (s + u_j) of the mass hit_j of the tuples containing it = its
    requirement b_j, so alpha_j = log b_j - log(hit_j - s b_j), from clamped logs (b_j or the rest
    may be 0); tokens that must receive nothing get alpha = -inf (u = 0)."""
    n = system.num_drafts
    total = system.background + system.draft.sum()
    missing = total - system.draft  # [J] mass of one draw that is not token j
    # hit_j = total^n - (total - d_j)^n as a sum of positive terms (no cancellation for tiny d_j)
    hit = system.draft * sum(total**k * missing ** (n - 1 - k) for k in range(n))  # [J]
    rest = np.maximum(hit - system.required, 1e-12 * hit) if system.slack else hit
    alpha = np.log(np.maximum(system.required, _TINY)) - np.log(np.maximum(rest, _TINY))
    return np.where(system.required > 0, np.clip(alpha, -40.0, 40.0), -np.inf)


def _newton_direction(parts, gradient: np.ndarray, free: np.ndarray) -> np.ndarray:
    """-H^{-1} grad on the free coordinates (0 elsewhere)."""
    if isinstance(parts, np.ndarray):  # dense exact Hessian
        everything = bool(free.all())  # the usual inner system: no submatrix to gather
        sub, rhs = (parts, gradient) if everything else (parts[free][:, free], gradient[free])
        solution, info = lapack.dgesv(sub, rhs)[2:]  # LU solve (numpy.linalg.solve's checks cost 3x it here)
        if info != 0:  # singular (a degenerate system): least squares
            solution = np.linalg.lstsq(sub, rhs, rcond=1e-12)[0]
        if everything:
            return -solution
        direction = np.zeros_like(gradient)
        direction[free] = -solution
        return direction
    direction = -_conjugate_gradient(parts, gradient, free, max_iter=4 * int(free.sum()) + 20)
    return np.where(free, direction, 0.0)


def solve_luce(system: LuceSystem, tol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """Newton's method on F. Returns (alpha, intake, sum |grad|, converged); ``converged`` is
    False unless sum |grad| is a number <= tol (a NaN is never within tol)."""
    objective = evaluator(system)
    alpha = _initial(system)
    free = system.required > 0
    if not system.slack and free.any():  # F is invariant to alpha + c: pin the largest token
        free[np.argmax(system.required)] = False
    movable = bool(free.any())
    value, gradient, intake, parts = objective.evaluate(alpha, hessian=True)
    error = float(np.abs(gradient).sum())  # NaN or inf when a gradient entry is
    for _ in range(max_iter):
        if error <= tol or not movable or not math.isfinite(error):
            break
        # a saturated token (share ~ 0 or 1) has a near-zero Hessian row and a Newton component of
        # 1e100 or more that no halving of the step tames: bound each component instead
        direction = np.maximum(np.minimum(_newton_direction(parts, gradient, free), _MAX_STEP), -_MAX_STEP)  # np.clip's wrapper costs more
        slope = float(gradient @ direction)  # NaN if the direction has a NaN (the clip leaves no inf)
        if not slope < 0:  # not a descent direction, or not finite: steepest descent
            direction = -np.where(free, gradient, 0.0)
            slope = float(gradient @ direction)
        step = 1.0
        while True:  # Armijo backtracking on the box alpha <= ALPHA_MAX
            trial = np.minimum(alpha + step * direction, ALPHA_MAX)
            candidate = objective.evaluate(trial, hessian=True)
            trial_error = float(np.abs(candidate[1]).sum())
            finite = math.isfinite(candidate[0]) and math.isfinite(trial_error)
            armijo = finite and candidate[0] <= value + 1e-4 * step * slope + 1e-13 * max(1.0, abs(value))
            if armijo or step < 1e-6:
                break
            step *= 0.5
        if not (armijo or (finite and candidate[0] <= value)):  # no finite point that does not raise F
            break
        alpha, error = trial, trial_error
        value, gradient, intake, parts = candidate
        if not system.slack:
            alpha = alpha - alpha[np.isfinite(alpha)].max()
    return alpha, intake, error, bool(error <= tol)

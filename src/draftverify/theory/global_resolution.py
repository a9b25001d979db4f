"""Error bounds of Global Resolution (seed 001, section 6.3, Lemma 6.6 and appendix R; its p is our
target, p_draft our draft) and the exact multi-step error they bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _validate

__all__ = ["ResolutionBounds", "global_resolution_bounds", "MultiStepError", "multi_step_error"]


@dataclass(frozen=True)
class ResolutionBounds:
    """``l1`` bounds ||output law - target||_1 for one step; ``acceptance`` bounds alpha* minus the
    acceptance reached; ``multi_step_l1`` bounds the L1 error of the joint law of L tokens."""

    l1: float
    acceptance: float
    multi_step_l1: float


def global_resolution_bounds(tau: float, draft_length: int = 1) -> ResolutionBounds:
    """Seed 001's guarantees for Global Resolution with error threshold tau: the outer and inner
    solvers stop within 5 tau each, Lemma 6.6 turns outer error a and inner error b into
    a + 2b (L1 to the target) and a + b (to alpha*): 15 tau and 10 tau (section 6.3, Table 1);
    over L tokens the L1 error is at most 15 L tau (Theorem R.1, by telescoping, see
    :func:`multi_step_error`). They hold when the method succeeds; it can fail and fall back.
    """
    tau = float(_validate.rate(tau, "tau", high=np.inf))
    length = int(_validate.count(draft_length, "draft_length", low=1))
    outer = inner = 5 * tau
    return ResolutionBounds(l1=outer + 2 * inner, acceptance=outer + inner, multi_step_l1=(outer + 2 * inner) * length)


@dataclass(frozen=True)
class MultiStepError:
    """``exact`` = ||T^(L) - A^(L)||_1 between the joint laws of L tokens; ``bound`` =
    sum_j E_{x^j ~ T}||T(.|x^j) - A(.|x^j)||_1 (the sum in Theorem R.1's proof, eq. 145);
    ``worst_case`` = sum_j max_{x^j} ||...||_1 (what the theorem's "15 L tau" bounds)."""

    exact: float
    bound: float
    worst_case: float


def multi_step_error(target_tables, approximate_tables) -> MultiStepError:
    """Exact joint L1 error of decoding L tokens with approximate conditionals, beside the
    telescoping bound of seed 001, Theorem R.1 (appendix R, eq. 138-146): ||T^(L) - A^(L)||_1 <=
    sum_j E_{x^j ~ T}||T(.|x^j) - A(.|x^j)||_1 <= L max_step ||.||_1. Equality for L = 1."""
    target = _validate.tables(target_tables, "target_tables")
    approx = _validate.tables(approximate_tables, "approximate_tables")
    if len(target) != len(approx) or target[0].shape != approx[0].shape:
        raise ValueError("target_tables and approximate_tables must have the same block length and vocabulary")
    target_joints = _validate.joint_laws(target)
    exact = float(np.abs(target_joints[-1] - _validate.joint_laws(approx)[-1]).sum())
    step_errors = [np.abs(t - a).sum(axis=-1) for t, a in zip(target, approx)]  # [V]*j each
    laws = [np.ones(())] + target_joints[:-1]
    bound = float(sum((law * error).sum() for law, error in zip(laws, step_errors)))
    worst = float(sum(error.max() for error in step_errors))
    return MultiStepError(exact=exact, bound=bound, worst_case=worst)

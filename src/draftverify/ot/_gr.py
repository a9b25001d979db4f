"""Global Resolution (seed 001 section 6, Algorithm 1) with exact, linear-time convex objectives.

Both systems of Theorem 5.1 are solved in softmax ("Luce") form: token j of the system has weight
u_j = e^{alpha_j}; a tuple whose served tokens are S gives token j in S the share
u_j / (s + U(S)), U(S) = sum_{i in S} u_i, with s = 0 for the outer system (eq. 14) and s = 1 for
the inner one (eq. 17, the 1 is the residual). alpha minimises the convex function
F(alpha) = sum_S c_S log(s + U(S)) - sum_j b_j alpha_j (Phi, eq. 12 and Theta, eq. 15; b = the
required token totals, c_S = draft mass of the tuples whose served set is S, appendix K), and the
gradient of F is exactly the deviation of the token totals, so sum |grad| certifies the error
(Theorems 6.4 / 6.5 with T = everything, eps_T = gamma_T = 0).

What we do differently from seed 001, and why:

1. **No enumeration of sets for large systems** (``_objectives``). Seed 001 sums over up to |T|^n / n!
   grouped sets and truncates T to keep that small, which is where it fails (appendix K). We
   evaluate F, its gradient and Hessian-vector products through a generating function in O(J n^2)
   per quadrature node, so T = everything (no truncation error); small systems still enumerate.
2. **Blocks.** Theorem 6.2's outer totals sit on a vertex of the polymatroid: every tail of the ratio
   order at which psi reaches its suffix minimum is Hall-tight, so the outer softmax weights diverge
   across those cuts and no finite minimiser exists (a reason L-BFGS-B stalls). We cut the outer
   tokens there (``Instance.outer_blocks``): a tuple's whole mass goes to the last block it touches,
   single-token blocks are exact with no solve, and each larger block is one finite softmax system
   with the earlier tokens as background.
3. **Newton with the exact Hessian** (dense when enumerated, conjugate gradients on Hessian-vector
   products otherwise) and an Armijo line search, instead of 25 L-BFGS-B steps.
4. **Log space.** The softmax weights of eq. 14 / 17 are handled through alpha = log u only: shares
   are shifted log-sum-exps (below, and in ``_objectives``), the Newton start takes clamped logs of
   masses that may be zero, so masses down to 1e-300, ties and zeros raise no floating-point
   error; a NaN or infinite deviation never counts as converged (the exact fallback serves that
   part).

Stopping rule: sum |grad| <= ``tol`` per system, so the plan deviates from the target by at most
3 tol in L1 and from alpha* by at most 2 tol (Lemma 6.6), inside the 15 tol / 10 tol of Algorithm 1.
"""

from __future__ import annotations

import time

import numpy as np

from ._luce import QUADRATURE_ALLOWANCE, LuceSystem, solve_luce
from ._objectives import exp_flushed
from ._plan import Part
from ._subset import Instance

__all__ = ["outer_part", "inner_part"]


def outer_part(instance: Instance, tol: float, max_iter: int) -> Part:
    """Outer system (Theorem 6.4 with T = V \\ H*), block by block."""
    start = time.perf_counter()
    tokens = instance.outer_tokens
    required = instance.outer_marginals()
    draft = instance.draft[tokens]
    starts = instance.outer_blocks()
    ends = np.append(starts[1:], tokens.size)
    background = float(instance.draft[instance.inner_tokens].sum()) + np.concatenate([[0.0], np.cumsum(draft)])
    alpha = np.zeros(tokens.size)
    intake = required.copy()  # single-token blocks are exact
    deviation, converged = 0.0, True
    total = max(required.sum(), 1e-300)
    for a, b in zip(starts, ends):
        if b - a == 1:
            continue
        system = LuceSystem(draft[a:b], required[a:b], float(background[a]), False, instance.num_drafts)
        budget = tol * required[a:b].sum() / total
        alpha[a:b], intake[a:b], error, ok = solve_luce(system, budget, max_iter)
        deviation += error + QUADRATURE_ALLOWANCE
        converged &= ok
    block_of = np.searchsorted(starts, np.arange(tokens.size), side="right") - 1  # [outer] block index

    def allocate(served: np.ndarray) -> np.ndarray:
        local = instance.position[served] - instance.h  # outer tokens follow H* in the ratio order
        blocks = block_of[local]
        last = blocks == blocks.max()  # the tuple's mass goes to the last block it touches
        logits = np.where(last, alpha[local], -np.inf)
        if not np.isfinite(logits.max()):
            return last / last.sum()
        weights = exp_flushed(logits - logits.max())  # [s] softmax of eq. 14, largest weight 1
        return weights / weights.sum()

    return Part("gr", allocate, intake, deviation, converged, time.perf_counter() - start)


def inner_part(instance: Instance, tol: float, max_iter: int) -> Part:
    """Inner system (Theorem 6.5 with T = H*)."""
    start = time.perf_counter()
    tokens = instance.inner_tokens
    if tokens.size == 0:
        return Part("gr", lambda served: np.zeros(served.size), np.zeros(0), 0.0, True, time.perf_counter() - start)
    system = LuceSystem(instance.draft[tokens], instance.target[tokens], 0.0, True, instance.num_drafts)
    alpha, intake, error, converged = solve_luce(system, tol, max_iter)

    def allocate(served: np.ndarray) -> np.ndarray:
        logits = alpha[instance.position[served]]  # [s] log u_j (H* is the head of the ratio order)
        top = max(float(logits.max()), 0.0)  # shift by the largest of log 1 (the residual) and log u
        weights = exp_flushed(logits - top)
        return weights / (exp_flushed(np.array(-top))[()] + weights.sum())  # u_j / (1 + U(S)), eq. 17

    return Part("gr", allocate, intake, error + QUADRATURE_ALLOWANCE, converged, time.perf_counter() - start)

"""Multi-draft verifiers over K i.i.d. drafts: ``kseq`` (SpecTr's K-SEQ) and ``ot`` (optimal
transport, seed 001).

Multi-step framework (SpecTr, Sun et al. 2023; seed 001 appendix R): at position i the candidates
are the i-th tokens of the drafts whose first i tokens equal the accepted prefix; they are i.i.d.
draws from D(. | prefix), so any valid m-draft coupling for their count m may verify them. A
candidate token accepted keeps the drafts that proposed it alive; any other token is the
correction token and ends the call; when all L positions accept, a bonus token is drawn from the
target's conditional after the draft. Drafts that share a prefix have identical probability rows
for it (contract), so the rows of the first alive draft are used. K = 1 reduces to ``sd`` in law.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .. import ot, rng
from ..formulas import any_accepted, kseq_rho
from .base import Verifier, VerifyResult, register

__all__ = ["KSeq", "OptimalTransport", "multi_step"]

# one position: (target row [V], draft row [V], candidate tokens [m] in draft order, generator) -> token
PositionRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], int]


def multi_step(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, rule: PositionRule, generator) -> VerifyResult:
    """SpecTr's tree walk over the K drafts with a per-position multi-draft rule."""
    alive = torch.arange(draft_tokens.shape[0])  # drafts whose prefix equals the accepted prefix
    length = draft_tokens.shape[1]
    accepted: list[int] = []
    for i in range(length):
        lead = int(alive[0])
        candidates = draft_tokens[alive, i]  # [m]
        token = rule(target_probs[lead, i], draft_probs[lead, i], candidates, generator)
        keep = candidates == token
        if not bool(keep.any()):  # correction token
            return VerifyResult(tokens=accepted + [token], num_accepted=i, draft_index=lead)
        accepted.append(token)
        alive = alive[keep]
    lead = int(alive[0])
    bonus = rng.categorical(target_probs[lead, length], generator)
    return VerifyResult(tokens=accepted + [bonus], num_accepted=length, draft_index=lead)


def _kseq_position(target: torch.Tensor, draft: torch.Tensor, candidates: torch.Tensor, generator) -> int:
    """K-SEQ at one position (Sun et al. 2023, Algorithm 2): try the m candidates in order, accept
    x_j with probability min(1, T(x_j) / (rho D(x_j))); if all fail, draw from the residual
    T - c min(D, T/rho), c = (1 - (1 - beta)^m) / beta (= (T - rho D)_+ at rho = rho*)."""
    target, draft = target.to(torch.float64), draft.to(torch.float64)
    m = candidates.numel()
    rho = float(kseq_rho(target.numpy(), draft.numpy(), m)) if m > 1 else 1.0
    accept = torch.clamp(target[candidates] / (rho * draft[candidates]), max=1.0)  # [m]
    hits = torch.nonzero(rng.bernoulli(accept, generator))
    if hits.numel():
        return int(candidates[int(hits[0])])
    overlap = torch.minimum(draft, target / rho)  # [V]
    beta = float(overlap.sum())
    scale = any_accepted(beta, m) / beta if beta > 0 else 0.0
    residual = torch.clamp(target - scale * overlap, min=0.0)  # >= 0 up to rounding on the feasible side
    return rng.categorical(residual, generator, fallback=target)


@register
@dataclass(frozen=True)
class KSeq(Verifier):
    """``kseq``: SpecTr's K-SEQ over K i.i.d. drafts (Sun et al., NeurIPS 2023), multi-step.

    Exact. Per position its acceptance is 1 - (1 - beta(rho*))^m >= (1 - 1/e) alpha* (SpecTr,
    Theorem 3). rho is taken on the feasible side of its bisection with the general residual, so an
    approximate rho never makes the residual negative (docs/corrections.md).
    """

    name = "kseq"
    description = "SpecTr K-SEQ over K i.i.d. drafts, multi-step (rho solved on the sorted likelihood ratios; exact)"
    exact = True
    multi_draft = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        return multi_step(draft_tokens, draft_probs, target_probs, _kseq_position, generator)


@register
@dataclass(frozen=True)
class OptimalTransport(Verifier):
    """``ot``: optimal transport per position over the surviving i.i.d. drafts (seed 001 appendix R).

    At each position the verified token is drawn from the plan's conditional pi(. | candidate tuple)
    of :func:`draftverify.ot.solve` for the candidates' count, so the acceptance per position is
    alpha* (``lp``, ``maxflow``, ``maxflow-cs``: exact) or within 2 tol of it (``gr``: the law of each
    position is within 3 tol of the target in L1, seed 001 Lemma 6.6 / Theorem R.1 for L positions).
    """

    name = "ot"
    description = "optimal transport over K i.i.d. drafts, multi-step (seed 001; exact with lp/maxflow/maxflow-cs, gr within 3 tol)"
    exact = False
    multi_draft = True
    solver: str = "gr"
    tol: float = 1e-4

    def __post_init__(self) -> None:
        if self.solver not in ot.METHODS:
            raise ValueError(f"ot: solver must be one of {', '.join(ot.METHODS)}, got {self.solver!r}")
        if not (isinstance(self.tol, (int, float)) and 0 < self.tol < 1):
            raise ValueError(f"ot: tol must be in (0, 1), got {self.tol!r}")

    def _position(self, target: torch.Tensor, draft: torch.Tensor, candidates: torch.Tensor, generator) -> int:
        plan = ot.solve(target.cpu().numpy(), draft.cpu().numpy(), candidates.numel(), method=self.solver, tol=self.tol)
        criterion = plan.conditional(candidates.cpu().numpy())  # [V] pi(. | tuple)
        return rng.categorical(torch.from_numpy(np.ascontiguousarray(criterion)), generator)

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        return multi_step(draft_tokens, draft_probs, target_probs, self._position, generator)

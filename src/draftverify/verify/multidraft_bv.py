"""``multidraft-bv``: exact block verification over K i.i.d. drafts (ours): select a path in the
tree of the drafts, then verify it with ``bv`` whose draft conditionals are the selection's law.

Notation: T = target, D = draft; x_k^i = the first i tokens of draft k. Derivation and numbers
against ``kseq``, ``ot`` and seed 004's ``spectr-gbv``: docs/spectr-gbv.md.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import rng
from .base import Verifier, VerifyResult, get_verifier, register

__all__ = [
    "MultiDraftBlockVerification",
    "sequential_selection",
    "sequential_selector",
    "transport_selection",
    "selection_chain",
]


def _selection_constants(gamma, m: int):
    """b = (1 - gamma)^(m-1) and c - b = sum_{j<m-1} (1 - gamma)^j (see sequential_selection);
    ``gamma`` may be an array."""
    miss = 1.0 - np.asarray(gamma, dtype=np.float64)
    return miss ** (m - 1), sum(miss**j for j in range(m - 1))


_GRID = np.arange(33) / 32  # sequential_selection's grid on [0, 1]


def sequential_selection(target: torch.Tensor, draft: torch.Tensor, num_candidates: int, rounds: int = 5):
    """Select one of m i.i.d. candidates from ``draft`` [V]: returns (accept [V], law [V]) as float64.

    Rule: try the candidates in order, take candidate j with probability accept(x_j); the first one
    taken wins; if none is, the first candidate. With gamma = sum_x D(x) accept(x), the selected
    token has the law D(x) [b + (c - b) accept(x)], b = (1 - gamma)^(m-1), c = sum_{j<m} (1 - gamma)^j
    (first taken at try j: (1 - gamma)^(j-1) D(x) accept(x); none taken: (1 - gamma)^(m-1) D(x)
    (1 - accept(x))). This law is exact for any ``accept``; ``accept`` only decides how much of it
    the target can keep, sum_x min(T, law). For a fixed gamma that overlap grows at the same rate
    c - b in every accept(x) until law(x) = T(x), so accept(x) = clip((T/D - b)/(c - b), 0, 1), with
    gamma solving gamma = sum_x D(x) accept(x) (found to 33^-5 by grid refinement; a grid point's sum
    comes from the ratios T/D sorted once and running sums of D and T over them: a binary search, not
    a pass over V). The family holds K-SEQ's rule (accept = min(1, T/(rho D))), so the overlap is at
    least K-SEQ's; it can fall short of alpha* (Hu et al. 2025). m = 1 gives law = D.
    """
    t = target.detach().to(torch.float64).cpu().numpy()
    d = draft.detach().to(torch.float64).cpu().numpy()
    m = int(num_candidates)
    if m == 1:
        return torch.zeros(d.shape, dtype=torch.float64), torch.from_numpy(d.copy())
    drafted = d > 0
    over = np.divide(t, d, out=np.zeros_like(d), where=drafted)  # T/D on the draft's support
    ratios = over[drafted]  # [n]
    order = np.argsort(ratios)
    ratios = ratios[order]  # ascending
    mass = np.concatenate([[0.0], np.cumsum(d[drafted][order])])  # [n + 1]: D of the i smallest ratios
    kept = np.concatenate([[0.0], np.cumsum(t[drafted][order])])  # [n + 1]: T of the same

    def taken(gamma: np.ndarray) -> np.ndarray:  # sum_x D(x) accept(x) at each gamma [n']
        b, slope = _selection_constants(gamma, m)
        first = np.searchsorted(ratios, b, side="right")  # ratios above b: accept > 0
        full = np.searchsorted(ratios, b + slope)  # ratios from b + slope on: accept = 1
        between = kept[full] - kept[first] - b * (mass[full] - mass[first])  # sum D (T/D - b) there, >= 0
        return mass[-1] - mass[full] + np.maximum(between, 0.0) / slope

    low, high = 0.0, 1.0
    for _ in range(rounds):  # bracket a root of sum_x D accept - gamma (>= 0 at 0, <= 0 at 1)
        grid = low + (high - low) * _GRID  # [33]: np.linspace(low, high, 33)'s points, without its call's cost
        grid[-1] = high
        index = int(np.flatnonzero(taken(grid) - grid >= 0)[-1])
        low, high = grid[index], grid[min(index + 1, 32)]
    b, slope = _selection_constants(low, m)
    accept = np.where(drafted, np.clip((over - b) / slope, 0.0, 1.0), 0.0)
    b, slope = _selection_constants(float(d @ accept), m)  # the gamma this rule really has
    return torch.from_numpy(accept), torch.from_numpy(d * (b + slope * accept))


MAX_TUPLES = 20_000  # selection="ot" enumerates the ordered candidate tuples of each node


def transport_selection(target: torch.Tensor, draft: torch.Tensor, num_candidates: int, solver: str = "lp"):
    """Select one of m i.i.d. candidates with an optimal transport plan: returns (weights, law [V]).

    The plan pi of :func:`draftverify.ot.solve` (seed 001; Hu et al. 2025) gives pi(. | candidates);
    the selection takes y ~ pi if y is a candidate, else the first candidate. ``weights(candidates)``
    [V] is that selection's law given the ordered candidates (the plans are over ordered tuples: pi
    may depend on the order). Its law mu = sum_w D^m(w) weights(w) over ordered tuples w, so
    sum_x min(T, mu) >= the plan's acceptance (alpha* for exact solvers). Enumerates |supp D|^m
    tuples: small vocabularies only.
    """
    from .. import ot  # the optimal transport package, imported on use

    t = target.detach().to(torch.float64).cpu().numpy()
    d = draft.detach().to(torch.float64).cpu().numpy()
    m = int(num_candidates)
    support = np.flatnonzero(d > 0)
    if support.size**m > MAX_TUPLES:
        raise ValueError(
            f"multidraft-bv: selection='ot' enumerates {support.size}^{m} candidate tuples "
            f"(> {MAX_TUPLES}); use selection='sequential' for this vocabulary"
        )
    plan = ot.solve(t, d, m, method=solver)

    def split(candidates: np.ndarray):  # pi kept on the candidates [V], and the mass missing them
        kept = plan.conditional(candidates) * (np.bincount(candidates, minlength=d.size) > 0)
        return kept, max(1.0 - float(kept.sum()), 0.0)  # the max only absorbs float rounding

    def weights(candidates: torch.Tensor) -> torch.Tensor:
        kept, missed = split(candidates.cpu().numpy().astype(np.int64))
        kept[int(candidates[0])] += missed  # no candidate chosen by pi: the first candidate
        return torch.from_numpy(kept)

    law = np.zeros_like(d)
    for tuple_ in itertools.product(support.tolist(), repeat=m):
        candidates = np.array(tuple_, dtype=np.int64)
        kept, missed = split(candidates)
        kept[candidates[0]] += missed
        law += np.prod(d[candidates]) * kept
    return weights, torch.from_numpy(law)


def sequential_selector(target, draft, num_candidates):
    """:func:`sequential_selection` as the selector that :func:`selection_chain` takes:
    ``(weights, law [V])``, where ``weights(candidates [m]) -> [V]`` is the probability of selecting
    each token among the drawn candidates and ``law`` the selected token's law over the draws."""
    accept, law = sequential_selection(target, draft, num_candidates)

    def weights(candidates: torch.Tensor) -> torch.Tensor:
        taken = accept[candidates]  # [m]
        none_before = torch.cumprod(1 - taken, 0)  # [m]
        first_taken = torch.cat([taken.new_ones(1), none_before[:-1]]) * taken  # first taken at try j
        first_taken[0] = first_taken[0] + none_before[-1]  # nobody taken: the first candidate
        return torch.zeros_like(law).index_add_(0, candidates, first_taken)  # [V]

    return weights, law


def selection_chain(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, selector, generator):
    """The effective draft of ``multidraft-bv``: walk down the draft tree selecting one candidate
    per level among the drafts that share the path so far. ``selector(target [V], draft [V], m)``
    returns (weights(candidates) -> [V], law [V]). Returns (lead draft index, laws [L, V]): the lead
    draft's tokens are the path, ``laws[i]`` the law of the selected token at level i given the path
    and the number of candidates there."""
    alive = torch.arange(draft_tokens.shape[0])
    laws = []
    for i in range(draft_tokens.shape[1]):
        lead = int(alive[0])  # drafts sharing a prefix share its rows (contract)
        weights, law = selector(target_probs[lead, i], draft_probs[lead, i], alive.numel())
        candidates = draft_tokens[alive, i]  # [m]
        if bool((candidates == candidates[0]).all()):  # one distinct candidate: nothing to draw
            token = int(candidates[0])
        else:
            token = rng.categorical(weights(candidates), generator)
        alive = alive[candidates == token]
        laws.append(law)
    return int(alive[0]), torch.stack(laws)


@register
@dataclass(frozen=True)
class MultiDraftBlockVerification(Verifier):
    """``multidraft-bv``: exact block verification over K i.i.d. drafts (ours), stateless.

    1. Effective draft: walk down the tree of the K drafts; at each level select one token among
       the m drafts that share the path so far; the drafts that drafted it stay. The selected path
       e^L is one of the drafts, and its level-i token has the known law mu_m(. | e^i), a function
       of T(. | e^i), D(. | e^i) and the count m. Option ``selection``: ``"sequential"`` (default;
       :func:`sequential_selection`, closed form, any vocabulary, per-level overlap >= K-SEQ's) or
       ``"ot"`` (:func:`transport_selection` with the plan of ``draftverify.ot`` by ``solver``;
       overlap alpha* with an exact solver; enumerates |supp D|^m tuples, small vocabularies).
    2. Verify e^L with ``bv`` (Sun et al., ICLR 2025, arXiv 2403.10444, Algorithm 2) whose draft
       conditionals are mu instead of D.

    Why it is exact: give each level the extra symbol s_i = m (the number of drafts kept). Given the
    path and s, the kept drafts continue i.i.d. from D(. | e^i) whatever happened before, so
    (e_i, s_i) is drawn by an autoregressive process with next-symbol law
    mu_{s_{i-1}}(e_i | e^{i-1}) P(s_i | e_i, s_{i-1}). Pair it with the augmented target
    T(e_i | e^{i-1}) P(s_i | e_i, s_{i-1}) (same s kernel), whose token marginal is T. BV is exact
    for any pair of autoregressive processes (Sun et al., Theorem 1), so BV on the augmented pair
    leaves the augmented target's law; the s factors cancel in every ratio, in Z_i and in the
    residual, which are then exactly BV with draft rows mu. Dropping s keeps the token marginal T,
    and each call, continued by the target, is T-distributed: exact in the ordinary loop.

    K = 1: mu = D and no selection is drawn, so the call is ``bv`` itself (same law, same draws).
    At L = 1 it accepts sum_x min(T, mu_K): >= K-SEQ's acceptance, and alpha* with ``"ot"``; at
    L >= 2 BV's running ratio can add to that. docs/spectr-gbv.md has the exact numbers against
    kseq and ot, including where the default selection falls short of ot.
    """

    name = "multidraft-bv"
    description = "multi-draft block verification (ours): select a path in the draft tree, verify it with bv; exact"
    exact = True
    multi_draft = True
    selection: str = "sequential"
    solver: str = "lp"

    def __post_init__(self) -> None:
        if self.selection not in ("sequential", "ot"):
            raise ValueError(f"multidraft-bv: selection must be 'sequential' or 'ot', got {self.selection!r}")
        if self.selection == "ot":
            from ..ot import METHODS

            if self.solver not in METHODS:
                raise ValueError(f"multidraft-bv: solver must be one of {', '.join(METHODS)}, got {self.solver!r}")

    def _selector(self, target, draft, num_candidates):
        if self.selection == "ot":
            return transport_selection(target, draft, num_candidates, self.solver)
        return sequential_selector(target, draft, num_candidates)

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        lead, laws = selection_chain(draft_tokens, draft_probs, target_probs, self._selector, generator)
        # the inputs were validated on entry (in their own dtype's tolerance) and the selection laws
        # are distributions by construction: validating the float64 copies again would apply the
        # float64 tolerance to float32 rows
        result = get_verifier("bv", validate=False).verify_trusted(
            draft_tokens[lead : lead + 1], laws[None], target_probs[lead : lead + 1].to(torch.float64), generator
        )
        return VerifyResult(tokens=result.tokens, num_accepted=result.num_accepted, draft_index=lead)

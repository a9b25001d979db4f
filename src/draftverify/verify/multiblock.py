"""Block verification over K i.i.d. drafts: ``spectr-gbv`` (seed 004, as published; not exact) and
``multidraft-bv`` (ours; exact).

Notation: T = target, D = draft; x_k^i = the first i tokens of draft k; T(x^i), D(x^i) are joint
probabilities from the start of the call. Seed 004 writes p for our D and q for our T.
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
    "SpecTrGBV",
    "SpecTrGBVState",
    "SpecTrGBVModification",
    "MultiDraftBlockVerification",
    "sequential_selection",
    "transport_selection",
    "selection_chain",
]


def _miss(target_joint: torch.Tensor, draft_joint: torch.Tensor, num_drafts: int) -> torch.Tensor:
    """(1 - min(D / T, 1))^K elementwise; 0 where T = 0 (the seed multiplies it by T there)."""
    ratio = torch.where(target_joint > 0, draft_joint / torch.where(target_joint > 0, target_joint, 1), 1)
    return (1 - ratio.clamp(max=1)) ** num_drafts


# ----------------------------------------------------------------------------------------------
# spectr-gbv
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecTrGBVModification:
    """One pending distribution modification of seed 004 Algorithm 2.

    The next ``remaining`` target conditionals after the committed tokens c are replaced by
    q_new(x | u) proportional to T(c u x) (1 - min(D(c u x) / T(c u x), 1))^K, joints from the start
    of the call that committed c (u = tokens since then). Since T(c u x) = T(c) T(u x) and likewise
    for D, only ``draft_over_target`` = D(c) / T(c) is kept; T is the target as modified by the older
    pending modifications (Algorithm 3 line 6 feeds the modified q back in).
    """

    remaining: int
    draft_over_target: float


@dataclass(frozen=True)
class SpecTrGBVState:
    """Modifications still pending, oldest first (one can outlive the next call, as in ``gbv``)."""

    modifications: tuple[SpecTrGBVModification, ...]


def _path_joint(rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[K, n+1] joints along each draft: 1, r[0, x_0], r[0, x_0] r[1, x_1], ... for rows [K, n, V]."""
    step = rows.gather(-1, tokens[:, : rows.shape[1], None]).squeeze(-1)  # [K, n]
    return torch.cat([step.new_ones(step.shape[0], 1), torch.cumprod(step, 1)], 1)


def _apply_modifications(tokens, draft, target, modifications, num_drafts):
    """Effective target [K, L+1, V] after the pending modifications (oldest first), and per
    modification the rows below it (the target as modified by the older ones)."""
    length = tokens.shape[1]
    effective = target.clone()
    below = []
    for mod in modifications:
        rows = mod.remaining
        if rows > length:
            raise ValueError(
                f"spectr-gbv: the state modifies {rows} positions but this draft has only L = {length}; "
                "keep the draft length >= the previous one within a decoding"
            )
        below.append(effective[:, :rows].clone())
        if mod.draft_over_target == 0:  # D(c) = 0: the factor (1 - 0)^K leaves T as it is
            continue
        base = effective[:, :rows]  # [K, rows, V]
        t_joint = _path_joint(base, tokens)[:, :rows]  # [K, rows]  T(u_j) along each draft
        d_joint = _path_joint(draft[:, :rows], tokens)[:, :rows]
        d_next = d_joint[..., None] * draft[:, :rows]  # D(u_j x)
        scaled = torch.where(d_next > 0, mod.draft_over_target * d_next, 0)  # D(c u x) / T(c); ratio may be inf
        weights = base * _miss(t_joint[..., None] * base, scaled, num_drafts)  # T(u_j x) (1 - min(.))^K
        mass = weights.sum(-1, keepdim=True)
        # zero mass: the path is impossible under the modified law; keep the row (never sampled)
        effective[:, :rows] = torch.where(mass > 0, weights / torch.where(mass > 0, mass, 1), base)
    return effective, below


@register
@dataclass(frozen=True)
class SpecTrGBV(Verifier):
    """``spectr-gbv``: seed 004 (SpecTr-GBV, "multi-draft block verification"), Algorithms 1-3, as
    published, in target/draft notation. NOT exact for K >= 2.

    Algorithm 1: for drafts k = 1..K in order and sub-blocks x_k^i, i = tau + 1..L, accept x_k^i with
    probability h_ik (eq. 2 for i < L, eq. 3 for i = L) unless x_k^i is in the set H of rejected
    sub-blocks (then no coin is drawn); a rejected sub-block joins H; accepting sets tau = i, f = k;
    accepting a whole draft draws the bonus token from T(. | x_k^L) and stops. Otherwise the
    correction token comes from eq. 4, p_res(x | x_f^tau) ~ T(x_f^tau x)(1 - min(D/T, 1))^K.
    Algorithm 2 (the next L - tau - 1 target conditionals modified) travels in ``state``
    (:class:`SpecTrGBVState`; pass it back on every call). Where the seed is silent we follow
    ``gbv``: eq. 2 with a zero denominator counts as h = 1, h outside [0, 1] acts as the test
    eta < h does, and a modification that outlives the next call is stacked.

    What is wrong (docs/spectr-gbv.md, tests/verify/test_multiblock_spectr.py): Lemma A.1 sets
    P(X^L has x^i, accepted) = P(X^L has x^i) h_i as if every drafted sub-block got its test, but
    Algorithm 1 stops at the first accepted whole draft and never revisits positions <= tau, so
    blocks of later drafts are tested less often than counted, and eq. 4's residual, built on that
    count, does not give the mass back. Theorem 4.2 fails: with V = 2, K = 2, L = 1, D = (1/2, 1/2),
    T = (0.9, 0.1) the first token is a with probability 151/162, and E[tau] = 307/405 against the
    0.822 of Theorem 5.3. The claimed optimum (Lemma 5.1) is optimal only among "conditionally independent
    couplings": at L = 1 it lies below alpha* (Hu et al. 2025) and can lie below K-SEQ. At K = 1 it
    is ``gbv`` with its modification, and exact.
    """

    name = "spectr-gbv"
    description = "SpecTr-GBV as published (seed 004, Algorithms 1-3, modification in state); NOT exact for K >= 2"
    exact = False
    multi_draft = True

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        if state is not None and not isinstance(state, SpecTrGBVState):
            raise ValueError(
                f"spectr-gbv: state must be None or the SpecTrGBVState of the previous call, got {type(state).__name__}"
            )
        modifications = state.modifications if state is not None else ()
        tokens = draft_tokens
        num_drafts, length = tokens.shape
        draft = draft_probs.to(torch.float64)  # [K, L, V]
        target, below = _apply_modifications(tokens, draft, target_probs.to(torch.float64), modifications, num_drafts)
        t_joint = _path_joint(target[:, :length], tokens)  # [K, L+1]  T(x_k^i), i = 0..L
        d_joint = _path_joint(draft, tokens)  # [K, L+1]
        t_next = t_joint[:, :length, None] * target[:, :length]  # [K, L, V]  T(x_k^i x)
        residual = t_next * _miss(t_next, d_joint[:, :length, None] * draft, num_drafts)  # eq. 4 numerators
        cover = 1 - (1 - d_joint) ** num_drafts  # P(X^L has x^i)
        claimed = t_joint * (1 - _miss(t_joint, d_joint, num_drafts))  # T(x^i)[1 - (1 - min(D/T, 1))^K]
        missed_after = residual[:, 1:].sum(-1)  # [K, L-1]  sum_x T(x^i x)(1 - min(.))^K, i = 1..L-1
        numerator = missed_after - (t_joint[:, 1:length] - claimed[:, 1:length])  # eq. 2
        denominator = cover[:, 1:length] - t_joint[:, 1:length] + missed_after
        h_inner = torch.where(denominator != 0, numerator / torch.where(denominator != 0, denominator, 1), 1.0)
        h_last = claimed[:, length] / cover[:, length]  # eq. 3
        h = torch.cat([h_inner, h_last[:, None]], 1).clamp(0, 1)  # [K, L]  h_ik for i = 1..L

        tau, chosen, rejected = 0, 0, set()
        for k in range(num_drafts):  # Algorithm 1, lines 4-19
            for i in range(tau + 1, length + 1):
                block = tuple(tokens[k, :i].tolist())
                if block in rejected:
                    continue
                if bool(rng.bernoulli(h[k, i - 1 : i], generator)[0]):
                    tau, chosen = i, k
                else:
                    rejected.add(block)
            if tau == length:
                break
        accepted = tokens[chosen, :tau].tolist()
        if tau == length:
            last = rng.categorical(target[chosen, length], generator)  # bonus token
        elif bool(residual[chosen, tau].sum() > 0):
            last = rng.categorical(residual[chosen, tau], generator)  # eq. 4
        else:  # T = D at this node: eq. 4 is 0/0; draw from the target
            last = rng.categorical(target[chosen, tau], generator)
        new_state = _next_state(tokens[chosen], draft[chosen], target[chosen], [b[chosen] for b in below], modifications, tau, last)
        return VerifyResult(tokens=accepted + [last], num_accepted=tau, draft_index=chosen, state=new_state)


def _next_state(x, draft, target, below, modifications, tau, last) -> SpecTrGBVState | None:
    """Carry the surviving modifications past the committed x^tau, y; push Algorithm 2's new one."""
    length = x.shape[0]
    committed = tau + 1
    path = x[:tau].tolist() + [last]

    def draft_over(rows) -> float:  # D(x^tau y) / rows(x^tau y), joints from this call's start
        d = float(torch.prod(draft[torch.arange(committed), path]))
        t = float(torch.prod(rows[torch.arange(committed), path]))
        if d == 0:  # (1 - 0)^K: the modification is the identity
            return 0.0
        return d / t if t > 0 else float("inf")

    def times(a: float, b: float) -> float:  # a zero draft joint wins over an infinite ratio
        return 0.0 if a == 0 or b == 0 else a * b

    carried = [
        SpecTrGBVModification(mod.remaining - committed, times(mod.draft_over_target, draft_over(rows)))
        for mod, rows in zip(modifications, below)
        if mod.remaining > committed
    ]
    if tau < length - 1:  # Algorithm 2: the next L - tau - 1 conditionals
        carried.append(SpecTrGBVModification(length - tau - 1, draft_over(target)))
    return SpecTrGBVState(tuple(carried)) if carried else None


# ----------------------------------------------------------------------------------------------
# multidraft-bv
# ----------------------------------------------------------------------------------------------


def _selection_constants(gamma, m: int):
    """b = (1 - gamma)^(m-1) and c - b = sum_{j<m-1} (1 - gamma)^j (see sequential_selection);
    ``gamma`` may be an array."""
    miss = 1.0 - np.asarray(gamma, dtype=np.float64)
    return miss ** (m - 1), sum(miss**j for j in range(m - 1))


def sequential_selection(target: torch.Tensor, draft: torch.Tensor, num_candidates: int, rounds: int = 5):
    """Select one of m i.i.d. candidates from ``draft`` [V]: returns (accept [V], law [V]) as float64.

    Rule: try the candidates in order, take candidate j with probability accept(x_j); the first one
    taken wins; if none is, the first candidate. With gamma = sum_x D(x) accept(x), the selected
    token has the law D(x) [b + (c - b) accept(x)], b = (1 - gamma)^(m-1), c = sum_{j<m} (1 - gamma)^j
    (first taken at try j: (1 - gamma)^(j-1) D(x) accept(x); none taken: (1 - gamma)^(m-1) D(x)
    (1 - accept(x))). This law is exact for any ``accept``; ``accept`` only decides how much of it
    the target can keep, sum_x min(T, law). For a fixed gamma that overlap grows at the same rate
    c - b in every accept(x) until law(x) = T(x), so accept(x) = clip((T/D - b)/(c - b), 0, 1), with
    gamma solving gamma = sum_x D(x) accept(x) (found to 33^-5 by grid refinement). The
    family holds K-SEQ's rule (accept = min(1, T/(rho D))), so the overlap is at least K-SEQ's; it can
    fall short of alpha* (Hu et al. 2025). m = 1 gives law = D.
    """
    t = target.detach().to(torch.float64).cpu().numpy()
    d = draft.detach().to(torch.float64).cpu().numpy()
    m = int(num_candidates)
    if m == 1:
        return torch.zeros(d.shape, dtype=torch.float64), torch.from_numpy(d.copy())
    drafted = d > 0
    over = np.divide(t, d, out=np.zeros_like(d), where=drafted)  # T/D on the draft's support

    def accept_for(gamma) -> np.ndarray:  # gamma [n] -> accept [n, V]
        b, slope = _selection_constants(gamma, m)
        return np.where(drafted, np.clip((over - b[:, None]) / slope[:, None], 0.0, 1.0), 0.0)

    low, high = 0.0, 1.0
    for _ in range(rounds):  # bracket a root of sum_x D accept - gamma (>= 0 at 0, <= 0 at 1)
        grid = np.linspace(low, high, 33)  # [33]
        index = int(np.flatnonzero(accept_for(grid) @ d - grid >= 0)[-1])
        low, high = grid[index], grid[min(index + 1, 32)]
    accept = accept_for(np.array([low]))[0]
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


def _sequential_selector(target, draft, num_candidates):
    """:func:`sequential_selection` as (weights(candidates) [V], law [V])."""
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
        return _sequential_selector(target, draft, num_candidates)

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        lead, laws = selection_chain(draft_tokens, draft_probs, target_probs, self._selector, generator)
        # the inputs were validated on entry (in their own dtype's tolerance) and the selection laws
        # are distributions by construction: validating the float64 copies again would apply the
        # float64 tolerance to float32 rows
        result = get_verifier("bv", validate=False).verify(
            draft_tokens[lead : lead + 1], laws[None], target_probs[lead : lead + 1].to(torch.float64), generator=generator
        )
        return VerifyResult(tokens=result.tokens, num_accepted=result.num_accepted, draft_index=lead)

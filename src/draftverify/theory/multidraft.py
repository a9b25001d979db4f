"""K i.i.d. drafts: K-SEQ's acceptance and guarantee, the optimal acceptance alpha*, and the bound
SpecTr-GBV claims (seed 004, Lemma 5.1 / Theorem 5.3; its p is our draft, its q our target).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import formulas
from . import _validate

__all__ = [
    "kseq_beta",
    "kseq_rho",
    "kseq_acceptance",
    "KSEQ_GUARANTEE",
    "spectr_gbv_claimed_bound",
    "MultiDraftAcceptance",
    "kseq_position_law",
    "multidraft_acceptance",
    "selection_position_law",
]

KSEQ_GUARANTEE = 1 - 1 / np.e
"""K-SEQ accepts at least (1 - 1/e) alpha*(K): the approximation guarantee of Sun et al. (2023, SpecTr),
as cited in seed 001 section 2."""

def _num_drafts(num_drafts) -> int:
    return int(_validate.count(num_drafts, "num_drafts", low=1))


def kseq_beta(target_probs, draft_probs, rho) -> np.ndarray:
    """beta(rho) = sum_x min(D(x), T(x) / rho) (Sun et al. 2023, K-SEQ; seed 004 section 3).
    ``rho`` >= 1 broadcasts against the leading axes of ``[..., V]`` inputs."""
    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    rho = _validate.as_float_array(rho, "rho")
    if np.any(rho < 1):
        raise ValueError(f"rho must be >= 1, got {rho}")
    return formulas.kseq_beta(target, draft, rho)


def kseq_rho(target_probs, draft_probs, num_drafts) -> np.ndarray:
    """The K-SEQ scale rho* in [1, K] solving 1 - (1 - beta(rho))^K = rho beta(rho) (Sun et al.
    2023; seed 004 section 3), vectorised over leading axes.

    The solver is the one the ``kseq`` verifier uses (:func:`draftverify.formulas.kseq_rho`, on the
    feasible side rho >= rho*); here the inputs are validated first.
    """
    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    return formulas.kseq_rho(target, draft, int(_num_drafts(num_drafts)))


def kseq_acceptance(target_probs, draft_probs, num_drafts) -> np.ndarray:
    """Probability that K-SEQ accepts one of K i.i.d. drafted tokens: 1 - (1 - beta(rho*))^K
    (Sun et al. 2023, SpecTr; seed 004 section 3). K = 1 gives 1 - TV(T, D)."""
    k = _num_drafts(num_drafts)
    rho = kseq_rho(target_probs, draft_probs, k)
    return formulas.any_accepted(kseq_beta(target_probs, draft_probs, rho), k)


def selection_position_law(target_at, draft_at, taken_at, taken_mass, num_candidates: int, *,
                           first_if_none: bool) -> np.ndarray:
    """One level of a multi-draft walk, at a path token y: [R, m], entry [r, s - 1] = P(the rule
    selects y from m = ``num_candidates`` i.i.d. candidates of D and s of them are y) / T(y).

    The rule (K-SEQ's, Sun et al. 2023, and ``multidraft-bv``'s sequential selection) tries the
    candidates in order and takes candidate x with probability a(x); the first one taken wins; if
    none is, ``first_if_none`` selects the first candidate (``multidraft-bv``), else nothing is
    selected (K-SEQ draws its residual). Inputs per row: T(y) ``target_at``, D(y) ``draft_at``,
    a(y) ``taken_at`` and gamma = sum_x D(x) a(x) ``taken_mass``. Per candidate, (token, taken) falls
    in four classes: (y, yes) with p = D(y) a(y), (y, no) D(y) - p, (other, yes) gamma - p, (other,
    no) the rest; with z counting the y's,
    P(y, s) = [z^(s-1)] ( p sum_J ((D(y) - p) z + 1 - D(y) - gamma + p)^(J-1) (D(y) z + 1 - D(y))^(m-J)
              + [first_if_none] (D(y) - p) ((D(y) - p) z + 1 - D(y) - gamma + p)^(m-1) ),
    J the first candidate taken. Summed over s: c p (c = (1 - (1 - gamma)^m) / gamma), plus
    (1 - gamma)^(m-1) (D(y) - p) when the first is selected: the laws of
    :func:`draftverify.verify.multidraft_bv.sequential_selection` and of K-SEQ's accepted token."""
    t_y, d_y = _validate.rate(target_at, "target_at"), _validate.rate(draft_at, "draft_at")
    taken, gamma = _validate.rate(taken_at, "taken_at"), _validate.rate(taken_mass, "taken_mass")
    m = int(_validate.count(num_candidates, "num_candidates", low=1))
    if t_y.ndim != 1 or not t_y.shape == d_y.shape == taken.shape == gamma.shape:
        raise ValueError(f"target_at, draft_at, taken_at, taken_mass: expected one value per row [R], got shapes "
                         f"{t_y.shape}, {d_y.shape}, {taken.shape}, {gamma.shape}")
    if np.any(t_y <= 0):
        raise ValueError("target_at: each must be > 0 (the target's probability of a path token)")
    p = d_y * taken
    rejected = np.stack([np.clip(1 - d_y - gamma + p, 0, None), d_y - p], 1)  # a candidate not taken: other, y
    anything = np.stack([1 - d_y, d_y], 1)  # a candidate after the one taken
    total = np.zeros((len(t_y), m))
    for first in range(1, m + 1):
        total += p[:, None] * _power_product(rejected, first - 1, anything, m - first)
    if first_if_none:
        total += (d_y - p)[:, None] * _power_product(rejected, m - 1, anything, 0)
    return total / t_y[:, None]


def _power_product(a: np.ndarray, i: int, b: np.ndarray, j: int) -> np.ndarray:
    """Row-wise coefficients of z^0..z^(i+j) of a(z)^i b(z)^j for linear a, b [R, 2] (constant, z)."""
    poly = np.ones((a.shape[0], 1))
    for factor in [a] * i + [b] * j:
        poly = np.concatenate([poly * factor[:, :1], np.zeros((len(poly), 1))], 1) + \
            np.concatenate([np.zeros((len(poly), 1)), poly * factor[:, 1:]], 1)
    return poly


def kseq_position_law(target_probs, draft_probs, tokens, max_drafts) -> np.ndarray:
    """One K-SEQ position's output y, with how many drafts it keeps alive, over T(y): [R, K, K],
    entry [r, m - 1, s - 1] = P(K-SEQ over m i.i.d. candidates from D accepts y = ``tokens[r]``
    from a candidate and s of the m candidates are y) / T(y), for rows ``target_probs`` and
    ``draft_probs`` [R, V] and m = 1..K (``max_drafts``).

    K-SEQ (Sun et al. 2023, Algorithm 2; :class:`draftverify.verify.multidraft.KSeq`) takes a
    candidate x with probability a(x) = min(1, T(x) / (rho_m D(x))) (rho_1 = 1), so gamma =
    beta_m = sum_x min(D(x), T(x) / rho_m) in :func:`selection_position_law`; the multi-step walk
    keeps every draft whose token is the accepted one. Each row m sums to c_m min(D(y), T(y) /
    rho_m) / T(y) <= 1: the residual draw gives the rest of T(y), the probability that y ends the
    call as its correction token (K-SEQ is exact). A path's survival multiplies these matrices
    (:func:`draftverify.theory.tuning.kseq_path_survival`)."""
    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    if target.ndim != 2:
        raise ValueError(f"target_probs: expected rows [R, V], got shape {target.shape}")
    tokens = np.asarray(tokens)
    if tokens.shape != target.shape[:1] or not np.issubdtype(tokens.dtype, np.integer) or \
            np.any((tokens < 0) | (tokens >= target.shape[1])):
        raise ValueError(f"tokens: expected {target.shape[0]} token ids in [0, {target.shape[1]}), got {tokens!r}")
    k = _num_drafts(max_drafts)
    rows = np.arange(len(tokens))
    t_y, d_y = target[rows, tokens], draft[rows, tokens]
    if np.any(t_y <= 0):
        raise ValueError("tokens: each must have target probability > 0 (a target-sampled path)")
    law = np.zeros((len(tokens), k, k))
    for m in range(1, k + 1):
        rho = formulas.kseq_rho(target, draft, m) if m > 1 else np.ones(len(tokens))
        taken = np.minimum(1.0, np.divide(t_y, rho * d_y, out=np.ones_like(t_y), where=d_y > 0))
        law[:, m - 1, :m] = selection_position_law(t_y, d_y, taken, formulas.kseq_beta(target, draft, rho), m,
                                                   first_if_none=False)
    return law


def spectr_gbv_claimed_bound(target_tables, draft_tables, num_drafts) -> np.ndarray:
    """The expected acceptance length SpecTr-GBV claims (seed 004, Lemma 5.1 eq. 5 and Theorem 5.3):
    sum_{i=1}^{L} sum_{x^i} T(x^i) [1 - (1 - min(D(x^i) / T(x^i), 1))^K], joints from the block
    start. Returns the per-length terms [L]; their sum is the claim.

    What it is: the optimum over "conditionally independent couplings" only. It is not an upper
    bound on exact K-draft verifiers: at L = 1 it lies below Hu et al.'s alpha*(K) and sometimes
    below K-SEQ (tests/theory/test_multidraft.py). Remark 5.2 corrected: non-decreasing in K, and
    strictly only if some T(x^i) > 0 has 0 < D(x^i) < T(x^i); it tends to
    sum_i T(D(x^i) > 0), which is L only when the draft covers the target's support.
    """
    target, draft = _validate.table_pair(target_tables, draft_tables)
    k = _num_drafts(num_drafts)
    terms = []
    for t, d in zip(_validate.joint_laws(target), _validate.joint_laws(draft)):
        ratio = np.minimum(np.divide(d, t, out=np.ones_like(t), where=t > 0), 1.0)
        terms.append(float((t * formulas.any_accepted(ratio, k)).sum()))
    return np.array(terms)


@dataclass(frozen=True)
class MultiDraftAcceptance:
    """One position, K i.i.d. drafts: ``optimal`` = alpha*(K) (Hu et al. 2025), ``kseq`` = K-SEQ's
    acceptance, ``kseq_guarantee`` = (1 - 1/e) alpha*(K), ``spectr_gbv_claim`` = seed 004's Lemma 5.1
    value at L = 1, ``single`` = 1 - TV (K = 1)."""

    optimal: float
    kseq: float
    kseq_guarantee: float
    spectr_gbv_claim: float
    single: float


def multidraft_acceptance(target_probs, draft_probs, num_drafts) -> MultiDraftAcceptance:
    """The acceptance values of one position with K i.i.d. drafts, side by side.

    alpha*(K) = 1 + min_H [T(H) - D(H)^K] (Hu et al. 2025 / seed 001 Theorem 3.1, which writes
    psi(H*) where 1 + psi(H*) is meant) comes from :func:`draftverify.ot.optimal_acceptance`.
    """
    from ..ot import optimal_acceptance  # the OT package may be absent in minimal installs

    target, draft = _validate.distribution_pair(target_probs, draft_probs)
    if target.ndim != 1:
        raise ValueError(f"expected one distribution [V], got shape {target.shape}")
    k = _num_drafts(num_drafts)
    optimal = float(optimal_acceptance(target, draft, k))
    return MultiDraftAcceptance(
        optimal=optimal,
        kseq=float(kseq_acceptance(target, draft, k)),
        kseq_guarantee=KSEQ_GUARANTEE * optimal,
        spectr_gbv_claim=float(spectr_gbv_claimed_bound([target], [draft], k).sum()),
        single=float(formulas.overlap(target, draft)),
    )

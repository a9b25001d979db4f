"""Block-level statements of seed 000, section 5 (its p is our draft, its q our target), computed
exactly on small models given as conditional tables (``tables[i]`` of shape ``[V] * (i + 1)``: the
conditionals of block token i + 1 given the block's first i tokens).

"Longest-prefix verification with maximal-agreement coupling" (seed 000, Algorithms 1 and 2) is
token-level speculative sampling: its accepted count A has P(A >= i) = sum_{x^i} prod_{j<=i}
min(T, D)(x_j | x^{j-1}) (:func:`draftverify.theory.single.acceptance_profile`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formulas import overlap, total_variation
from . import _validate
from .single import path_products

__all__ = [
    "LongestPrefixClaim",
    "longest_prefix_claim",
    "FullAcceptanceBound",
    "full_acceptance_bound",
    "markov_sensitivity",
    "MarkovBlockBound",
    "markov_block_bound",
]


def _expected_tv(target: list[np.ndarray], draft: list[np.ndarray], prefix_joints: list[np.ndarray]) -> np.ndarray:
    """E_{x^i ~ prefix law}[TV(T(.|x^i), D(.|x^i))] for i = 0..L-1 ([L])."""
    laws = [np.ones(())] + prefix_joints[:-1]
    return np.array([(law * total_variation(t, d)).sum() for law, t, d in zip(laws, target, draft)])


@dataclass(frozen=True)
class LongestPrefixClaim:
    """Both sides of seed 000, Theorem 5.1, for j = 1..L (arrays [L]).

    ``claimed[j - 1]`` = 1 - TV(T^(j), D^(j)) between the joint laws of the first j tokens, which
    the theorem says longest-prefix verification attains; ``token_level[j - 1]`` = P(A >= j) that
    it does attain. ``claimed`` is a valid upper bound for any exact scheme (the proof's first
    step); the theorem's equality fails as soon as some ``token_level`` < ``claimed``.
    """

    claimed: np.ndarray
    token_level: np.ndarray


def longest_prefix_claim(target_tables, draft_tables) -> LongestPrefixClaim:
    """Seed 000, Theorem 5.1 ("LP attains 1 - TV(P^(j)) for every j"), both sides computed exactly.

    Refuted for token-level verification: context-free T(a) = 1/3, D(a) = 2/3, L = 2 gives
    P(A >= 2) = 4/9 against the claimed 6/9. sum_j claimed[j] is the E[tau] of greedy block
    verification (Sun et al., seed 004 section 3.3), which needs its target modification to be exact;
    in the ordinary loop the optimum is block verification (Sun et al., ICLR 2025, Theorem 2).
    """
    target, draft = _validate.table_pair(target_tables, draft_tables)
    target_joints, draft_joints = _validate.joint_laws(target), _validate.joint_laws(draft)
    claimed = np.array([overlap(t.ravel(), d.ravel()) for t, d in zip(target_joints, draft_joints)])
    token_level = np.array([product.sum() for product in path_products(target, draft)])
    return LongestPrefixClaim(claimed=claimed, token_level=token_level)


@dataclass(frozen=True)
class FullAcceptanceBound:
    """Seed 000, Proposition 5.2: ``exact`` = P(A = L) under token-level SD; ``bound_target`` /
    ``bound_draft`` = 1 - sum_i E[TV_i] with prefixes drawn from the target / the draft."""

    exact: float
    bound_target: float
    bound_draft: float


def full_acceptance_bound(target_tables, draft_tables) -> FullAcceptanceBound:
    """P(A = L) >= 1 - sum_{i=0}^{L-1} E[TV(D_i, T_i)] (seed 000, Proposition 5.2).

    The proof's pathwise product prod (1 - pi_i) is over the accepted path; the bound holds with
    the expectation taken under the target's or the draft's prefix law, since the law of accepted
    prefixes, prod min(T, D), lies below both. Equality when L = 1.
    """
    target, draft = _validate.table_pair(target_tables, draft_tables)
    exact = float(path_products(target, draft)[-1].sum())
    by_target = _expected_tv(target, draft, _validate.joint_laws(target))
    by_draft = _expected_tv(target, draft, _validate.joint_laws(draft))
    return FullAcceptanceBound(
        exact=exact, bound_target=1 - float(by_target.sum()), bound_draft=1 - float(by_draft.sum())
    )


def markov_sensitivity(tables) -> float:
    """The gamma of seed 000, Theorem 5.3: the least gamma with
    TV(q(.|x^n), q(.|x'^n)) <= gamma 1{x_n != x'_n} for all prefixes of the block.

    The condition forces the conditionals to depend on the prefix only through its last token
    (an order-1 Markov model); returns ``inf`` when they do not (no gamma satisfies it).
    Otherwise gamma = the largest TV between the conditionals after two different last tokens.
    """
    tables = _validate.tables(tables, "tables")
    vocab = tables[0].shape[0]
    gamma = 0.0
    for table in tables[1:]:
        rows = table.reshape(-1, vocab, vocab)  # [earlier prefixes, last token, next token]
        if np.abs(rows - rows[:1]).max() > 1e-12:
            return float("inf")
        pairwise = 0.5 * np.abs(rows[0][:, None, :] - rows[0][None, :, :]).sum(axis=-1)  # [V, V]
        gamma = max(gamma, float(pairwise.max()))
    return gamma


@dataclass(frozen=True)
class MarkovBlockBound:
    """Seed 000, Theorem 5.3 beside the exact value, for token-level SD over the block.

    ``exact`` = E[A]; ``claimed`` = sum_j prod_{i<=j} (1 - E_T[TV_i] - gamma_target)_+, the
    theorem's bound (factors taken at their positive part, which its proof needs); ``corrected`` =
    the same with gamma_target + gamma_draft, which holds; ``gamma_target``, ``gamma_draft`` from
    :func:`markov_sensitivity`.
    """

    exact: float
    claimed: float
    corrected: float
    gamma_target: float
    gamma_draft: float


def _product_bound(expected_tv: np.ndarray, gamma: float) -> float:
    factors = np.clip(1 - expected_tv - gamma, 0.0, None) if np.isfinite(gamma) else np.zeros_like(expected_tv)
    return float(np.cumprod(factors).sum())


def markov_block_bound(target_tables, draft_tables) -> MarkovBlockBound:
    """E[A] >= sum_{j=0}^{L-1} prod_{i=0}^{j} (1 - E[TV(D_i, T_i)] - gamma) (seed 000, Theorem 5.3).

    Refuted as stated, where gamma bounds only the target's sensitivity: with an i.i.d. target
    (gamma = 0) a draft whose accepted tokens lead to prefixes where it disagrees with the target
    falls below the bound (tests/theory/test_blocks.py). The proof's decoupling step conditions on
    a match that is correlated with the next prefix. For order-1 Markov target and draft,
    U_i(x) = 1 - TV_i(x) varies over last tokens by at most gamma_target + gamma_draft, which gives
    the ``corrected`` bound. E is over the target's prefix law.
    """
    target, draft = _validate.table_pair(target_tables, draft_tables)
    expected_tv = _expected_tv(target, draft, _validate.joint_laws(target))
    gamma_target, gamma_draft = markov_sensitivity(target), markov_sensitivity(draft)
    exact = float(sum(product.sum() for product in path_products(target, draft)))
    return MarkovBlockBound(
        exact=exact,
        claimed=_product_bound(expected_tv, gamma_target),
        corrected=_product_bound(expected_tv, gamma_target + gamma_draft),
        gamma_target=gamma_target,
        gamma_draft=gamma_draft,
    )

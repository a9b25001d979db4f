"""Validation, subset selection (H*, alpha*) and the outer residuals of seed 001.

Notation: ``target`` = T (seed 001's p), ``draft`` = D (its q), n = ``num_drafts`` i.i.d. drafts.
psi(H) = T(H) - D(H)^n (seed 001 eq. 4). Everything here works on the draft's support
V0 = {x : D(x) > 0}: with top-k drafting V0 is the top-k set, and seed 001 appendix N shows the
relaxed OTLP restricted to V0 is the same problem (target mass outside V0 can only be residual).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..probs import as_tensor, check_distributions

__all__ = ["Instance", "make_instance", "optimal_acceptance", "optimal_subset"]


def _validated(probs, name: str) -> np.ndarray:
    """One distribution [V] (a tensor, an array or a list) as a numpy array, validated by
    :func:`draftverify.probs.check_distributions` (float32/float64, finite, non-negative, summing to
    1 within its tolerance; nothing renormalised): a tensor by torch, an array or a list in numpy.
    A view where one exists: callers copy what they keep."""
    tensor = as_tensor(probs if isinstance(probs, torch.Tensor) else np.asarray(probs), name)  # a view
    if tensor.dim() != 1:
        raise ValueError(f"{name}: expected shape [V], got {tuple(tensor.shape)}")
    check_distributions(tensor if isinstance(probs, torch.Tensor) else tensor.numpy(), name)
    return tensor.cpu().numpy()


@dataclass(frozen=True, eq=False)
class Instance:
    """One validated problem, its support in ratio order, and the subset-selection results.

    ``order`` lists the support V0 sorted by D/T descending (T = 0 first); ``psi[l]`` is psi of the
    first l tokens of ``order`` (psi[0] = 0) and ``covered[l]`` their D^n; H* = ``order[:h]`` with h
    the first argmin.
    """

    target: np.ndarray  # [V] float64
    draft: np.ndarray  # [V] float64, zero outside the support
    num_drafts: int
    order: np.ndarray  # [k] token ids of V0, D/T descending
    psi: np.ndarray  # [k + 1]
    covered: np.ndarray  # [k + 1] D(first l tokens)^n
    h: int  # |H*|
    position: np.ndarray  # [V] index of each token in ``order`` (0 outside the support: only drafted tokens are looked up)
    outside_mass: float  # T(V \\ V0), target mass that only the residual can receive

    @property
    def vocab_size(self) -> int:
        return self.target.size

    @property
    def optimal_acceptance(self) -> float:
        return float(1.0 + self.psi[self.h])

    @property
    def inner_tokens(self) -> np.ndarray:
        return self.order[: self.h]

    @property
    def outer_tokens(self) -> np.ndarray:
        return self.order[self.h :]

    def outer_marginals(self) -> np.ndarray:
        """p_i for the outer tokens (seed 001 Theorem 6.2 with Lemma 6.3), in ``outer_tokens`` order.

        Ordering V \\ H* by increasing D/T makes every min over supersets a suffix minimum of psi
        over prefixes: with M(l) = min_{l' >= l} psi[l'], the token at position j gets
        p_j = T_j + M(j) - M(j + 1). Sum = 1 - D(H*)^n, the draft mass outside (H*)^n.

        Computed as T_j where psi[j] >= M(j + 1) and otherwise as the same number written
        (psi[j + 1] - M(j + 1)) + (D_{j+1}^n - D_j^n), two terms that are >= 0 in floats, so p_j >= 0
        holds after rounding (T_j + M(j) - M(j + 1) gave -6e-17 for a token of mass 1.6e-17, a
        negative max-flow capacity).
        """
        suffix_min = np.minimum.accumulate(self.psi[::-1])[::-1]  # M(l), l = 0..k
        j = np.arange(self.h, self.order.size)
        increment = np.maximum(self.covered[j + 1] - self.covered[j], 0.0)  # x^n is monotone; guard the last ulp
        binding = self.psi[j] < suffix_min[j + 1]  # M(j) = psi[j] < M(j + 1)
        return np.where(binding, (self.psi[j + 1] - suffix_min[j + 1]) + increment, self.target[self.order[j]])

    def outer_blocks(self) -> np.ndarray:
        """Start offsets (within ``outer_tokens``) of the blocks cut by Hall-tight tails.

        The tail of the ratio order from position j is tight (it receives all the mass of every tuple
        that hits it) iff psi[j] <= psi[l] for all l > j. A tuple's mass then goes entirely to the
        last block it touches, and the Luce weights of seed 001 eq. 14 are finite only within a
        block (across blocks they diverge): we solve one softmax system per block.
        """
        suffix_min = np.minimum.accumulate(self.psi[::-1])[::-1]
        j = np.arange(self.h, self.order.size)
        tight = self.psi[j] <= suffix_min[j + 1]
        tight[:1] = True  # H* itself is the first cut (when there are outer tokens)
        return np.flatnonzero(tight)


def make_instance(target_probs, draft_probs, num_drafts: int) -> Instance:
    """Validate and sort (Hu et al. 2025 / seed 001 section 5.1: O(V log V))."""
    target_view, draft_view = _validated(target_probs, "target_probs"), _validated(draft_probs, "draft_probs")
    if target_view.size != draft_view.size:
        raise ValueError(f"target_probs has V = {target_view.size} but draft_probs has V = {draft_view.size}")
    if isinstance(num_drafts, bool) or not isinstance(num_drafts, (int, np.integer)) or num_drafts < 1:
        raise ValueError(f"num_drafts must be an integer >= 1, got {num_drafts!r}")
    # O(V) work is what a top-k draft's instance costs (seed 001 table 1, k = 10: V = 32000 passes
    # for 10 tokens): one copy of the target, the support mask, and arrays that are zero outside the
    # support (np.zeros is one memset, no read)
    target = np.array(target_view, dtype=np.float64)
    support = np.flatnonzero(draft_view > 0)
    draft = np.zeros(target.size)
    draft[support] = draft_view[support]
    on_support = target[support]
    target[support] = 0.0
    outside_mass = float(target.sum())  # summed as the residual is, not as 1 - T(V0) (cancellation)
    target[support] = on_support
    with np.errstate(divide="ignore", over="ignore"):
        ratio = draft[support] / on_support  # inf where T = 0 (or T subnormal)
    order = support[np.argsort(-ratio, kind="stable")]
    cum_target = np.concatenate([[0.0], np.cumsum(target[order])])
    cum_draft = np.minimum(np.concatenate([[0.0], np.cumsum(draft[order])]), 1.0)
    covered = cum_draft ** int(num_drafts)
    psi = cum_target - covered
    h = int(np.argmin(psi))
    position = np.zeros(target.size, dtype=np.int64)
    position[order] = np.arange(order.size)
    return Instance(target=target, draft=draft, num_drafts=int(num_drafts), order=order, psi=psi, covered=covered, h=h,
                    position=position, outside_mass=outside_mass)


def optimal_subset(target_probs, draft_probs, num_drafts: int) -> tuple[float, np.ndarray]:
    """(alpha*, H*): seed 001 Theorem 3.1 (Hu et al. 2025), alpha* = 1 + min_H [T(H) - D(H)^n].

    The minimiser is a prefix of the tokens sorted by D/T descending; H* is the shortest minimising
    prefix (token ids in that order). Seed 001 once writes alpha* = psi(H*): it is 1 + psi(H*).
    """
    instance = make_instance(target_probs, draft_probs, num_drafts)
    return instance.optimal_acceptance, instance.inner_tokens.copy()


def optimal_acceptance(target_probs, draft_probs, num_drafts: int) -> float:
    """alpha*: the largest probability, over all couplings, that the verified token is a draft."""
    return optimal_subset(target_probs, draft_probs, num_drafts)[0]

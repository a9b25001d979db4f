"""Exact solvers: the relaxed OTLP by HiGHS (``lp``) and by max-flow (``maxflow``), and the
complementary-slackness networks (``maxflow-cs``).

Seed 001 eq. 2 (relaxed OTLP), section 5.2 (bipartite max-flow network Omega), section 5.3 and
Theorem 5.1 (outer and inner systems), appendix K eq. 117-120 (tuples grouped by their set of
distinct tokens: one right vertex per set, capacity = its draft mass). Max-flow uses OR-Tools'
``SimpleMaxFlow`` (C++, integer capacities): probabilities are scaled by 2^52 and rounded down, so
flows are feasible and lose at most 2^-52 per arc of acceptance; allocations are normalised by the
flow actually routed. ``lp`` and ``maxflow`` work on ordered tuples as seed 001 does;
``maxflow-cs`` on grouped sets.
"""

from __future__ import annotations

import functools
import itertools
import math
import time

import numpy as np
from scipy import optimize, sparse

from ._plan import Part, split_by_target
from ._subset import Instance

__all__ = ["solve_full", "outer_network", "inner_network", "set_masses", "subsets", "NetworkTooLarge"]

_SCALE = float(2**52)
_INFINITE = 2**60


class NetworkTooLarge(ValueError):
    """The requested network exceeds ``max_arcs``."""


def subsets(count: int, max_size: int) -> list[np.ndarray]:
    """All subsets of range(count) of size 1..max_size, one [C(count, s), s] array per size."""
    return [np.array(list(itertools.combinations(range(count), s)), dtype=np.int64).reshape(-1, s) for s in range(1, max_size + 1)]


def _multiplicities(size: int, budget: int):
    """Tuples (m_1..m_size), every m_j >= 1 and sum <= budget, in lexicographic order (the order of
    itertools.product over range(1, budget + 1)), generated without the rejected ones."""
    if size == 0:
        yield ()
        return
    for first in range(1, budget - size + 2):  # the later size - 1 entries need at least 1 each
        for rest in _multiplicities(size - 1, budget - first):
            yield (first, *rest)


@functools.lru_cache(maxsize=None)
def _compositions(size: int, num_drafts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multiplicities (m_1..m_s >= 1, m_0 = n - sum >= 0) of s distinct tokens among n draws, with
    their multinomial coefficients n! / (m_0! m_1! ... m_s!)."""
    rows = list(_multiplicities(size, num_drafts))
    multiplicity = np.array(rows, dtype=np.int64).reshape(-1, size)
    rest = num_drafts - multiplicity.sum(axis=1)
    coefficient = np.array([math.factorial(num_drafts) / math.factorial(r) / math.prod(math.factorial(v) for v in m) for m, r in zip(rows, rest)])
    return multiplicity, rest, coefficient


def set_masses(members: np.ndarray, draft: np.ndarray, background: float, num_drafts: int) -> np.ndarray:
    """Draft mass of the tuples whose distinct served tokens are exactly each row of ``members``.

    c_S = sum over multiplicities of n! / (m_0! prod m_j!) b^{m_0} prod_{j in S} d_j^{m_j}, b the
    background mass: seed 001 eq. 118 / 120 written as a sum of positive terms (no cancellation,
    unlike inclusion-exclusion). members: [M, s] indices into ``draft``.
    """
    multiplicity, rest, coefficient = _compositions(members.shape[1], num_drafts)
    powers = draft[:, None] ** np.arange(num_drafts + 1)[None, :]  # [V, n+1]
    terms = powers[members[:, :, None], multiplicity.T[None, :, :]].prod(axis=1)  # [M, R]
    return terms @ (coefficient * background**rest)


def _max_flow(left_caps: np.ndarray, right_caps: np.ndarray, edge_left: np.ndarray, edge_right: np.ndarray) -> np.ndarray:
    """Flows on the left->right arcs of a bipartite network s -> left -> right -> t (max flow)."""
    try:
        from ortools.graph.python import max_flow
    except ModuleNotFoundError:
        raise ImportError("the max-flow solvers need OR-Tools: pip install 'draftverify[ot]'") from None

    if not (left_caps.min(initial=0.0) >= 0 and right_caps.min(initial=0.0) >= 0):  # NaN fails too
        raise RuntimeError("max-flow: a capacity is negative or NaN (an internal rounding error); please report")
    num_left, num_right = left_caps.size, right_caps.size
    left_ids = np.arange(num_left, dtype=np.int32) + 2
    right_ids = np.arange(num_right, dtype=np.int32) + 2 + num_left
    tails = np.concatenate([np.zeros(num_left, np.int32), left_ids[edge_left], right_ids])
    heads = np.concatenate([left_ids, right_ids[edge_right], np.ones(num_right, np.int32)])
    caps = np.concatenate(
        [
            np.floor(left_caps * _SCALE).astype(np.int64),
            np.full(edge_left.size, _INFINITE, np.int64),
            np.floor(right_caps * _SCALE).astype(np.int64),
        ]
    )
    solver = max_flow.SimpleMaxFlow()
    arcs = solver.add_arcs_with_capacity(tails, heads, caps)
    status = solver.solve(0, 1)
    if status != solver.OPTIMAL:
        raise RuntimeError(f"OR-Tools max-flow failed with status {status}")
    middle = arcs[num_left : num_left + edge_left.size]
    return solver.flows(middle).astype(np.float64) / _SCALE


def _relaxed_lp(left_caps, right_caps, edge_left, edge_right) -> np.ndarray:
    """Relaxed OTLP (seed 001 eq. 2) by HiGHS: max sum S, row sums <= left, column sums <= right."""
    num_edges = edge_left.size
    columns = np.arange(num_edges)
    rows = sparse.vstack(
        [
            sparse.csr_matrix((np.ones(num_edges), (edge_left, columns)), shape=(left_caps.size, num_edges)),
            sparse.csr_matrix((np.ones(num_edges), (edge_right, columns)), shape=(right_caps.size, num_edges)),
        ]
    ).tocsr()
    result = optimize.linprog(
        -np.ones(num_edges), A_ub=rows, b_ub=np.concatenate([left_caps, right_caps]), bounds=(0, None), method="highs"
    )
    if result.status != 0:
        raise RuntimeError(f"HiGHS failed: {result.message}")
    flows = np.maximum(result.x, 0.0)
    # HiGHS meets constraints to its feasibility tolerance (~1e-7): scale each arc down so every row
    # and column sum is within its capacity, so the residuals of eq. 3 are exact
    row = np.bincount(edge_left, weights=flows, minlength=left_caps.size)
    column = np.bincount(edge_right, weights=flows, minlength=right_caps.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        row_scale = np.where(row > left_caps, left_caps / row, 1.0)
        column_scale = np.where(column > right_caps, right_caps / column, 1.0)
    return flows * np.minimum(row_scale[edge_left], column_scale[edge_right])


class Full:
    """Relaxed OTLP over ordered tuples completed by seed 001 eq. 3 (methods ``lp`` and ``maxflow``)."""

    def __init__(self, instance: Instance, method: str, max_arcs: int):
        start = time.perf_counter()
        self.instance = instance
        n, k = instance.num_drafts, instance.order.size
        if k**n * (n + 1) > max_arcs:
            raise NetworkTooLarge(f"{method}: {k}^{n} ordered tuples exceed max_arcs={max_arcs}")
        local = np.indices((k,) * n).reshape(n, -1).T  # [k^n, n] tuples in support-local ids
        draft = instance.draft[instance.order]
        self.tuple_mass = np.prod(draft[local], axis=1)  # [k^n] Pdraft(w)
        first = np.ones_like(local, dtype=bool)  # slot j holds the first occurrence of its token
        for j in range(1, n):
            first[:, j] = np.all(local[:, :j] != local[:, j : j + 1], axis=1)
        edge_tuple, edge_slot = np.nonzero(first)
        edge_token = local[edge_tuple, edge_slot]
        caps = instance.target[instance.order]
        solve = _max_flow if method == "maxflow" else _relaxed_lp
        flows = solve(caps, self.tuple_mass, edge_token, edge_tuple)
        self.flows = np.zeros(local.shape)  # [k^n, n]
        self.flows[edge_tuple, edge_slot] = flows
        self.residual = instance.target.copy()  # [V] p_res (eq. 3)
        np.subtract.at(self.residual, instance.order[edge_token], flows)
        self.residual = np.maximum(self.residual, 0.0)
        self.draft_residual = np.maximum(self.tuple_mass - self.flows.sum(axis=1), 0.0)  # [k^n]
        self.position = instance.position
        self.seconds = time.perf_counter() - start

    def conditional(self, drafts: np.ndarray) -> np.ndarray:
        local = self.position[drafts]
        index = int(np.ravel_multi_index(tuple(local), (self.instance.order.size,) * self.instance.num_drafts))
        out = np.zeros(self.instance.vocab_size)  # [V]
        np.add.at(out, drafts, self.flows[index])
        total_residual = self.residual.sum()
        residual_law = self.residual / total_residual if total_residual > 0 else None  # ratio first: no overflow
        if residual_law is not None:
            out += self.draft_residual[index] * residual_law
        total = out.sum()
        if total > 0:
            return out / total  # divides by Pdraft(w) up to the flow rounding
        # Pdraft(w) underflowed (a product of masses below 1e-308) or its flow rounded away: the tuple
        # carries no mass the solution can see, and sending it to the residual (or, with none, to its
        # own tokens) moves the implied target by at most that mass
        if residual_law is not None:
            return residual_law
        distinct = np.unique(drafts)
        out[distinct] = split_by_target(self.instance.target[distinct])
        return out

    def implied_target(self) -> np.ndarray:
        law = self.instance.target - self.residual
        total_residual = self.residual.sum()
        if total_residual > 0:
            law = law + self.draft_residual.sum() * self.residual / total_residual
        return law

    def acceptance(self) -> float:
        return float(self.flows.sum())

    def error_bound(self) -> float:
        return 0.0

    def converged(self) -> bool:
        return True

    def timings(self) -> dict[str, float]:
        return {"solve": self.seconds}


def solve_full(instance: Instance, method: str, max_arcs: int) -> Full:
    return Full(instance, method, max_arcs)


def _grouped(count: int, num_drafts: int, max_arcs: int, label: str):
    total = sum(math.comb(count, s) * (s + 1) for s in range(1, min(count, num_drafts) + 1))
    if total > max_arcs:
        raise NetworkTooLarge(f"maxflow-cs: the {label} network has {total} arcs > max_arcs={max_arcs}")
    return _grouped_structure(count, min(count, num_drafts))


@functools.lru_cache(maxsize=16)
def _grouped_structure(count: int, width: int):
    """Arcs token -> set (sets of size 1..width of ``count`` tokens, laid out set by set), the sets,
    their index, and each set's first arc."""
    groups = subsets(count, width)
    edge_left = np.concatenate([g.ravel() for g in groups]) if groups else np.zeros(0, np.int64)
    sizes = np.concatenate([np.full(g.shape[0], g.shape[1]) for g in groups]) if groups else np.zeros(0, np.int64)
    edge_right = np.repeat(np.arange(sizes.size), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return edge_left, edge_right, groups, _SetIndex(groups, count), starts


class _SetIndex:
    """Row of a set of local ids among all groups (sets of size s are keyed in base ``count``)."""

    def __init__(self, groups: list[np.ndarray], count: int):
        self.tables = []
        offset = 0
        for g in groups:
            keys = g @ (count ** np.arange(g.shape[1], dtype=np.int64))
            order = np.argsort(keys)
            self.tables.append((keys[order], order + offset))
            offset += g.shape[0]
        self.count = count

    def row(self, members: np.ndarray) -> int:
        keys, rows = self.tables[members.size - 1]
        key = int(np.sort(members) @ (self.count ** np.arange(members.size, dtype=np.int64)))
        return int(rows[np.searchsorted(keys, key)])


def outer_network(instance: Instance, max_arcs: int) -> Part:
    """Outer system (Theorem 5.1 eq. 6a) with token capacities p_i from Theorem 6.2: every outer
    tuple's mass must be routed, grouped by its set of tokens outside H*."""
    start = time.perf_counter()
    tokens = instance.outer_tokens
    required = instance.outer_marginals()
    background = float(instance.draft[instance.inner_tokens].sum())
    edge_left, edge_right, groups, index, starts = _grouped(tokens.size, instance.num_drafts, max_arcs, "outer")
    masses = np.concatenate([set_masses(g, instance.draft[tokens], background, instance.num_drafts) for g in groups]) if groups else np.zeros(0)
    flows = _max_flow(required, masses, edge_left, edge_right) if groups else np.zeros(0)
    return _network_part(instance, tokens, index, starts, edge_left, edge_right, flows, masses, start, slack=False)


def inner_network(instance: Instance, max_arcs: int) -> Part:
    """Inner system (Theorem 5.1 eq. 6b): H* tokens must receive T(i) from tuples in (H*)^n."""
    start = time.perf_counter()
    tokens = instance.inner_tokens
    required = instance.target[tokens]
    edge_left, edge_right, groups, index, starts = _grouped(tokens.size, instance.num_drafts, max_arcs, "inner")
    masses = np.concatenate([set_masses(g, instance.draft[tokens], 0.0, instance.num_drafts) for g in groups]) if groups else np.zeros(0)
    flows = _max_flow(required, masses, edge_left, edge_right) if groups else np.zeros(0)
    return _network_part(instance, tokens, index, starts, edge_left, edge_right, flows, masses, start, slack=True)


def _network_part(instance, tokens, index, starts, edge_left, edge_right, flows, masses, start, *, slack: bool) -> Part:
    intake = np.bincount(edge_left, weights=flows, minlength=tokens.size)
    routed = np.bincount(edge_right, weights=flows, minlength=masses.size)
    offset = 0 if slack else instance.h  # inner tokens are order[:h], outer ones order[h:]

    def allocate(served: np.ndarray) -> np.ndarray:
        ids = instance.position[served] - offset
        order = np.argsort(ids)
        row = index.row(ids)
        shares = np.empty(served.size)
        denominator = masses[row] if slack else routed[row]
        if not denominator > 0:  # a set of draft mass < 2^-52: its capacity rounded to zero
            return np.zeros(served.size) if slack else np.full(served.size, 1.0 / served.size)
        shares[order] = flows[starts[row] : starts[row + 1]] / denominator
        return shares

    return Part("maxflow-cs", allocate, intake, 0.0, True, time.perf_counter() - start)

"""draftverify.ot on numerically hard but valid instances (issue 16): tiny masses, ties, zeros.

Every solver must return a finite conditional distribution for every drafted tuple, and no NaN may
pass a convergence or bound check.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from draftverify import get_verifier, ot
from draftverify.ot._subset import make_instance

# the audit's instance: V = 4, two tokens of mass 1e-13 / 2e-13 and 6e-7 in both target and draft.
# H* is every token (alpha* = 1 to float precision, so no residual exists anywhere), and the set
# {2} has draft mass 4e-26, below maxflow-cs's 2^-52 capacity resolution: before the fix its
# conditional was 0/0 = NaN, gr (which did not converge here: a saturated token stalled Newton)
# fell back to it, and the ot verifier raised "categorical: all weights are zero"
AUDIT_TARGET = np.array([0.05, 0.95 - 1e-13 - 6e-7, 1e-13, 6e-7])
AUDIT_DRAFT = np.array([0.05, 0.95 - 2e-13 - 6e-7, 2e-13, 6e-7])


def _every_conditional(plan, draft: np.ndarray, num_drafts: int):
    """pi(. | w) for every tuple w over the draft's support."""
    support = np.flatnonzero(draft > 0)
    for tuple_ in itertools.product(support, repeat=num_drafts):
        yield tuple_, plan.conditional(np.array(tuple_))


def assert_conditionals_are_distributions(plan, draft: np.ndarray, num_drafts: int) -> None:
    for tuple_, criterion in _every_conditional(plan, draft, num_drafts):
        assert np.all(np.isfinite(criterion)), f"{plan.method}: pi(. | {tuple_}) = {criterion}"
        assert criterion.min() >= 0 and abs(criterion.sum() - 1) < 1e-9, f"{plan.method}: pi(. | {tuple_}) = {criterion}"


@pytest.mark.parametrize("method", list(ot.METHODS))
def test_audit_instance_gives_finite_conditionals(method):
    with np.errstate(all="raise"), warnings.catch_warnings(action="error"):
        plan = ot.solve(AUDIT_TARGET, AUDIT_DRAFT, 2, method=method)
        assert_conditionals_are_distributions(plan, AUDIT_DRAFT, 2)
        assert plan.target_error <= plan.error_bound + 1e-12


@pytest.mark.parametrize("solver", ["gr", "maxflow-cs"])
def test_audit_instance_through_the_ot_verifier(solver):
    verifier = get_verifier("ot", solver=solver)
    tokens = torch.tensor([[2], [2]])  # [K = 2, L = 1]: both drafts drew the 2e-13 token
    draft = torch.from_numpy(np.tile(AUDIT_DRAFT, (2, 1, 1)))  # [K, L, V]
    target = torch.from_numpy(np.tile(AUDIT_TARGET, (2, 2, 1)))  # [K, L + 1, V]
    for seed in range(4):
        result = verifier.verify(tokens, draft, target, torch.Generator().manual_seed(seed))
        assert len(result.tokens) >= 1


def test_gr_converges_on_the_audit_instance():
    """A token whose share saturates (~1) has a near-zero Hessian row; its Newton component was
    ~1e130 and every step of the line search failed, so gr stalled and fell back."""
    plan = ot.solve(AUDIT_TARGET, AUDIT_DRAFT, 2, method="gr")
    assert plan.target_error <= plan.error_bound <= 3e-4 + 1e-6
    assert plan.converged and plan.fallback is None


def _normalised(weights) -> np.ndarray:
    weights = np.asarray(weights, dtype=np.float64)
    return weights / weights.sum()


def _hard_instances():
    """Small valid instances that are hard for floating point: (label, target, draft, num_drafts)."""
    rng = np.random.default_rng(16)
    out = [("audit", AUDIT_TARGET, AUDIT_DRAFT, 2)]
    for vocab, n in [(3, 2), (4, 2), (4, 3), (5, 2), (5, 3), (3, 4)]:
        target, draft = rng.dirichlet(np.full(vocab, 0.5)), rng.dirichlet(np.full(vocab, 0.5))
        out.append(("random", target, draft, n))
        out.append(("identical", target, target.copy(), n))  # alpha* = 1: no residual anywhere
        out.append(("near-identical", target, _normalised(target * (1 + 1e-9 * rng.standard_normal(vocab))), n))
        out.append(("ties", _normalised(rng.integers(1, 3, vocab)), _normalised(rng.integers(1, 3, vocab)), n))
        zeros_target, zeros_draft = target.copy(), draft.copy()
        zeros_target[0], zeros_draft[-1] = 0.0, 0.0
        out.append(("zeros", _normalised(zeros_target), _normalised(zeros_draft), n))
        tiny = 10.0 ** rng.uniform(-60, -8, size=2)
        tiny_target, tiny_draft = target.copy(), target.copy()
        tiny_target[:2], tiny_draft[:2] = tiny, tiny * np.exp(0.2 * rng.standard_normal(2))
        out.append(("tiny", _normalised(tiny_target), _normalised(tiny_draft), n))
    return out


HARD = _hard_instances()


@pytest.mark.parametrize("label,target,draft,n", HARD, ids=[f"{h[0]}-V{h[1].size}-n{h[3]}" for h in HARD])
def test_every_solver_is_clean_on_hard_small_instances(label, target, draft, n):
    """No floating-point event at all (not even underflow), and every conditional a distribution."""
    with np.errstate(all="raise"), warnings.catch_warnings(action="error"):
        for method in ot.METHODS:
            plan = ot.solve(target, draft, n, method=method)
            assert_conditionals_are_distributions(plan, draft, n)
            assert plan.target_error <= plan.error_bound + 1e-9
            slack = 2e-7 if method == "lp" else 1e-9  # HiGHS is optimal to its 1e-7 tolerances
            assert abs(plan.acceptance - plan.optimal_acceptance) <= plan.error_bound + slack


@pytest.mark.parametrize("n", [2, 3, 4])
def test_masses_down_to_1e_300(n):
    """Masses of 1e-300 in target and draft (and a draft token the target gives 0): products of n
    such masses are below the smallest float, so underflow is allowed here and nothing else is."""
    target = _normalised([0.5, 1e-300, 1e-200, 0.0, 0.5])
    draft = _normalised([0.6, 1e-300, 1e-150, 1e-300, 0.4])
    cases = [(target, draft), (draft, target), (target, target), (_normalised([1.0, 1e-300]), _normalised([1e-300, 1.0]))]
    with np.errstate(all="raise", under="ignore"), warnings.catch_warnings(action="error"):
        for case_target, case_draft in cases:
            for method in ot.METHODS:
                plan = ot.solve(case_target, case_draft, n, method=method)
                assert_conditionals_are_distributions(plan, case_draft, n)
                assert plan.target_error <= plan.error_bound + 1e-9


def _fuzz_instance(rng: np.random.Generator):
    """One random valid instance, often near-degenerate: V = 2..5, n = 1..4."""
    vocab, n, kind = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(0, 5))
    target = rng.dirichlet(np.full(vocab, rng.choice([0.1, 0.5, 1.0])))
    draft = rng.dirichlet(np.full(vocab, rng.choice([0.1, 0.5, 1.0])))
    if kind == 1:  # near-identical
        draft = target * np.exp(1e-6 * rng.standard_normal(vocab))
    elif kind == 2:  # two tokens of mass down to 1e-300 in both
        index = rng.choice(vocab, size=min(2, vocab), replace=False)
        target[index] = 10.0 ** rng.uniform(-300, -5, size=index.size)
        draft[index] = target[index] * np.exp(0.1 * rng.standard_normal(index.size))
    elif kind == 3:  # zeros in either
        target[rng.random(vocab) < 0.3], draft[rng.random(vocab) < 0.3] = 0.0, 0.0
        target[0] += target.sum() == 0
        draft[-1] += draft.sum() == 0
    elif kind == 4:  # ties
        target, draft = np.round(4 * target) + 1, np.round(4 * draft) + 1
    return _normalised(target), _normalised(draft), n


@pytest.mark.parametrize("seed", range(6))
def test_every_solver_is_clean_on_fuzzed_instances(seed):
    """Instances like those on which gr warned before (overflow in exp, 0/0 shares, inf - inf in its
    start) and lp / maxflow / maxflow-cs returned NaN conditionals. Underflow is allowed (masses of
    1e-300), nothing else."""
    rng = np.random.default_rng([16, seed])
    with np.errstate(all="raise", under="ignore"), warnings.catch_warnings(action="error"):
        for _ in range(12):
            target, draft, n = _fuzz_instance(rng)
            for method in ot.METHODS:
                plan = ot.solve(target, draft, n, method=method)
                assert_conditionals_are_distributions(plan, draft, n)
                assert plan.target_error <= plan.error_bound + 1e-9


def test_gr_on_the_grid_shape_raises_no_floating_point_error():
    """Seed 001 Table 1's shape: V = 32000 LM-like pairs, top-k 10 / 100 drafts, n = 2..4, both
    tolerances, and the near-identical pairs (draft noise 0 and 1e-6) where alpha* is close to 1."""
    from draftverify.bench.ot import synthetic_pair, top_k

    rng = np.random.default_rng(1)
    pairs = [synthetic_pair(rng, 32000, noise) for noise in (0.65, 0.65, 1e-6, 0.0)]
    with np.errstate(all="raise"), warnings.catch_warnings(action="error"):
        for target, full_draft in pairs:
            for k, n in itertools.product((10, 100), (2, 3, 4)):
                draft = top_k(full_draft, k)
                for tol in (1e-3, 1e-4):
                    plan = ot.solve(target, draft, n, method="gr", tol=tol, fallback=None)
                    assert plan.target_error <= plan.error_bound <= 3 * tol + 1e-6
                    criterion = plan.conditional(np.argsort(-draft)[:n])
                    assert np.all(np.isfinite(criterion)) and abs(criterion.sum() - 1) < 1e-9


def test_a_nan_is_never_within_tol_or_a_bound(monkeypatch):
    from draftverify.ot import _gr, _luce
    from draftverify.ot._plan import Part

    # the solver: a NaN gradient norm is not convergence
    system = _luce.LuceSystem(np.array([0.3, 0.3]), np.array([0.2, np.nan]), 0.0, True, 2)
    with np.errstate(invalid="ignore"):
        assert _luce.solve_luce(system, 1e-4, 5)[3] is False
    # a part that claims convergence with a NaN deviation is not trusted: the exact fallback serves
    # it, and without a fallback the plan says it is unconverged with an infinite bound
    target, draft = _normalised([0.2, 0.3, 0.5]), _normalised([0.5, 0.3, 0.2])
    real_inner = _gr.inner_part

    def nan_inner(instance, tol, max_iter):
        part = real_inner(instance, tol, max_iter)
        return Part("gr", part.allocate, part.intake, float("nan"), True, part.seconds)

    monkeypatch.setattr(_gr, "inner_part", nan_inner)
    plan = ot.solve(target, draft, 2, method="gr")
    assert plan.error_bound < 1e-9 and plan.fallback == "maxflow-cs" and not plan.converged  # bound first: it solves
    lone = ot.solve(target, draft, 2, method="gr", fallback=None)
    assert lone.error_bound == np.inf and not lone.converged

    # a conditional that is not a distribution is an error, never returned
    def broken_inner(instance, tol, max_iter):
        part = real_inner(instance, tol, max_iter)
        return Part("gr", lambda served: np.full(served.size, np.nan), part.intake, part.deviation, True, part.seconds)

    monkeypatch.setattr(_gr, "inner_part", broken_inner)
    broken = ot.solve(target, draft, 2, method="gr")
    inner_token = int(ot.optimal_subset(target, draft, 2)[1][0])
    with pytest.raises(RuntimeError, match="not a distribution"), np.errstate(invalid="ignore"):
        broken.conditional([inner_token, inner_token])


def test_outer_totals_are_never_negative():
    """Theorem 6.2's p_j >= 0 must hold in floats: T_j + M(j) - M(j + 1) rounded to -6e-17 for a
    token of mass 1.6e-17, its max-flow capacity became -1 and maxflow-cs routed nothing outside
    H* (acceptance 0.026 against alpha* = 0.56, with an error bound of 0)."""
    target = _normalised([0.6084, 1e-241, 0.3652, 0.0264, 1.6e-17])
    draft = _normalised([0.2407, 1e-241, 0.0762, 0.6831, 2.1e-17])
    assert np.all(make_instance(target, draft, 2).outer_marginals() >= 0)
    for method in ot.METHODS:
        plan = ot.solve(target, draft, 2, method=method)
        assert plan.acceptance == pytest.approx(plan.optimal_acceptance, abs=2e-7)
        assert plan.target_error <= plan.error_bound + 1e-9

"""draftverify.ot against brute force on tiny vocabularies (seed 001 eq. 1, Theorem 3.1)."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
from scipy import optimize

from draftverify import ot
from draftverify.ot._subset import make_instance

TOL = 1e-4


def _instance(seed: int, vocab: int, top: int | None = None, target_zero: bool = False):
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.full(vocab, 0.7))
    draft = rng.dirichlet(np.full(vocab, 0.7))
    if top is not None:  # top-k draft (appendix N): zeros outside the support
        draft[np.argsort(draft)[: vocab - top]] = 0.0
        draft /= draft.sum()
    if target_zero:
        target[np.argmax(draft)] = 0.0
        target /= target.sum()
    return target, draft


def _brute_force_alpha(target, draft, n) -> float:
    """The full OTLP (eq. 1) over V x V^n variables, by HiGHS."""
    vocab = target.size
    tuples = list(itertools.product(range(vocab), repeat=n))
    mass = np.array([np.prod(draft[list(w)]) for w in tuples])
    num = vocab * len(tuples)  # variable (i, w) at i * |tuples| + w
    rows = np.zeros((vocab + len(tuples), num))
    for i in range(vocab):
        rows[i, i * len(tuples) : (i + 1) * len(tuples)] = 1.0
    for w in range(len(tuples)):
        rows[vocab + w, w :: len(tuples)] = 1.0
    gain = np.array([1.0 if i in tuples[w] else 0.0 for i in range(vocab) for w in range(len(tuples))])
    result = optimize.linprog(-gain, A_eq=rows, b_eq=np.concatenate([target, mass]), bounds=(0, None), method="highs")
    assert result.status == 0
    return -result.fun


def enumerated(plan, target, draft, n):
    """(acceptance, implied target marginal) of a plan, by enumerating every drafted tuple."""
    support = np.flatnonzero(draft > 0)
    law = np.zeros(target.size)
    acceptance = 0.0
    for w in itertools.product(support, repeat=n):
        criterion = plan.conditional(np.array(w))
        assert criterion.min() >= -1e-15 and abs(criterion.sum() - 1) < 1e-9, "conditional is not a distribution"
        mass = np.prod(draft[list(w)])
        law += mass * criterion
        acceptance += mass * criterion[sorted(set(w))].sum()
    return acceptance, law


CASES = [
    (0, 4, None, False, 2),
    (1, 4, None, False, 3),
    (2, 5, 3, False, 2),
    (3, 4, None, True, 3),
    (4, 3, None, False, 4),
    (5, 5, 4, True, 3),
    (6, 6, 5, False, 2),
]


@pytest.mark.parametrize("seed,vocab,top,target_zero,n", CASES)
def test_every_method_reaches_the_brute_force_optimum(seed, vocab, top, target_zero, n):
    target, draft = _instance(seed, vocab, top, target_zero)
    best = _brute_force_alpha(target, draft, n)
    assert ot.optimal_acceptance(target, draft, n) == pytest.approx(best, abs=1e-9)
    for method in ot.METHODS:
        plan = ot.solve(target, draft, n, method=method, tol=TOL)
        acceptance, law = enumerated(plan, target, draft, n)
        error = np.abs(law - target).sum()
        assert plan.acceptance == pytest.approx(acceptance, abs=1e-9)
        assert plan.target_error == pytest.approx(error, abs=1e-9)
        if method == "gr":
            assert abs(acceptance - best) <= 10 * TOL and error <= 15 * TOL
            assert error <= plan.error_bound + 1e-12 and plan.error_bound <= 3 * TOL + 1e-6
        else:
            assert acceptance == pytest.approx(best, abs=1e-9) and error < 1e-9 and plan.error_bound == 0.0
        assert plan.converged and plan.fallback is None


def test_subset_selection_is_a_ratio_prefix_and_alpha_grows_with_n():
    target, draft = _instance(11, 6)
    alpha, subset = ot.optimal_subset(target, draft, 3)
    ratio = draft / target
    assert set(subset) == set(np.argsort(-ratio)[: subset.size])
    every = min(target[list(s)].sum() - draft[list(s)].sum() ** 3 for r in range(7) for s in itertools.combinations(range(6), r))
    assert alpha == pytest.approx(1 + every, abs=1e-12)  # Theorem 3.1 over all 2^V subsets
    alphas = [ot.optimal_acceptance(target, draft, n) for n in range(1, 7)]
    assert np.all(np.diff(alphas) >= -1e-12)
    assert alphas[0] == pytest.approx(np.minimum(target, draft).sum())  # n = 1: 1 - TV


def test_the_subset_is_the_shortest_minimising_prefix():
    """Token 1 has T = D: with it or without it, T(H) - D(H) is -1/8 (dyadic: an exact tie); H* is
    the shorter, {0}."""
    alpha, subset = ot.optimal_subset(np.array([0.5, 0.25, 0.25]), np.array([0.625, 0.25, 0.125]), 1)
    assert alpha == 0.875 and subset.tolist() == [0]


@pytest.mark.parametrize(
    "target,draft,n",
    [
        ([0.01, 0.197, 0.197, 0.002, 0.471, 0.123], [0.24, 0.16, 0.074, 0.21, 0.311, 0.005], 2),
        ([0.034, 0.221, 0.003, 0.742], [0.093, 0.14, 0.3, 0.468], 4),
        # a block of two after a block of one: its background holds the earlier block's draft mass
        ([0.339, 0.036, 0.421, 0.153, 0.025, 0.027], [0.149, 0.016, 0.017, 0.061, 0.016, 0.741], 3),
    ],
)
def test_outer_blocks_are_exercised_and_exact(target, draft, n):
    """Instances whose outer tokens form a block of several tokens (a finite softmax system)."""
    target, draft = np.array(target) / np.sum(target), np.array(draft) / np.sum(draft)
    instance = make_instance(target, draft, n)
    sizes = np.diff(np.append(instance.outer_blocks(), instance.outer_tokens.size))
    assert sizes.max() >= 2
    plan = ot.solve(target, draft, n, method="gr", tol=1e-6)
    acceptance, law = enumerated(plan, target, draft, n)  # solves every part: a fresh lazy plan has none to judge
    assert plan.converged and plan.fallback is None  # Global Resolution's own plan, not the exact fallback's
    assert acceptance == pytest.approx(_brute_force_alpha(target, draft, n), abs=2e-6)
    assert np.abs(law - target).sum() <= 3e-6


def test_generating_function_matches_enumeration():
    """The quadrature evaluation of Phi / Theta (value, gradient, Hessian-vector) equals the sum over sets."""
    from draftverify.ot import _luce, _objectives

    rng = np.random.default_rng(3)
    for slack, n in [(True, 2), (True, 4), (False, 3)]:
        draft = rng.dirichlet(np.ones(7)) * 0.6
        system = _luce.LuceSystem(draft, rng.dirichlet(np.ones(7)) * 0.3, 0.0 if slack else 0.4, slack, n)
        alpha, vector = rng.normal(size=7) * 2, rng.normal(size=7)
        exact = _objectives._Enumerated(system).evaluate(alpha, True)
        quadrature = _objectives._Generating(system).evaluate(alpha, True)
        assert quadrature[0] == pytest.approx(exact[0], abs=1e-7)
        assert np.abs(quadrature[1] - exact[1]).sum() < _objectives.QUADRATURE_ALLOWANCE
        assert np.abs(_objectives.hessian_product(quadrature[3], vector) - exact[3] @ vector).sum() < 1e-6


def test_a_luce_system_is_converged_exactly_when_its_certified_error_is_within_tol():
    """``solve_luce`` says converged when sum |grad| <= tol and never otherwise: two Newton steps on
    an inner system (Global Resolution's, n = 3) stop at an error e below the start's and the first
    step's; they are unconverged at tol = e / 5 and converged at tol just above e."""
    from draftverify.ot import _luce

    rng = np.random.default_rng(0)
    instance = make_instance(rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8)), 3)
    inner = instance.inner_tokens
    system = _luce.LuceSystem(instance.draft[inner], instance.target[inner], 0.0, True, 3)
    errors = [_luce.solve_luce(system, 1e-300, steps)[2] for steps in range(3)]  # 0.175, 0.0105, 5.7e-4
    assert errors[2] < min(errors[:2]) and errors[2] > 1e-6
    assert _luce.solve_luce(system, errors[2] / 5, 2)[2:] == (errors[2], False)
    assert _luce.solve_luce(system, errors[2] * (1 + 1e-9), 2)[2:] == (errors[2], True)


def test_newton_converges_in_a_few_steps_on_the_generating_function_path():
    """Newton's method with the exact Hessian (conjugate gradients to 1e-3 of the residual) converges
    quadratically: the large-support test's 400 tokens reach sum |grad| <= 1e-10 within 11 steps (8
    measured; a conjugate gradient stopped at half its residual takes 13, one of two iterations never
    gets there)."""
    rng = np.random.default_rng(5)
    logits = -1.2 * np.log(np.arange(1, 401)) + 0.5 * rng.standard_normal(400)
    target = np.exp(logits) / np.exp(logits).sum()
    draft_logits = logits + 0.5 * rng.standard_normal(400)
    draft = np.exp(draft_logits) / np.exp(draft_logits).sum()
    plan = ot.solve(target, draft, 3, method="gr", tol=1e-10, max_iter=11, fallback=None)
    assert plan.target_error <= plan.error_bound <= 3e-10 + 1e-6 and plan.converged


def test_dense_evaluation_matches_enumeration():
    """_Dense (slack systems, direct in u) equals _Enumerated (log space): value, gradient, Hessian."""
    from draftverify.ot import _luce, _objectives

    rng = np.random.default_rng(4)
    for n, size in [(2, 10), (3, 6), (2, 3), (1, 5)]:
        draft = rng.dirichlet(np.ones(size)) * 0.7
        required = rng.dirichlet(np.ones(size)) * 0.4
        required[0] = 0.0  # a token that must receive nothing: alpha = -inf
        system = _luce.LuceSystem(draft, required, 0.0, True, n)
        assert isinstance(_objectives.evaluator(system), _objectives._Dense)
        for scale in (0.5, 3.0, 60.0):
            alpha = rng.normal(size=size) * scale
            alpha[0] = -np.inf
            alpha = np.minimum(alpha, _objectives.ALPHA_MAX)
            with np.errstate(all="raise", under="ignore"):
                dense = _objectives._Dense(system).evaluate(alpha, True)
            exact = _objectives._Enumerated(system).evaluate(alpha, True)
            assert dense[0] == pytest.approx(exact[0], rel=1e-12, abs=1e-12)
            for a, b in zip(dense[1:], exact[1:]):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


def test_large_support_uses_the_generating_function_and_converges():
    rng = np.random.default_rng(5)
    logits = -1.2 * np.log(np.arange(1, 401)) + 0.5 * rng.standard_normal(400)
    target = np.exp(logits) / np.exp(logits).sum()
    draft_logits = logits + 0.5 * rng.standard_normal(400)
    draft = np.exp(draft_logits) / np.exp(draft_logits).sum()
    plan = ot.solve(target, draft, 3, method="gr", tol=TOL, fallback=None)
    assert plan.target_error <= plan.error_bound <= 3 * TOL + 1e-6  # solves both parts
    assert plan.converged
    assert abs(plan.acceptance - plan.optimal_acceptance) <= 2 * TOL + 1e-6
    criterion = plan.conditional(np.array([0, 1, 399]))
    assert criterion.min() >= 0 and criterion.sum() == pytest.approx(1.0)


def test_gr_falls_back_and_says_so():
    target, draft = _instance(1, 5)
    plan = ot.solve(target, draft, 3, method="gr", tol=1e-12, max_iter=1)
    assert plan.acceptance == pytest.approx(plan.optimal_acceptance, abs=1e-9)  # served by maxflow-cs
    assert not plan.converged and plan.fallback == "maxflow-cs" and plan.target_error < 1e-9
    lone = ot.solve(target, draft, 3, method="gr", tol=1e-12, max_iter=1, fallback=None)
    assert not lone.converged and {"outer", "inner"} <= set(lone.timings)  # a fresh plan's is judged: both solved
    assert lone.acceptance > 0 and lone.fallback is None
    # the fallback network over its limit: the approximate part is kept, and says so
    kept = ot.solve(target, draft, 3, method="gr", tol=1e-12, max_iter=1, max_arcs=1)
    assert kept.acceptance > 0 and not kept.converged and kept.fallback is None
    assert kept.target_error <= kept.error_bound + 1e-12


def test_network_size_limit():
    target, draft = _instance(0, 6)
    with pytest.raises(ValueError, match="max_arcs"):
        ot.solve(target, draft, 3, method="maxflow", max_arcs=100)


@pytest.mark.parametrize(
    "target,draft,n,kwargs,match",
    [
        (np.array([0.5, 0.5]), np.array([0.5, 0.25, 0.25]), 2, {}, "V ="),
        (np.array([0.5, 0.6]), np.array([0.5, 0.5]), 2, {}, "sum to 1"),
        (np.array([0.5, 0.5], dtype=np.float16), np.array([0.5, 0.5]), 2, {}, "float32 or float64"),
        (np.array(["a", "b"]), np.array([0.5, 0.5]), 2, {}, "numeric array"),
        (np.array([], dtype=np.float64), np.array([0.5, 0.5]), 2, {}, "empty"),
        (np.array([np.nan, 1.0]), np.array([0.5, 0.5]), 2, {}, "NaN"),
        (np.array([-0.5, 1.5]), np.array([0.5, 0.5]), 2, {}, "negative"),
        (np.array([[0.5, 0.5]]), np.array([0.5, 0.5]), 2, {}, "shape"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 0, {}, "num_drafts"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"method": "simplex"}, "unknown OT method"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"tol": 0.0}, "tol"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"budget": 3}, "unknown limit"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"fallback": "lp"}, "fallback"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 1000, {"method": "gr"}, "above ot.solve's limit of 170.*171! overflows"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 171, {"method": "maxflow-cs"}, "limit of 170"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), None, {}, "num_drafts must be an integer"),
        (np.array([0.5, 0.5], dtype=object), np.array([0.5, 0.5]), 2, {}, "target_probs: expected a numeric array"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"method": ["gr"]}, "unknown OT method"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"max_iter": 1.5}, "max_iter must be an integer >= 1, got 1.5"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"max_iter": None}, "max_iter must be an integer"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"max_arcs": float("inf")}, "max_arcs must be an integer"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, {"tol": "1e-4"}, "tol must be in"),
    ],
)
def test_bad_input_is_a_clear_value_error(target, draft, n, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ot.solve(target, draft, n, **kwargs)


@pytest.mark.parametrize("method", ["maxflow-cs", "gr"])
def test_the_draft_limit_is_where_float64_factorials_end(method):
    target, draft = np.array([0.3, 0.7]), np.array([0.9, 0.1])
    plan = ot.solve(target, draft, ot.MAX_DRAFTS, method=method)
    assert plan.acceptance == pytest.approx(plan.optimal_acceptance, abs=2 * TOL + 1e-9)
    assert ot.optimal_acceptance(target, draft, 10 * ot.MAX_DRAFTS) <= 1.0  # no limit on alpha*


def test_limits_may_be_written_as_floats():
    target, draft = _instance(0, 4)
    assert ot.solve(target, draft, 2, method="maxflow-cs", max_arcs=2e7).acceptance == pytest.approx(
        ot.optimal_acceptance(target, draft, 2), abs=1e-9
    )


def test_inputs_may_be_lists_views_or_float32_tensors():
    import torch

    target, draft = _instance(2, 5)
    alpha = ot.optimal_acceptance(target, draft, 2)
    assert ot.optimal_acceptance(list(target[::-1]), draft[::-1], 2) == pytest.approx(alpha, abs=1e-12)
    as_float32 = ot.optimal_acceptance(torch.from_numpy(target).float(), torch.from_numpy(draft).float(), 2)
    assert as_float32 == pytest.approx(alpha, abs=1e-6)


def test_conditional_rejects_impossible_tuples():
    plan = ot.solve(np.array([0.2, 0.3, 0.5]), np.array([0.5, 0.5, 0.0]), 2, method="maxflow-cs")
    with pytest.raises(ValueError, match="zero draft probability"):
        plan.conditional([0, 2])
    with pytest.raises(ValueError, match="2 integer token ids"):
        plan.conditional([0])
    with pytest.raises(ValueError, match="lie in"):
        plan.conditional([0, 3])


def test_max_flow_without_or_tools_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.graph.python", None)  # import fails as if absent
    with pytest.raises(ImportError, match=r"pip install 'draftverify\[ot\]'"):
        ot.solve(*_instance(0, 6), 3, method="maxflow")

"""Property tests (hypothesis) of the OT invariants on random tiny instances, including
near-degenerate ones (ties, zeros, near-identical target and draft, tiny masses)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import ot

from .test_ot import enumerated

TOL = 1e-4


@st.composite
def instances(draw):
    vocab = draw(st.integers(2, 5))
    weights = st.lists(st.floats(0.0, 1.0), min_size=vocab, max_size=vocab)
    target = np.array(draw(weights)) + 1e-3 * draw(st.integers(0, 1))
    draft = np.array(draw(weights))
    if target.sum() <= 0 or draft.sum() <= 0:
        target, draft = np.ones(vocab), np.ones(vocab)
    return target / target.sum(), draft / draft.sum(), draw(st.integers(1, 3))


@settings(max_examples=25, deadline=None)
@given(instances())
def test_plans_are_couplings_with_optimal_acceptance(instance):
    target, draft, n = instance
    alpha = ot.optimal_acceptance(target, draft, n)
    assert alpha >= np.minimum(target, draft).sum() - 1e-12  # n drafts never do worse than one
    for method in ("maxflow-cs", "gr"):
        plan = ot.solve(target, draft, n, method=method, tol=TOL)
        acceptance, law = enumerated(plan, target, draft, n)  # asserts every conditional is a distribution
        error = np.abs(law - target).sum()
        assert error <= plan.error_bound + 1e-9 and plan.error_bound <= 3 * TOL + 1e-6
        assert abs(acceptance - alpha) <= (2 * TOL + 1e-6 if method == "gr" else 1e-9)


@st.composite
def hard_instances(draw):
    """Instances where floating point is tested: exact ties, zeros, a draft equal to the target up
    to a relative 1e-12..1e-4, or two tokens of mass down to 1e-60 in both."""
    vocab = draw(st.integers(2, 5))
    kind = draw(st.sampled_from(["random", "ties", "zeros", "near-identical", "tiny"]))
    weights = st.lists(st.floats(0.0, 1.0), min_size=vocab, max_size=vocab)
    target, draft = np.array(draw(weights)), np.array(draw(weights))
    if kind == "ties":
        target, draft = np.round(3 * target), np.round(3 * draft)
    elif kind == "zeros":
        target[draw(st.integers(0, vocab - 1))] = 0.0
        draft[draw(st.integers(0, vocab - 1))] = 0.0
    elif kind == "near-identical":
        scale = 10.0 ** draw(st.floats(-12, -4))
        draft = target * (1 + scale * np.array(draw(st.lists(st.floats(-1, 1), min_size=vocab, max_size=vocab))))
    elif kind == "tiny":
        tiny = 10.0 ** np.array(draw(st.lists(st.floats(-60, -8), min_size=2, max_size=2)))
        target[:2], draft[:2] = tiny, tiny * draw(st.floats(0.5, 2.0))
    if target.sum() <= 0 or draft.sum() <= 0:
        target, draft = np.ones(vocab), np.ones(vocab)
    return target / target.sum(), draft / draft.sum(), draw(st.integers(1, 3))


@settings(max_examples=60, deadline=None)
@given(hard_instances(), st.sampled_from([1e-3, 1e-4, 1e-6]))
def test_gr_error_against_an_exact_solver_is_within_its_bound(instance, tol):
    """gr's law and acceptance, both by enumerating every tuple, differ from maxflow-cs's (exact) by
    at most ``plan.error_bound`` (seed 001 Lemma 6.6), and that bound is a number within 3 tol."""
    target, draft, n = instance
    with np.errstate(all="raise", under="ignore"):  # hypothesis draws masses down to 1e-308
        plan = ot.solve(target, draft, n, method="gr", tol=tol)
        acceptance, law = enumerated(plan, target, draft, n)
        exact_acceptance, exact_law = enumerated(ot.solve(target, draft, n, method="maxflow-cs"), target, draft, n)
    bound = plan.error_bound
    assert np.isfinite(bound) and bound <= 3 * tol + 1e-6
    assert np.abs(law - exact_law).sum() <= bound + 1e-9
    assert abs(acceptance - exact_acceptance) <= bound + 1e-9

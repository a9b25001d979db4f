"""Property tests (hypothesis) of the OT invariants on random tiny instances."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import ot

from .test_ot import _enumerated

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
        acceptance, law = _enumerated(plan, target, draft, n)  # asserts every conditional is a distribution
        error = np.abs(law - target).sum()
        assert error <= plan.error_bound + 1e-9 and plan.error_bound <= 3 * TOL + 1e-6
        assert abs(acceptance - alpha) <= (2 * TOL + 1e-6 if method == "gr" else 1e-9)

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

# the audit's instance: V = 4, two tokens of mass 1e-13 / 2e-13 and 6e-7 in both target and draft.
# H* is every token (alpha* = 1 to float precision, so no residual exists anywhere), and the set
# {2} has draft mass 4e-26, below maxflow-cs's 2^-52 capacity resolution: before the fix its
# conditional was 0/0 = NaN, gr (not converging here) fell back to it, and the ot verifier raised
# "categorical: all weights are zero"
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


def test_audit_instance_through_the_ot_verifier():
    verifier = get_verifier("ot", solver="gr")
    tokens = torch.tensor([[2], [2]])  # [K = 2, L = 1]: both drafts drew the 1e-13 token
    draft = torch.from_numpy(np.tile(AUDIT_DRAFT, (2, 1, 1)))  # [K, L, V]
    target = torch.from_numpy(np.tile(AUDIT_TARGET, (2, 2, 1)))  # [K, L + 1, V]
    for seed in range(4):
        result = verifier.verify(tokens, draft, target, torch.Generator().manual_seed(seed))
        assert len(result.tokens) >= 1


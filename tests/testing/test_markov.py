"""Known-law models: their enumerated laws are laws and agree with their conditionals."""

from __future__ import annotations

import numpy as np
import pytest

from draftverify.testing import MarkovModel, random_pair


def test_law_is_a_distribution_and_matches_the_chain_rule():
    pair = random_pair(vocab_size=3, order=2, seed=4)
    law = pair.target.law(4)
    assert law.shape == (3, 3, 3, 3) and law.sum() == pytest.approx(1, abs=1e-12)
    seq = (2, 0, 1, 1)
    rows = pair.target.conditionals([], seq)
    assert law[seq] == pytest.approx(np.prod([rows[i, seq[i]] for i in range(4)]), rel=1e-12)
    np.testing.assert_allclose(law.sum(axis=(2, 3)), pair.target.law(2), atol=1e-12)


def test_conditionals_follow_the_context_of_the_last_tokens():
    table = np.zeros((4, 2))
    table[:, 0] = [0.1, 0.2, 0.3, 0.4]
    table[:, 1] = 1 - table[:, 0]
    model = MarkovModel(table, order=2, start=(1, 0))
    assert model.conditional([])[0] == pytest.approx(0.3)  # context (1, 0) -> index 2
    assert model.conditional([1])[0] == pytest.approx(0.2)  # context (0, 1) -> index 1
    np.testing.assert_allclose(model.conditionals([1], [1, 0]), table[[1, 3, 2]])


def test_random_pair_has_zeros_and_moderate_overlap():
    pair = random_pair(vocab_size=4, order=2, seed=0)
    assert (pair.target.table == 0).any()
    overlap = np.minimum(pair.target.table, pair.draft.table).sum(-1)
    assert 0.3 < overlap.mean() < 0.95


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(table=np.ones((3, 2)) / 2, order=2), "shape"), (dict(table=np.ones((4, 2)), order=2), "probability"),
     (dict(table=np.ones((4, 2)) / 2, order=2, start=(0, 5)), "start")],
)
def test_bad_models_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MarkovModel(**kwargs)

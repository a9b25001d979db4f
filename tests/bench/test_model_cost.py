"""bench model-cost's timing loop on a tiny model: every call kind for every draft length, ratios
r(L + 1) and c from the medians, and a draft-less target."""

from __future__ import annotations

import pytest
import torch

from draftverify.bench.model_cost import call_costs, ratios
from draftverify.models.hf import TransformersModel
from draftverify.models.toy import tiny_causal_lm


@pytest.fixture(scope="module")
def target():
    return TransformersModel(tiny_causal_lm(40, arch="llama", width=32, layers=2, seed=1, dtype=torch.float32))


def test_call_costs_time_every_kind_and_ratios_divide_by_the_one_token_call(target):
    draft = TransformersModel(tiny_causal_lm(40, arch="gpt2", width=16, layers=1, seed=2, dtype=torch.float32))
    costs = call_costs({"a": (target, draft), "b": (target, None)}, list(range(10)), repeats=2,
                       draft_lengths=[1, 4], accepted=1)
    assert set(costs["a"]) == {"target_1", "target_2", "target_5", "draft_1", "draft_phase_1", "draft_phase_4"}
    assert set(costs["b"]) == {"target_1", "target_2", "target_5"}
    r = ratios(costs["a"])
    assert set(r) == {"r_2", "r_5", "draft_cost_c"}
    assert r["r_5"] == costs["a"]["target_5"] / costs["a"]["target_1"]
    assert r["draft_cost_c"] == costs["a"]["draft_1"] / costs["a"]["target_1"]
    assert "draft_cost_c" not in ratios(costs["b"])


def test_more_accepted_tokens_than_the_shortest_draft_is_an_error(target):
    with pytest.raises(ValueError, match="accepted"):
        call_costs({"a": (target, None)}, [1, 2], repeats=1, draft_lengths=[1, 4], accepted=2)

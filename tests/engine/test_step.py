"""engine/step: each step's phases timed from one clock, draft, target call and verification each
its own span."""

from __future__ import annotations

import pytest

from draftverify.engine import step as step_module
from draftverify.engine.generate import generate
from draftverify.testing import random_pair
from tests.factories import toy_models

TARGET, DRAFT = toy_models(random_pair(vocab_size=5))


class Ticking:
    """A clock that reads one second later at every read: each span between two reads is 1."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("method,seconds", [("sd", (1.0, 1.0, 1.0)), ("kseq(K=2)", (1.0, 1.0, 1.0)),
                                            ("ar", (0.0, 1.0, 0.0))])
def test_each_phase_of_a_step_is_timed_on_its_own(monkeypatch, method, seconds):
    monkeypatch.setattr(step_module, "time", Ticking())
    result = generate(TARGET, DRAFT, [1], method, draft_length=None if method == "ar" else 2, max_new_tokens=6,
                      seed=0, ignore_eos=True)
    assert len(result.steps) >= 2
    assert all((s.draft_seconds, s.target_seconds, s.verify_seconds) == seconds for s in result.steps), result.steps

"""conform: every probe fails its broken twin (the nine defect classes of issue 25 among them), our
exact verifiers pass every check, transformers' findings stay found, and whatever an implementation
does wrong (raise, hang, malformed output) is reported, never raised."""

from __future__ import annotations

import time

import pytest
import torch

from draftverify import get_verifier
from draftverify.testing import conform
from draftverify.testing.conform_probes import PROBES

from . import conform_twins as twins

# (twin, the check that must fail it): the nine defect classes of the issue first
SCRIPTED_TWINS = [
    (twins.LessOrEqualCoin, "uniform-zero"),  # sglang#35771
    (twins.NaNLeaksTokenZero, "nan-inf"),  # vllm#41834
    (twins.SeedWithoutEffect, "seeds"),  # vllm#13196
    (twins.AdvancedForEmptyRows, "zero-draft-rows"),  # vllm-ascend#13608
    (twins.GlobalRandom, "seeds"),
    (twins.FlooredRatio, "zero-target-draft"),
    (twins.UnnormalisedDraw, "uniform-top"),
    (twins.NoFallback, "empty-residual"),
    (twins.SmoothedResidual, "one-hot-target"),
    (twins.AbsoluteResidual, "disjoint-supports"),
    (twins.TargetOffsetWithoutRow, "ragged-batch"),
]
LAW_TWINS = [
    twins.TargetWarpedOnly,  # vllm#9834
    twins.BlockWithTokenCriterion,  # vllm-ascend#7807
    twins.UniformZero,  # vllm-ascend#13730
    twins.GreedyDraftAssumed,  # transformers#32867
    twins.DraftLawNotSampled,  # transformers#47932
]


def test_every_probe_has_a_twin_it_fails():
    # law: LAW_TWINS; depth-law: our gbv (test_depth_law_fails_gbv_and_passes_bv)
    assert {check for _, check in SCRIPTED_TWINS} | {"law", "depth-law"} == set(PROBES)
    assert len(PROBES) >= 10


def test_depth_law_fails_gbv_and_passes_bv():
    """gbv is exact only with a draft whose law depends on the prefix alone: the law check passes
    it, the depth-law check (a draft whose law depends on its depth in a call) fails it; bv through
    the same per-row contract passes it; a layout without state across calls is n/a."""
    gbv = conform("draftverify", method="gbv", checks=["law", "depth-law"], samples=4000).checks
    assert [c.status for c in gbv] == ["pass", "fail"], [c.detail for c in gbv]
    bv = conform(get_verifier("bv"), layout="contract", checks=["depth-law"], samples=4000).checks[0]
    assert bv.status == "pass", bv.detail
    assert conform(twins.FlatSD(), layout="flattened", checks=["depth-law"]).checks[0].status == "n/a"


@pytest.mark.parametrize("twin,check", SCRIPTED_TWINS, ids=lambda x: getattr(x, "__name__", x))
def test_probe_fails_its_twin_and_passes_the_plain_sd(twin, check):
    failed = conform(twin(), layout="flattened", checks=[check]).checks[0]
    assert failed.status == "fail" and failed.detail
    assert conform(twins.FlatSD(), layout="flattened", checks=[check]).checks[0].status == "pass"


def test_every_scripted_uniform_is_run():
    """one-hot-target scripts 0, 1/2 and the top uniform in turn: the unnormalised draw overruns its
    residual at the top one only."""
    found = conform(twins.UnnormalisedDraw(), layout="flattened", checks=["one-hot-target"]).checks[0]
    assert found.status == "fail" and found.detail.startswith("uniforms = 1 - 2^-m"), found.detail


@pytest.mark.parametrize("check", ["zero-draft-rows", "ragged-batch"])
def test_batch_probes_also_check_the_support(check):
    """Their random rows give tokens 0 and 5 target probability 0, as the scripted probes' rows do:
    |T - D| for the residual commits them, in a batch as alone."""
    found = conform(twins.AbsoluteResidual(), layout="flattened", checks=[check]).checks[0]
    assert found.status == "fail" and "target probability 0" in found.detail, found.detail


def test_a_law_check_without_the_power_to_judge_is_inconclusive_and_no_pass():
    """200 samples detect only a TV of about 0.5 where the check judges at 0.25: inconclusive whatever
    the p-value, and the report does not pass."""
    report = conform(twins.FlatSD(), layout="flattened", checks=["law"], samples=200)
    assert report.checks[0].status == "inconclusive" and "too few samples" in report.checks[0].detail
    assert not report.passed


def test_support_failures_carry_their_effect_on_the_law():
    found = conform(twins.LessOrEqualCoin(), layout="flattened", checks=["uniform-zero"]).checks[0]
    # drafted token 2 (draft probability 0.3) accepted at u = 0: the row's two float64 uniforms scripted
    assert "0.3 x 2^-106" in found.effect


@pytest.mark.slow
@pytest.mark.parametrize("twin", LAW_TWINS, ids=lambda t: t.__name__)
def test_law_check_fails_the_twins_no_probe_reaches(twin):
    law = conform(twin(), layout="flattened", checks=["law"], samples=2000).checks[0]
    assert law.status == "fail", law.detail


@pytest.mark.slow
@pytest.mark.parametrize("implementation,options", [
    ("draftverify", {}),
    ("draftverify", {"method": "bv"}),
    ("draftverify", {"method": "submaximal"}),
    ("draftverify", {"method": "multidraft-bv"}),
    (twins.FlatSD(), {"layout": "flattened"}),
])
def test_exact_verifiers_pass_every_check(implementation, options):
    report = conform(implementation, samples=800, **options)
    assert report.passed, report.table()
    applicable = {c.name for c in report.checks if c.status == "pass"}
    assert applicable >= set(PROBES) - {"zero-draft-rows", "ragged-batch", "depth-law"}


@pytest.mark.slow
def test_gbv_passes_every_check_but_depth_law():
    report = conform("draftverify", method="gbv", samples=800, checks=[c for c in PROBES if c != "depth-law"])
    assert report.passed, report.table()


def test_contract_layout_takes_any_object_with_verify():
    from draftverify import get_verifier

    report = conform(get_verifier("sd"), layout="contract", checks=["uniform-zero", "seeds", "zero-draft-rows"])
    assert {c.name: c.status for c in report.checks} == {"uniform-zero": "pass", "seeds": "pass", "zero-draft-rows": "n/a"}


def test_transformers_findings():
    pytest.importorskip("transformers")
    report = conform("transformers", checks=["uniform-zero", "empty-residual", "nan-inf", "seeds"])
    status = {c.name: c for c in report.checks}
    # r_i <= p_i / q_i with a float32 r_i of exactly 0 (probability 2^-24) accepts a zero-target draft
    assert status["uniform-zero"].status == "fail" and "2^-24" in status["uniform-zero"].effect
    # equal laws at different logit offsets: float32 softmax leaves (p - q)_+ = 0, then 0 / 0
    assert status["empty-residual"].status == "fail" and "RuntimeError" in status["empty-residual"].detail
    assert status["nan-inf"].status == "pass" and status["seeds"].status == "pass"
    assert not report.passed


class _Raises:
    def verify(self, *args, **kwargs):
        raise RuntimeError("boom")


def _wrong_shape(draft_token_ids, draft_probs, target_probs, cu, uniforms, max_draft_len):
    return torch.zeros(cu.shape[0], max_draft_len, dtype=torch.int64)


def _floats(draft_token_ids, draft_probs, target_probs, cu, uniforms, max_draft_len):
    return torch.zeros(cu.shape[0], max_draft_len + 1)


def _hangs(*args):
    time.sleep(30)


def _gap_after_pad(draft_token_ids, draft_probs, target_probs, cu, uniforms, max_draft_len):
    out = twins.FlatSD()(draft_token_ids, draft_probs, target_probs, cu, uniforms, max_draft_len)
    out[:, -1] = 1  # a token after the pad id
    return out


@pytest.mark.parametrize("implementation,layout,words", [
    (_Raises(), "contract", "raised RuntimeError: boom"),
    (_wrong_shape, "flattened", "returned shape"),
    (_floats, "flattened", "not an integer tensor"),
    (_hangs, "flattened", "did not return within the time limit of 0.2 s"),
    (_gap_after_pad, "flattened", "tokens after the pad id"),
])
def test_misbehaviour_is_reported_as_a_failed_check(implementation, layout, words):
    report = conform(implementation, layout=layout, checks=["uniform-top", "seeds"], time_limit=0.2)
    assert all(c.status == "fail" for c in report.checks) and not report.passed
    assert any(words in c.detail for c in report.checks), report.table()


def test_module_function_is_loaded_from_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "my_sampler.py").write_text("def verify(*args):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    report = conform("my_sampler:verify", layout="flattened", checks=["seeds"])
    assert report.checks[0].status == "fail" and "NoneType" in report.checks[0].detail


@pytest.mark.parametrize("arguments,words", [
    ({"implementation": "transformers", "layout": "flattened"}, "conflicts"),
    ({"implementation": "transformers", "method": "bv"}, "conflicts"),
    ({"implementation": "no_such_module_here:fn", "layout": "flattened"}, "cannot import"),
    ({"implementation": "draftverify.testing:nothing", "layout": "flattened"}, "no attribute"),
    ({"implementation": "draftverify.testing:conform", "layout": None}, "layout"),
    ({"implementation": "draftverify.testing:conform", "layout": "contract"}, "no verify"),
    ({"implementation": "draftverify", "checks": ["nope"]}, "unknown nope"),
    ({"implementation": "draftverify", "samples": 0}, "samples"),
])
def test_usage_errors_are_value_errors(arguments, words):
    with pytest.raises(ValueError, match=words):
        conform(**arguments)

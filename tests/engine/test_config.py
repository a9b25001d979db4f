"""engine/config: a frozen, validated decoding configuration that reads the method grammar."""

from __future__ import annotations

import pytest

from draftverify import get_verifier
from draftverify.engine import AR, DecodeConfig


def test_defaults_and_derived_values():
    config = DecodeConfig()
    assert (config.name, config.drafts, config.length, config.speculative) == ("sd", 1, 4, True)
    assert DecodeConfig(AR, draft_length=None).speculative is False
    assert DecodeConfig("bv", draft_length=7).length == 7


def test_the_method_grammar_sets_options_k_and_l():
    config = DecodeConfig("kseq(K=3,L=2)")
    assert (config.method, config.drafts, config.length, config.options) == ("kseq", 3, 2, {})
    config = DecodeConfig("ot(solver=lp)", num_drafts=2, options={"tol": 1e-3})
    assert config.method == "ot" and config.options == {"solver": "lp", "tol": 1e-3}
    assert config.verifier() == get_verifier("ot", solver="lp", tol=1e-3, validate=False)
    # the engine's distributions hold the contract by construction: no per-step value checks
    assert DecodeConfig("sd").verifier().validate is False
    assert DecodeConfig("sd(validate=true)").verifier().validate is True


def test_options_given_twice_are_not_mutated():
    options = {"fraction": 0.25}
    DecodeConfig("submaximal", options=options)
    assert options == {"fraction": 0.25}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(method="kseq(K=3)", num_drafts=2), "sets num_drafts = 3 but num_drafts = 2"),
        (dict(method="ot(solver=lp)", options={"solver": "gr"}), "disagree on solver"),
        (dict(method="sd@ngram"), "not named with @"),
        (dict(method="nope"), "unknown verifier"),
        (dict(method="sd", options={"lam": 1}), "does not take"),
        (dict(method="sd", num_drafts=2), "takes one draft"),
        (dict(method="kseq", num_drafts=0), "num_drafts must be >= 1"),
        (dict(method="sd", draft_length=0), "draft_length must be >= 1"),
        (dict(method=AR, draft_length=3), "takes no drafts"),
        (dict(method=AR, options={"x": 1}), "takes no drafts or verifier options"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(stop=("",)), "stop strings"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=2.0), "top_p"),
        (dict(method=get_verifier("sd"), options={"validate": False}), "not with a Verifier instance"),
    ],
)
def test_bad_configurations_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**kwargs)


def test_frozen():
    with pytest.raises(AttributeError):
        DecodeConfig().seed = 3

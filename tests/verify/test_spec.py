"""The method grammar: one parser for every command and the Python API, typed by the verifier's fields."""

from __future__ import annotations

import pytest

from draftverify import get_verifier
from draftverify.verify import MethodSpec, parse_method, typed_options


def test_names_options_settings_and_draft():
    assert parse_method("bv") == MethodSpec("bv")
    assert parse_method("kseq(K=4)@ngram") == MethodSpec("kseq", {}, num_drafts=4, draft="ngram")
    spec = parse_method(" ot( solver=gr , tol=1e-4 ) ")
    assert spec.options == {"solver": "gr", "tol": 1e-4} and isinstance(spec.options["tol"], float)
    assert parse_method("sd(L=3)").draft_length == 3
    assert parse_method("ar") == MethodSpec("ar")  # not a verifier: whoever runs it decides


def test_values_are_typed_by_the_dataclass_fields():
    assert parse_method("sd(validate=false)").options == {"validate": False}  # not the truthy string "false"
    assert parse_method("sd(validate=True)").options == {"validate": True}
    assert parse_method("submaximal(fraction=1)").options == {"fraction": 1.0}
    assert typed_options("multidraft-bv", [("selection", "ot"), ("solver", "lp")]) == {"selection": "ot", "solver": "lp"}


@pytest.mark.parametrize(
    "text,message",
    [
        ("ot(tol=abc)", "option tol expects a float, got 'abc'"),
        ("sd(validate=maybe)", "option validate expects a bool"),
        ("kseq(K=two)", "option K expects an int"),
        ("kseq(K=0)", "num_drafts must be >= 1"),
        ("sd(lam=0.5)", "does not take option lam; it takes validate"),
        ("nope(x=1)", "unknown verifier 'nope'"),
        ("ot(solver)", "key=value"),
        ("kseq:4@ngram", "expected name"),
        ("ot:solver=gr", "expected name"),
        ("ot(solver=lp,solver=gr)", "option solver is given twice"),
        ("kseq(K=2,K=2)", "option K is given twice"),
    ],
)
def test_errors_name_the_option_and_its_type(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_method(text)


def test_written_back_in_the_grammar():
    for text in ("bv", "kseq(K=4)@ngram", "ot(solver=gr,tol=0.0001)", "sd(validate=false)"):
        assert str(parse_method(text)) == text


def test_get_verifier_reads_the_grammar():
    verifier = get_verifier("ot(solver=lp,tol=0.001)")
    assert (verifier.name, verifier.solver, verifier.tol) == ("ot", "lp", 0.001)
    assert get_verifier("sd(validate=false)").validate is False
    with pytest.raises(ValueError, match="decoding settings"):
        get_verifier("kseq(K=2)")
    with pytest.raises(ValueError, match="decoding settings"):
        get_verifier("sd@ngram")
    with pytest.raises(ValueError, match="disagree on solver"):
        get_verifier("ot(solver=lp)", solver="gr")
    assert get_verifier("ot(solver=lp)", solver="lp").solver == "lp"

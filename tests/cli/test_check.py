"""`draftverify check`: its exit code says passed (0), failed (1) or inconclusive (3), and a
test it cannot judge is never reported as passed."""

from __future__ import annotations

import json

import pytest

from draftverify.cli import main
from draftverify.cli.check import EXIT_CODES


def test_a_check_without_degrees_of_freedom_is_inconclusive(capsys):
    # 20^4 outcomes and 500 samples: every expected count is below 5, so there is no test at all
    assert main(["check", "sd", "--vocab", "20", "--tokens", "4", "--samples", "500"]) == EXIT_CODES["inconclusive"] == 3
    out = capsys.readouterr().out
    assert "result           inconclusive" in out and "no degree of freedom" in out


def test_a_check_too_weak_for_detect_tv_is_inconclusive_and_says_so_in_json(capsys):
    assert main(["check", "sd", "--tokens", "2", "--samples", "200", "--json", "-"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "inconclusive" and report["detectable_tv"] > report["detect_tv"] == 0.1


def test_an_exact_verifier_passes_and_an_inexact_one_fails(capsys):
    assert main(["check", "sd", "--tokens", "2", "--samples", "2000"]) == EXIT_CODES["passed"] == 0
    assert "result           passed" in capsys.readouterr().out
    # SpecTr-GBV as published is not exact for K >= 2 (docs/spectr-gbv.md)
    assert main(["check", "spectr-gbv", "--num-drafts", "2", "--tokens", "2", "--samples", "2000"]) == EXIT_CODES["failed"] == 1
    assert "result           failed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["submaximal(fraction=0.5)", "--fraction", "0.3"], "sets fraction=0.5 but --fraction sets fraction=0.3"),
        (["submaximal", "--fraction", "0.3", "--option", "fraction=0.4"], "--option sets fraction=0.4"),
        (["kseq(K=3)", "--num-drafts", "2"], "sets K=3 but --num-drafts 2"),
        (["bv(L=3)", "--draft-length", "2"], "sets L=3 but --draft-length 2"),
        (["sd@ngram"], "names a draft model (@ngram)"),
    ],
)
def test_conflicting_settings_are_an_error_naming_both(capsys, argv, message):
    assert main(["check", *argv, "--samples", "5"]) == 2
    assert message in capsys.readouterr().err


def test_settings_given_twice_alike_are_fine(capsys):
    assert main(["check", "submaximal(fraction=0.5)", "--fraction", "0.5", "--samples", "5", "--tokens", "1"]) == 3


def test_a_nan_p_value_is_null_in_json(capsys):
    assert main(["check", "sd", "--vocab", "20", "--tokens", "4", "--samples", "50", "--json", "-"]) == 3
    assert json.loads(capsys.readouterr().out)["p_value"] is None


def test_gbv_fails_with_a_depth_dependent_draft_where_bv_passes(capsys):
    # gbv's target modification assumes a draft whose law depends on the prefix alone (tests/verify/test_exactness.py)
    common = ["--depth-dependent-draft", "--tokens", "3", "--samples", "3000", "--draft-length", "3"]
    assert main(["check", "gbv", *common]) == EXIT_CODES["failed"]
    assert main(["check", "bv", *common]) == EXIT_CODES["passed"]
    assert main(["check", "gbv", *common[1:]]) == EXIT_CODES["passed"]

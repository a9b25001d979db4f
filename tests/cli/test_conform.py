"""`draftverify conform`: exit 0 when every check passes, 1 when one fails, 2 on a usage error."""

from __future__ import annotations

import json

import pytest

from draftverify.cli import main


def test_our_verifier_passes(capsys):
    assert main(["conform", "draftverify", "--samples", "800"]) == 0
    out = capsys.readouterr().out
    assert "conform draftverify sd (layout: flattened;" in out and "): PASS" in out
    assert "| uniform-zero | pass |" in out and "what each check proves" in out


def test_a_module_function_from_the_current_folder_that_fails_exits_1(capsys, tmp_path, monkeypatch):
    (tmp_path / "engine_sampler.py").write_text(
        "from tests.testing.conform_twins import LessOrEqualCoin\nrejection_sample = LessOrEqualCoin()\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["conform", "engine_sampler:rejection_sample", "--layout", "flattened", "--samples", "300", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    checks = {check["name"]: check for check in report["checks"]}
    assert report["passed"] is False and checks["uniform-zero"]["status"] == "fail"
    assert "2^-" in checks["uniform-zero"]["effect"]


@pytest.mark.parametrize("argv,words", [
    (["conform", "transformers", "--layout", "flattened"], "conflicts"),
    (["conform", "engine_sampler:fn"], "layout"),
    (["conform", "no_such_module_here:fn", "--layout", "contract"], "cannot import"),
    (["conform", "draftverify", "--time-limit", "0"], "--time-limit"),
])
def test_usage_errors_exit_2_with_one_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftverify conform: error:") and words in err and err.count("\n") == 1

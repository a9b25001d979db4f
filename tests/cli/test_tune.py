"""`draftverify tune`: the recommendation in words (the report itself: tests/bench/test_tune.py)."""

from __future__ import annotations

from draftverify.cli import main
from draftverify.models.pair import ASSETS
from tests.bench.test_tune import slow_drafts


def test_ar_is_recommended_in_words_where_no_drafting_setting_beats_it(monkeypatch, capsys):
    slow_drafts(monkeypatch)  # every drafting setting at a tenth of its predicted speed
    code = main(["tune", "--target", "tiny", "--draft", str(ASSETS / "draft"), "--num-prompts", "2", "--max-new-tokens",
                 "4", "--methods", "sd", "--max-draft-length", "2", "--repeats", "1", "--quantize", "int8"])
    out = capsys.readouterr().out
    assert code == 0 and "recommended: ar," in out and "--draft-length auto" in out

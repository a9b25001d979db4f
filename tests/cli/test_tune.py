"""`draftverify tune`: the recommendation in words (the report itself: tests/bench/test_tune.py)."""

from __future__ import annotations

from draftverify.bench import tune as tune_module
from draftverify.cli import main
from draftverify.models.pair import ASSETS


def test_ar_is_recommended_in_words_where_no_drafting_setting_beats_it(monkeypatch, capsys):
    real = tune_module.predict

    def slow_drafts(paths, costs, settings):  # every drafting setting at a tenth of its predicted speed
        return [r if r["method"] == "ar" else dict(r, tokens_per_second=r["tokens_per_second"] / 10)
                for r in real(paths, costs, settings)]

    monkeypatch.setattr(tune_module, "predict", slow_drafts)
    code = main(["tune", "--target", "tiny", "--draft", str(ASSETS / "draft"), "--num-prompts", "2", "--max-new-tokens",
                 "4", "--methods", "sd", "--max-draft-length", "2", "--repeats", "1", "--quantize", "int8"])
    out = capsys.readouterr().out
    assert code == 0 and "recommended: ar," in out and "--draft-length auto" in out

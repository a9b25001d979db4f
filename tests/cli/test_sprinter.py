"""`draftverify sprinter train` and `report` end to end on a tiny random pair (smoke sizes)."""

from __future__ import annotations

import json

import pytest
import torch

from draftverify import get_verifier
from draftverify.approx import LinearClassifier
from draftverify.models.hidden import draft_fingerprint
from draftverify.models.hf import TransformersModel
from draftverify.cli import main
from draftverify.models.toy import char_tokenizer
from tests.factories import save_pair, tiny_lms


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    tokenizer = char_tokenizer("abcdefghijklmnopqrstuvwxyz .,:()=+\n\"'_0123456789[]<>-*/#")
    vocab = len(tokenizer)
    target, draft = tiny_lms(vocab, seeds=(1, 2), dtype=torch.float32, max_positions=4096)
    with torch.no_grad():  # peaked distributions, so D / T spreads on both sides of lambda
        target.transformer.wte.weight.mul_(40)
        draft.transformer.wte.weight.mul_(40)
    return save_pair(root, target, draft, tokenizer)


def test_train_then_report(tiny_pair, tmp_path, capsys):
    pair = ["--target", str(tiny_pair / "target"), "--draft", str(tiny_pair / "draft")]
    out = tmp_path / "sprinter"
    code = main(["sprinter", "train", *pair, "--output", str(out), "--sequences-per-kind", "4", "--prefix-length", "8",
                 "--positions", "6", "--files", "3", "--figure", str(tmp_path / "img" / "roc.png")])
    assert code == 0
    roc = json.loads((out / "roc.json").read_text())
    assert roc["samples"] == 4 * 4 * 6 and set(roc["kinds"].values()) == {24}
    assert {(r["ratio_threshold"], r["features"]) for r in roc["results"]} >= {(1.0, "hidden"), (1.5, "logprob+entropy")}
    assert all(0 <= r["auc"] <= 1 for r in roc["results"])
    classifier = LinearClassifier.load(out / "classifier.json")
    assert classifier.ratio_threshold == 1.2 and classifier.hidden_size == 16
    assert sorted(classifier.info["yes_share_thresholds"]) == ["0.1", "0.3", "0.5", "0.7", "0.9"]
    assert classifier.info["draft_fingerprint"] == draft_fingerprint(TransformersModel.from_pretrained(tiny_pair / "draft"))
    assert (out / "lambda_1.5.json").exists() and (tmp_path / "img" / "roc.png").stat().st_size > 0
    # the folder train writes is what --option classifier=DIR and get_verifier take
    assert get_verifier(f"sprinter(classifier={out})").classifier.info == classifier.info
    assert main(["generate", "ab", *pair, "--method", "sprinter", "--option", f"classifier={out}",
                 "--max-new-tokens", "3"]) == 0
    capsys.readouterr()

    code = main(["sprinter", "report", *pair, "--classifier", str(out / "classifier.json"), "--num-prompts", "2",
                 "--max-new-tokens", "5", "--results-dir", str(tmp_path / "results"),
                 "--img-dir", str(tmp_path / "img")])
    assert code == 0
    assert "prompt 2/2 done" in capsys.readouterr().out  # no bar off a terminal: the per-prompt lines print
    result = json.loads((tmp_path / "results" / "sprinter.json").read_text())
    rows = {r["method"]: r for r in result["rows"]}
    assert len(result["settings"]["thresholds"]) == 7  # 0, five yes-share thresholds, 1
    command = (tmp_path / "results" / "sprinter.md").read_text().split("Command: `")[1].split("`")[0]
    assert "--thresholds" not in command and "--num-prompts 2" in command  # what was set, no empty option
    assert rows["sd"]["speedup_vs_sd"] == pytest.approx(1.0)
    assert all(0 <= r["rouge_l_vs_canonical"] <= 1 for r in result["rows"])
    assert rows["sprinter tau=1"]["audit_yes_share"] == 0.0 and rows["sprinter tau=1"]["audit_tv_theory"] == 0.0
    assert rows["sprinter tau=0"]["audit_yes_share"] == 1.0
    assert rows["sprinter tau=1"]["target_calls_per_token"] == 1.0  # every token checked by the target
    text = (tmp_path / "results" / "sprinter.md").read_text()
    assert "draftverify sprinter report" in text and "Theory against measurement" in text
    assert (tmp_path / "img" / "sprinter_speed_deviation.png").exists() and (tmp_path / "img" / "sprinter_theory.png").exists()


def test_bad_arguments(tiny_pair, capsys):
    assert main(["sprinter", "train", "--target", str(tiny_pair / "target"), "--draft", str(tiny_pair / "draft"),
                 "--default-lambda", "2"]) == 2
    assert "--default-lambda must be one of" in capsys.readouterr().err  # the flag, not the code name
    assert main(["sprinter", "report", "--target", str(tiny_pair / "target"), "--draft", str(tiny_pair / "draft"),
                 "--thresholds", "1.5"]) == 2

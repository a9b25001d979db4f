"""`draftverify train-pair --quick`: the whole pipeline on a tiny slice, in seconds."""

from __future__ import annotations

import json

import pytest
import torch

from draftverify.cli import main


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("train-pair")
    assert main(["train-pair", "--quick", "--workdir", str(workdir)]) == 0
    return workdir


def test_outputs_load_with_transformers_and_ngram(quick_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from draftverify.models.ngram import NGramDrafter

    pair = quick_run / "pair"
    tokenizer = AutoTokenizer.from_pretrained(str(pair / "tokenizer"))
    assert tokenizer.eos_token == "<|endoftext|>" and len(tokenizer) == 300
    text = "def f(x):\n    return x  # \u00e9\n"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    target = AutoModelForCausalLM.from_pretrained(str(pair / "target"))
    draft = AutoModelForCausalLM.from_pretrained(str(pair / "draft"))
    assert target.dtype == torch.float32 and draft.dtype == torch.float32
    assert target.config.vocab_size == draft.config.vocab_size == 300
    ngram = NGramDrafter.load(pair / "ngram")
    assert (ngram.vocab_size, ngram.order) == (300, 3)
    metrics = json.loads((pair / "metrics.json").read_text())
    assert metrics["train"]["steps"] == 3
    for name in ("draft_kd", "draft_ce", "ngram"):
        assert 0.0 < metrics["acceptance"][name]["mean"] <= 1.0
    card = (pair / "MODEL_CARD.md").read_text()
    assert "train-pair" in card and "acceptance" in card


def test_generate_runs_on_the_output_with_its_tokenizer(quick_run, capsys):
    pair = quick_run / "pair"
    assert main(["generate", "def f(x):", "--target", str(pair / "target"), "--draft", str(pair / "draft"),
                 "--tokenizer", str(pair / "tokenizer"), "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("def f(x):")


def test_the_default_output_is_a_folder_of_the_current_directory_not_the_package():
    from draftverify.cli.train_pair import OUTPUT

    assert not OUTPUT.is_absolute() and "assets" not in OUTPUT.parts


def test_rerun_resumes_without_retraining(quick_run, capsys):
    before = (quick_run / "final" / "target" / "model.safetensors").stat().st_mtime_ns
    assert main(["train-pair", "--quick", "--workdir", str(quick_run)]) == 0
    out = capsys.readouterr().out
    assert "phase 1: tokenizer and token streams exist, skipped" in out
    assert "phase 2: trained models exist, skipped" in out
    assert (quick_run / "final" / "target" / "model.safetensors").stat().st_mtime_ns == before

"""A tiny decode sweep on known-law toy models: records, resume, determinism, greedy check,
report and plots; the deviation probe against a deliberately inexact verifier; prompt sets."""

import io
import json

import pytest
import torch

from draftverify.bench.decode import build_outputs
from draftverify.bench.probes import first_token_deviation
from draftverify.bench.prompts import MIXED, load_prompts
from draftverify.bench.summary import summarize
from draftverify.bench.sweep import RunConfig, Sweep, read_method, run_sweep
from draftverify.testing import random_pair
from tests.factories import tiny_feature_pair, toy_models
from tests.verify.broken_twins import AcceptAll

PROMPTS = [[1], [2, 3]]
TOKENS = 10


@pytest.fixture(scope="module")
def models():
    pair = random_pair(vocab_size=4, order=2, seed=3)
    target, draft = toy_models(pair)
    return target, {"draft": draft}


def _sweep(models, tmp_path, **kwargs):
    target, drafts = models
    sweep = Sweep(methods=("ar", "sd", "kseq"), num_drafts=(1, 2), draft_lengths=(2,), temperatures=(0.0, 1.0), seeds=(0,))
    log = io.StringIO()
    result = run_sweep(sweep, target, drafts, PROMPTS, max_new_tokens=TOKENS, ignore_eos=True, cache_dir=tmp_path / "cache",
                       context={"test": 1}, decode=lambda ids: " ".join(f"t{i}" for i in ids), out=log, **kwargs)
    assert result.failures == {}
    return sweep, result.records, log.getvalue()


def test_tiny_sweep_records_and_metric_definitions(models, tmp_path):
    sweep, records, log = _sweep(models, tmp_path)
    # per temperature: ar, sd K=1, kseq K=1, kseq K=2 (sd is single-draft: no K=2), on 2 units
    assert len(sweep.configs()) == 8 and len(records) == 16
    assert "16/16" in log
    for r in records:
        assert len(r["tokens"]) == sum(r["counts"]) == TOKENS
        if r["method"] != "ar":
            assert r["target_calls"] == len(r["accepted"]) and all(0 <= a <= 2 for a in r["accepted"])
    rows = summarize(records, {"sd": True, "kseq": True})
    for row in rows:
        runs = [r for r in records if r["key"] == row["key"]]
        assert row["block_efficiency"]["value"] == pytest.approx(2 * TOKENS / sum(r["target_calls"] for r in runs))
        if row["method"] == "ar":
            continue
        steps = [a for r in runs for a in r["accepted"]]
        tests = sum(a + 1 if a < 2 else 2 for a in steps)  # a rejected test ends the step
        assert row["acceptance"]["value"] == pytest.approx(sum(steps) / tests)
        if row["temperature"] == 0:  # exact methods decode greedily: ar's tokens exactly
            assert row["greedy_equal"] == 2


def test_sweep_resumes_from_its_cache_and_is_deterministic(models, tmp_path):
    _, first, _ = _sweep(models, tmp_path)
    _, again, log = _sweep(models, tmp_path)
    assert log == "" and again == first  # nothing recomputed
    _, fresh, _ = _sweep(models, tmp_path, resume=False)
    assert [r["tokens"] for r in fresh] == [r["tokens"] for r in first]
    assert [r["accepted"] for r in fresh] == [r["accepted"] for r in first]


def test_a_failing_method_is_reported_and_the_sweep_goes_on(models, tmp_path, monkeypatch):
    from draftverify.bench import sweep as sweep_module

    measure = sweep_module.measure

    def broken_kseq(config, *args, **kwargs):
        if config.method == "kseq" and config.num_drafts == 2:
            raise ValueError("rows must sum to 1")
        return measure(config, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "measure", broken_kseq)
    target, drafts = models
    result = run_sweep(Sweep(methods=("ar", "sd", "kseq"), num_drafts=(1, 2), draft_lengths=(2,)), target, drafts, PROMPTS,
                       max_new_tokens=4, ignore_eos=True, cache_dir=tmp_path, context={}, out=io.StringIO())
    assert result.failures == {"kseq@draft K=2 L=2 T=1": "ValueError: rows must sum to 1"}
    assert sorted({r["label"] for r in result.records}) == ["ar T=1", "kseq@draft K=1 L=2 T=1", "sd@draft K=1 L=2 T=1"]


def test_report_and_plots(models, tmp_path):
    _, records, _ = _sweep(models, tmp_path)
    rows = summarize(records, {"sd": True, "kseq": True})
    report, plots = build_outputs(rows, {"command": "draftverify bench decode ...", "settings": {"x": 1}}, tmp_path, tmp_path, "t", {})
    names = sorted(p.name for p in plots)
    assert names == ["t_acceptance_vs_k.png", "t_vs_temperature.png"]  # one L: no plot along L
    assert "## Greedy equality at temperature 0" in report and "| kseq@draft K=2 L=2 T=0 | yes | 2 / 2 |" in report
    assert "![t_vs_temperature](t_vs_temperature.png)" in report


def test_first_token_deviation_detects_an_inexact_verifier(models):
    target, drafts = models
    settings = dict(num_drafts=1, draft_length=2, temperature=1.0)
    exact = first_token_deviation(target, drafts["draft"], [1], samples=1000, seed=0, method="sd", **settings)
    broken = first_token_deviation(target, drafts["draft"], [1], samples=1000, seed=0, method=AcceptAll(), **settings)
    assert exact["tv"] < 3 * exact["noise"]
    # accept-all emits the draft's first token: TV(target, draft) at the prompt, far above the floor
    gap = 0.5 * abs(target.model.conditional((1,)) - drafts["draft"].model.conditional((1,))).sum()
    assert broken["tv"] == pytest.approx(gap, abs=3 * broken["noise"]) and broken["tv"] > 10 * broken["noise"]
    assert exact["p_value"] > 0.01 and broken["p_value"] == pytest.approx(1 / 401)  # no exact set reaches the broken TV


def test_method_specs_and_grid_errors():
    assert read_method("ot(solver=lp,tol=0.001)") == ("ot", (("solver", "lp"), ("tol", 0.001)))
    with pytest.raises(ValueError, match="unknown verifier"):
        read_method("nope")
    with pytest.raises(ValueError, match="does not take"):
        read_method("sd(fraction=0.5)")
    with pytest.raises(ValueError, match="grid"):
        read_method("kseq(K=2)")
    assert RunConfig("ot", (("solver", "lp"),), 2, 4, 1.0, None, "draft").label == "ot(solver=lp)@draft K=2 L=4 T=1"
    labels = [c.label for c in Sweep(methods=("ar", "sd", "kseq"), num_drafts=(3,)).configs()]
    assert labels == ["ar T=1", "sd@draft K=1 L=4 T=1", "kseq@draft K=3 L=4 T=1"]  # single-draft: K = 1 only
    assert RunConfig("kseq", (), 3, 4, 0.4, None, "draft").label == "kseq@draft K=3 L=4 T=0.4"
    labels = [c.label for c in Sweep(methods=("sd", "greedy"), temperatures=(0.0, 1.0)).configs()]
    assert labels == ["ar T=0", "sd@draft K=1 L=4 T=0", "greedy@draft K=1 L=4 T=0", "ar T=1", "sd@draft K=1 L=4 T=1"]
    with pytest.raises(ValueError, match="greedy verifies temperature-0 decoding only"):
        Sweep(methods=("ar", "greedy"), temperatures=(1.0,))


def test_prompt_sets(tmp_path):
    assert load_prompts("mixed", limit=3) == list(MIXED[:3])
    assert load_prompts("humaneval", limit=1)[0].startswith("from typing import List")
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"text": "a"}) + "\n\n" + json.dumps({"text": "b", "other": 1}) + "\n")
    assert load_prompts(str(path)) == ["a", "b"]
    with pytest.raises(ValueError, match="no field 'prompt'"):
        load_prompts(str(path), field="prompt")
    with pytest.raises(FileNotFoundError):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_cli_tiny_run_writes_every_output(tmp_path, capsys):
    from draftverify.cli import main

    out = tmp_path / "out"
    argv = ["bench", "decode", "--tiny", "--num-prompts", "1", "--methods", "ar", "sd", "--draft-lengths", "2",
            "--temperatures", "1", "--seeds", "0", "--max-new-tokens", "6", "--deviation-samples", "0", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in summary["rows"]] == ["ar T=1", "sd@draft K=1 L=2 T=1"]
    assert summary["command"].startswith("draftverify bench decode --prompts mixed")
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    assert "sd@draft K=1 L=2 T=1" in printed and (out / "report.md").exists()
    # one description of the machine: the report's settings name the CPU that emit_json names
    assert summary["settings"]["machine"].startswith(summary["machine"]["cpu"] + ", torch ")
    assert f"machine = {summary['machine']['cpu']}, torch" in (out / "report.md").read_text()
    assert main(argv[:-2] + ["--methods", "nope", "--out", str(out)]) == 2  # bad input: one line, exit 2


def test_a_method_exact_only_for_a_prefix_draft_is_refused_with_a_feature_draft(tmp_path):
    target, draft = tiny_feature_pair(4, torch.arange(4))
    sweep = Sweep(methods=("ar", "bv", "gbv"), num_drafts=(1,), draft_lengths=(2,), temperatures=(1.0,), seeds=(0,))
    with pytest.raises(ValueError, match="methods: gbv@draft"):
        run_sweep(sweep, target, {"draft": draft}, PROMPTS, max_new_tokens=TOKENS, ignore_eos=True,
                  cache_dir=tmp_path / "cache", context={"test": 1})
    assert not (tmp_path / "cache").exists()

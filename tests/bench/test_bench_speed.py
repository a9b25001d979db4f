"""`draftverify bench speed` and `bench.compare` run end to end (smoke runs on tiny models; the
numbers are a benchmark's business, not a test's)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
import torch

from draftverify.cli import main
from draftverify.bench.compare import compare
from draftverify.models.toy import char_tokenizer
from tests.factories import tiny_pair


def test_bench_speed_prints_json_and_table(capsys, tmp_path):
    out_file = tmp_path / "speed.json"
    code = main(["bench", "speed", "--tiny", "--num-prompts", "1", "--max-new-tokens", "6", "--draft-length", "2", "--multi", "2",
                 "--batch", "2", "--json", str(out_file)])
    out = capsys.readouterr().out
    report = json.loads(out_file.read_text())
    assert code == 0 and "vs ar" in out and "goal 2.0" in out
    # the memory speed the run met, measured before and after its timed runs (bytes read and written by a copy)
    assert report["copy_gb_s"]["before"] > 0 and report["copy_gb_s"]["after"] > 0 and "copy bandwidth before" in out
    rows = {r["method"]: r for r in report["methods"]}
    assert {"ar", "sd", "bv", "hf-assisted", "hf-generate"} <= set(rows)
    assert all(r["tokens"] == 6 for r in rows.values())  # EOS ignored by every method
    assert rows["ar"]["vs_ar"] == 1.0 and rows["sd"]["cost_ratio"] > 0
    sd = rows["sd"]
    # seed 002's speedup with the measured costs: k(a, L) / (L c + r)
    k = (1 - sd["acceptance"] ** 3) / (1 - sd["acceptance"]) if sd["acceptance"] < 1 else 3.0
    assert sd["predicted_vs_ar"] == pytest.approx(k / (2 * sd["cost_ratio"] + sd["target_call_ratio"]))
    # efficiency: time in model calls over wall time; the step split adds up to the wall time
    assert 0 < sd["engine_efficiency"] <= 1
    split = sd["step_ms"]
    assert split["draft"] + split["target"] + split["verify"] + split["other"] == pytest.approx(split["total"])
    assert rows["ar"]["step_ms"]["draft"] == 0 and rows["ar"]["target_call_ratio"] == 1.0
    assert rows["hf-generate"]["step_ms"] is None and rows["hf-generate"]["predicted_vs_ar"] is None
    assert rows["ar"]["decode_vs_ar"] == 1.0 and rows["sd"]["decode_tokens_per_second"] > 0
    assert report["goals"]["ar_vs_generate"] == rows["ar"]["tokens_per_second"] / rows["hf-generate"]["tokens_per_second"]
    batch = {r["method"]: r for r in report["batch"]}
    assert set(batch) == {"ar", "sd"} and batch["sd"]["prompts"] == 2
    assert report["goals"]["sd_batch_vs_single"] == batch["sd"]["batch_vs_single"] > 0
    assert report["goals"]["ar_batch_vs_single"] == batch["ar"]["batch_vs_single"] > 0
    assert report["goals"]["ar_decode_batch_vs_single"] == batch["ar"]["decode_batch_vs_single"] > 0
    # the best method is a timing, so which one wins is the machine's business: check the choice
    ours = {m: r for m, r in rows.items() if m not in ("ar", "hf-assisted", "hf-generate")}
    best = report["goals"]["best_exact_method"]
    assert best in ours and ours[best]["tokens_per_second"] == max(r["tokens_per_second"] for r in ours.values())
    assert report["goals"]["best_exact_vs_ar"] == ours[best]["vs_ar"]


def test_bench_speed_with_the_draft_length_auto(capsys, tmp_path):
    out_file = tmp_path / "speed.json"
    code = main(["bench", "speed", "--tiny", "--num-prompts", "1", "--max-new-tokens", "12", "--draft-length", "auto",
                 "--multi", "0", "--batch", "0", "--json", str(out_file)])
    report = json.loads(out_file.read_text())
    rows = {r["method"]: r for r in report["methods"]}
    assert code == 0 and report["settings"]["draft_length"] == "auto" and all(r["tokens"] == 12 for r in rows.values())
    assert 0 <= rows["sd"]["acceptance"] <= 1 and rows["sd"]["predicted_vs_ar"] is None  # the prediction takes one L
    assert rows["hf-assisted"]["acceptance"] is None and rows["hf-assisted"]["tokens_per_target_call"] >= 1
    capsys.readouterr()
    assert main(["bench", "speed", "--tiny", "--draft-length", "sometimes"]) == 2
    assert "expected an int >= 1 or auto" in capsys.readouterr().err


def test_compare_prints_completion_and_table():
    tokenizer = char_tokenizer()
    target, draft = tiny_pair(len(tokenizer), dtype=torch.float32, tokenizer=tokenizer)
    out = io.StringIO()
    rows = compare("def f(x):", target=target, drafts={"draft": draft}, tokenizer=tokenizer,
                   specs=("ar", "sd", "bv"), max_new_tokens=8, out=out)
    assert [r["method"] for r in rows] == ["ar", "sd", "bv"] and rows[0]["speedup"] == 1.0
    text = out.getvalue()
    assert text.startswith("def f(x):\n") and "tokens/target call" in text
    for spec in ("ar", "sd", "bv"):  # one completion per method, each on its own lines
        assert f"\n# --- {spec} ---\n" in text


class _FakeLlama:
    """What bench.llama_cpp reads of llama_cpp.Llama: reset, set_seed and an endless token generator."""

    made: list[dict] = []

    def __init__(self, **options):
        self.options, self.resets = options, 0
        _FakeLlama.made.append(options)

    def reset(self):
        self.resets += 1

    def set_seed(self, seed):
        self.seed = seed

    def generate(self, tokens, **sampling):
        assert self.resets and sampling["top_k"] == 0 and sampling["min_p"] == 0.0 and sampling["top_p"] == 1.0
        while True:
            yield 7


def test_llama_cpp_rows_when_the_package_is_there(monkeypatch, tmp_path):
    import sys
    import types

    from draftverify.bench import speed

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=_FakeLlama))
    monkeypatch.setattr(speed, "llama_cpp_available", lambda: True)
    settings = speed.SpeedSettings(num_prompts=2, max_new_tokens=5, draft_length=2, multi=0, batch=0, tiny=True)
    anchor, note = speed._llama_cpp(settings, [[1, 2, 3]])
    assert anchor is None and "no GGUF" in note  # the tiny models have no GGUF file
    gguf = tmp_path / "model.gguf"
    anchor, note = speed._llama_cpp(speed.SpeedSettings(target=str(gguf), max_new_tokens=5), [[1, 2, 3], [4]])
    assert note == "ran on model.gguf" and _FakeLlama.made[-1]["n_ctx"] == 3 + 5 + 1
    assert _FakeLlama.made[-1]["n_threads"] == _FakeLlama.made[-1]["n_threads_batch"] == torch.get_num_threads()
    run = anchor.decode([1, 2, 3], max_new_tokens=5, temperature=0.0, seed=3)
    assert run["tokens"] == 5 and run["seconds"] > 0 and anchor.model.resets == 1 and anchor.model.seed == 3
    assert run["first_tokens"] == 1 and 0 < run["first_seconds"] <= run["seconds"]
    first = dict(first_tokens=1, first_seconds=0.2, first_target_calls=1, first_draft_seconds=0.0,
                 first_verify_seconds=0.0, runs=1)
    report = speed._report({"ar": dict(tokens=5, seconds=1.0, target_calls=5, target_seconds=0.9, first_target_seconds=0.5,
                                       draft_calls=0, draft_seconds=0.0, first_draft_calls=0, verify_seconds=0.0,
                                       steps=5, **first),
                            "sd": dict(tokens=5, seconds=0.5, target_calls=2, target_seconds=0.4, draft_calls=4,
                                       draft_seconds=0.05, accepted=3, steps=2, rejections=1, verify_seconds=0.01,
                                       first_target_seconds=0.3, first_draft_calls=2, **first),
                            "hf-assisted": dict(tokens=5, seconds=2.0, target_calls=2, target_seconds=1.0),
                            "hf-generate": dict(tokens=5, seconds=2.5, target_calls=5, target_seconds=2.0),
                            "llama.cpp": dict(tokens=5, seconds=0.25, first_tokens=1, first_seconds=0.05)},
                           settings, None)
    rows = {r["method"]: r for r in report["methods"]}
    assert rows["llama.cpp"]["vs_ar"] == 4.0 and report["goals"]["best_exact_method"] == "sd"
    # decode only: (5 - 1) tokens in 1.0 - 0.2 s for ar, 0.5 - 0.2 s for sd, 0.25 - 0.05 s for llama.cpp
    assert rows["sd"]["decode_vs_ar"] == pytest.approx((4 / 0.3) / (4 / 0.8))
    assert rows["llama.cpp"]["decode_tokens_per_second"] == pytest.approx(4 / 0.2)
    assert rows["hf-generate"]["decode_tokens_per_second"] is None
    # the costs leave each run's first step (the prefill) out: ar's calls cost (0.9 - 0.5) / 4 = 0.1 s,
    # sd's second call 0.4 - 0.3 = 0.1 s (r = 1, not (0.4 / 2) / (0.9 / 5)), its 2 later draft calls 0.025 s each
    assert rows["sd"]["target_call_ratio"] == pytest.approx(1.0) and rows["sd"]["cost_ratio"] == pytest.approx(0.25)
    assert rows["sd"]["step_ms"] == pytest.approx(dict(draft=50, target=100, verify=10, other=140, total=300))
    assert rows["hf-assisted"]["target_call_ratio"] == pytest.approx((1.0 / 2) / 0.1)  # no first call recorded: all kept
    assert report["goals"]["best_exact_vs_llama_cpp"] == 0.5


@pytest.mark.skipif(not __import__("draftverify.bench.llama_cpp", fromlist=["available"]).available(),
                    reason="llama-cpp-python is not installed (an optional extra)")
def test_llama_cpp_decodes_the_default_gguf():
    from draftverify.bench.llama_cpp import LlamaCpp
    from draftverify.models.gguf import smollm2_gguf

    anchor = LlamaCpp(smollm2_gguf(), context=64, threads=1)
    assert anchor.decode([1, 2, 3], max_new_tokens=6, temperature=1.0, seed=0)["tokens"] == 6


def test_batch_rows_leave_the_prefill_out_of_the_decoding_ratio(monkeypatch):
    """The arithmetic on a synthetic run of one round: 2 prompts of 5 tokens, a batch of 10 s whose
    first step (the prefill, 1 token a prompt) took 6 s, single runs of 6 s whose first steps took 2 s."""
    from draftverify.bench import speed

    clock = iter([0.0, 10.0])
    monkeypatch.setattr(speed.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(speed, "run_spec_batch", lambda *args, **kwargs: [_result(10.0, 6.0)] * 2)
    monkeypatch.setattr(speed, "run_spec", lambda *args, **kwargs: SimpleNamespace(result=_result(6.0, 2.0)))
    (row,) = speed.batch_speed(None, {}, [[1], [2]], ("ar",), seed=0, rounds=1)
    assert row["batch_tokens_per_second"] == 1.0 and row["single_tokens_per_second"] == 10 / 12
    assert row["batch_decode_tokens_per_second"] == 8 / 4 and row["single_decode_tokens_per_second"] == 8 / 8
    assert row["batch_vs_single"] == pytest.approx(1.2) and row["decode_batch_vs_single"] == 2.0
    assert row["round_ratios"] == [pytest.approx(1.2)]


def test_batch_rounds_alternate_their_order_so_a_drift_reaches_both_sides(monkeypatch):
    """Two rounds on a machine whose k-th call runs 1 + k / 2 times slower than at first: batch,
    single; single, batch. One prompt, so each side is one call a round: the batch's calls k = 0
    and 3, the single ones k = 1 and 2, the same mean slowdown, and the ratio of the sums is the
    undrifted one (a batch call of 2 s against a single call of 1 s for the same 5 tokens: 0.5),
    where each round's own ratio errs, in opposite directions. A twin that ran the batch first in
    both rounds (calls 0 and 2 against 1 and 3) would read 2 / 3."""
    from draftverify.bench import speed

    calls, now = [], [0.0]

    def timed(kind: str, base: float, seed: int) -> SimpleNamespace:
        seconds = base * (1 + len(calls) / 2)
        calls.append((kind, seed))
        now[0] += seconds
        return _result(seconds, seconds / 10)

    monkeypatch.setattr(speed.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(speed, "run_spec_batch", lambda spec, target, drafts, prompts, seed, **kw: [timed("batch", 2.0, seed)])
    monkeypatch.setattr(speed, "run_spec",
                        lambda spec, target, drafts, prompt, seed, **kw: SimpleNamespace(result=timed("single", 1.0, seed)))
    (row,) = speed.batch_speed(None, {}, [[1]], ("ar",), seed=7)
    assert calls == [("batch", 7), ("single", 7), ("single", 8), ("batch", 8)]
    assert row["rounds"] == 2 and row["batch_vs_single"] == pytest.approx(0.5)
    assert row["round_ratios"][0] == pytest.approx(0.5 * 1.5) and row["round_ratios"][1] == pytest.approx(0.5 * 2 / 2.5)


def test_batch_rounds_must_be_positive():
    from draftverify.bench import speed

    with pytest.raises(ValueError, match="rounds"):
        speed.batch_speed(None, {}, [[1]], ("ar",), seed=0, rounds=0)


def _result(seconds: float, first: float) -> SimpleNamespace:
    step = SimpleNamespace(committed=1, draft_seconds=0.0, target_seconds=first, verify_seconds=0.0)
    return SimpleNamespace(tokens=[0] * 5, seconds=seconds, steps=[step])


def test_vs_ar_carries_a_bootstrap_interval_over_the_prompts():
    from draftverify.bench import speed

    settings = speed.SpeedSettings(num_prompts=3, max_new_tokens=4, draft_length=2, multi=0, batch=0, tiny=True)
    totals: dict = {}

    def ours(name: str, seconds: float, calls: int) -> None:  # a run of ours, its first step a tenth of it
        speed._add(totals, name, tokens=4, seconds=seconds, target_calls=calls, target_seconds=seconds, first_tokens=1,
                   first_seconds=seconds / 10, first_target_calls=1, first_target_seconds=seconds / 10,
                   draft_calls=calls, draft_seconds=0.0, first_draft_calls=1, first_draft_seconds=0.0, accepted=calls,
                   rejections=1, steps=calls, verify_seconds=0.0, first_verify_seconds=0.0, runs=1)

    for ar_seconds, sd_seconds, generate_seconds in ((1.0, 0.5, 2.0), (2.0, 1.0, 4.0), (1.5, 0.75, 3.0)):
        ours("ar", ar_seconds, 4)
        ours("sd", sd_seconds, 2)
        speed._add(totals, "hf-assisted", tokens=4, seconds=generate_seconds, target_calls=2, target_seconds=1.0)
        speed._add(totals, "hf-generate", tokens=4, seconds=generate_seconds, target_calls=4, target_seconds=1.0)
    report = speed._report(totals, settings, None)
    rows = {r["method"]: r for r in report["methods"]}
    # sd twice as fast as ar on every prompt: every resample says 2
    assert rows["sd"]["vs_ar"] == 2.0 and rows["sd"]["vs_ar_interval"] == pytest.approx([2.0, 2.0])
    assert report["goals"]["best_exact_vs_ar_interval"] == rows["sd"]["vs_ar_interval"]
    assert "95% 2.00-2.00 over the prompts" in speed._tables(dict(report, llama_cpp="left out", copy_gb_s={"before": 12.0, "after": 11.5}), 0)
    # a prompt where sd is slower widens it around the pooled figure, 5.5 / 4.25 s; one prompt gives none
    ours("ar", 1.0, 4)
    ours("sd", 2.0, 2)
    for name in ("hf-assisted", "hf-generate"):
        speed._add(totals, name, tokens=4, seconds=2.0, target_calls=2, target_seconds=1.0)
    pooled = {r["method"]: r for r in speed._report(totals, settings, None)["methods"]}["sd"]
    assert pooled["vs_ar"] == pytest.approx(5.5 / 4.25)
    low, high = pooled["vs_ar_interval"]
    assert low < 1.0 < 5.5 / 4.25 < high <= 2.0
    one: dict = {}
    speed._add(one, "ar", tokens=4, seconds=1.0)
    speed._add(one, "sd", tokens=4, seconds=0.5)
    assert speed._vs_ar_interval(one["sd"], one["ar"]) is None
    with pytest.raises(ValueError, match="units: 1 prompts against ar's 4"):
        speed._vs_ar_interval(one["sd"], totals["ar"])

"""Smoke test of `draftverify bench ot` (numbers live in docs/results, not in tests)."""

from __future__ import annotations

import json

import numpy as np

from draftverify.bench.ot import synthetic_pair, top_k
from draftverify.cli import main


def test_bench_ot_writes_json_and_a_table(tmp_path, capsys):
    out, table = tmp_path / "ot.json", tmp_path / "ot.md"
    code = main(["bench", "ot", "--top-k", "5", "--num-drafts", "2", "--tokens", "2", "--vocab", "50",
                 "--methods", "maxflow", "ot(solver=maxflow-cs)", "ot(solver=gr,tol=1e-3)", "--json", str(out), "--markdown", str(table)])
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert [r["method"] for r in results] == ["maxflow", "maxflow-cs", "ot(solver=gr,tol=0.001)"]
    exact = [r for r in results if r["method"] != "ot(solver=gr,tol=0.001)"]
    assert all(abs(r["acceptance"] - r["alpha_star"]) < 1e-9 and r["target_l1_max"] < 1e-9 for r in exact)
    assert "| 5 | 2 | maxflow-cs |" in table.read_text()


def test_synthetic_pairs_are_distributions_and_top_k_keeps_k():
    target, draft = synthetic_pair(np.random.default_rng(0), vocab_size=300)
    assert abs(target.sum() - 1) < 1e-12 and abs(draft.sum() - 1) < 1e-12
    assert np.count_nonzero(top_k(draft, 7)) == 7 and abs(top_k(draft, 7).sum() - 1) < 1e-12


def test_pair_source_yields_distribution_pairs_of_the_embedded_vocabulary():
    from draftverify.bench.ot import OtSettings, distributions

    pairs, meta = distributions(OtSettings(source="pair", tokens=4, num_prompts=2, seed=0))
    assert meta["source"] == "pair" and meta["tokens"] == len(pairs) == 4 and meta["prompts"] == 2
    vocab = meta["vocab_size"]
    for target, draft in pairs:
        assert target.shape == draft.shape == (vocab,) and target.dtype == draft.dtype == np.float64
        assert (target >= 0).all() and (draft >= 0).all()
        assert abs(target.sum() - 1) < 1e-12 and abs(draft.sum() - 1) < 1e-12
        assert 0 < np.minimum(target, draft).sum() <= 1 + 1e-12
        assert np.count_nonzero(top_k(draft, 10)) == 10

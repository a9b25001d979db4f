"""`sprinter train`: per lambda the feature set with the best held-out AUC ships."""

from __future__ import annotations

import json

import numpy as np
import pytest

from draftverify.approx.classifier import LinearClassifier
from draftverify.approx.data import SprinterData
from draftverify.approx.train import FEATURE_SETS, LAMBDAS, TrainSettings, train_all


def _data(informative: str, seed: int = 0, count: int = 1200, hidden_size: int = 96) -> SprinterData:
    """Drafted tokens whose ratio D(x)/T(x) follows log D(x) (``informative="logprob"``) or the
    first hidden coordinate (``"hidden"``); the rest is noise."""
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((count, hidden_size)).astype(np.float32)
    log_draft_prob = rng.standard_normal(count)
    signal = log_draft_prob if informative == "logprob" else hidden[:, 0].astype(np.float64)
    ratio = np.exp(0.6 * signal + 0.3 * rng.standard_normal(count)) * 1.2
    return SprinterData(hidden=hidden, log_draft_prob=log_draft_prob, entropy=rng.standard_normal(count),
                        ratio=ratio, kind=np.zeros(count, dtype=np.int64), group=np.arange(count) // 8)


@pytest.mark.parametrize("informative,expected", [("logprob", "logprob+entropy"), ("hidden", None)])
def test_the_feature_set_with_the_best_heldout_auc_ships(informative, expected, tmp_path):
    summary = train_all(_data(informative), 96, tmp_path, TrainSettings(), "fingerprint", log=lambda _: None)
    for lam in LAMBDAS:
        results = [r for r in summary["results"] if r["ratio_threshold"] == lam]
        shipped = [r for r in results if r["shipped"]]
        assert len(results) == len(FEATURE_SETS) and len(shipped) == 1
        assert shipped[0]["auc"] == max(r["auc"] for r in results)
        saved = LinearClassifier.load(tmp_path / f"lambda_{lam:g}.json")
        assert saved.spec == FEATURE_SETS[shipped[0]["features"]] and saved.info["features"] == shipped[0]["features"]
        if expected is not None:  # 96 noise weights overfit: log D(x) and entropy alone do better
            assert shipped[0]["features"] == expected
        else:
            assert FEATURE_SETS[shipped[0]["features"]].hidden
    default = json.loads((tmp_path / "classifier.json").read_text())
    assert default == json.loads((tmp_path / "lambda_1.2.json").read_text())

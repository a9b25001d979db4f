"""The classifier: ROC/AUC against brute force, training with early stopping, persistence, labels,
features (log D(x), entropy, the hidden-state hook). The training data: test_data.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.approx import FeatureSpec, HiddenStateTap, LinearClassifier, build_features, labels_for, roc_curve, train_classifier


def brute_force_auc(scores, labels) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float(((pos[:, None] > neg[None]) + 0.5 * (pos[:, None] == neg[None])).mean())


def test_roc_by_hand_and_against_brute_force():
    roc = roc_curve(np.array([0.9, 0.8, 0.8, 0.3]), np.array([1, 0, 1, 0]))
    assert roc.auc == pytest.approx(0.875)
    assert roc.at(0.85) == (0.0, 0.5) and roc.at(0.8) == (0.5, 1.0) and roc.at(2.0) == (0.0, 0.0)
    rng = np.random.default_rng(0)
    scores, labels = rng.integers(0, 6, 300) / 5, rng.integers(0, 2, 300)  # many ties
    assert roc_curve(scores, labels).auc == pytest.approx(brute_force_auc(scores, labels))
    roc = roc_curve(scores, labels)
    for threshold in (0.0, 0.4, 1.0):
        yes = scores >= threshold
        assert roc.at(threshold) == pytest.approx((yes[labels == 0].mean(), yes[labels == 1].mean()))


def test_training_separates_and_stops_early_and_round_trips(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1000, 3))
    labels = (x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.normal(size=1000) > 0).astype(int)
    spec = FeatureSpec(hidden=True, log_draft_prob=False, entropy=False)
    classifier, roc = train_classifier(x * 5 + 2, labels, spec=spec, ratio_threshold=1.2, hidden_size=3, max_epochs=25, learning_rate=0.03)
    assert roc.auc > 0.95 and classifier.info["heldout_auc"] == roc.auc
    noise, _ = train_classifier(x, rng.integers(0, 2, 1000), spec=spec, ratio_threshold=1.0, hidden_size=3,
                                max_epochs=200, patience=3)
    assert noise.info["epochs_run"] < 200 and noise.info["best_epoch"] == noise.info["epochs_run"] - 4
    loaded = LinearClassifier.load(classifier.save(tmp_path / "c.json"))
    features = torch.from_numpy(x[:10] * 5 + 2)
    np.testing.assert_allclose(loaded.score(features).numpy(), classifier.score(features).numpy(), rtol=1e-12)
    assert loaded.ratio_threshold == 1.2 and loaded.spec == spec


def test_the_classifier_is_its_best_epoch_judged_on_the_heldout_split_alone():
    """What training returns is read on the held-out split (``_split``, by group): its weights are
    the best epoch's (their held-out loss is the one recorded, below the last epoch's), the
    standardisation is the training split's, the ROC and the yes-share thresholds are the held-out
    scores'."""
    from draftverify.approx.classifier import _split

    rng = np.random.default_rng(3)
    x = rng.normal(size=(1000, 3))
    labels = (x[:, 0] + rng.normal(size=1000) > 0).astype(int)
    spec = FeatureSpec(hidden=True, log_draft_prob=False, entropy=False)
    classifier, roc = train_classifier(x, labels, spec=spec, ratio_threshold=1.0, hidden_size=3, max_epochs=200,
                                       patience=3, learning_rate=0.3, batch_size=50)
    info, heldout = classifier.info, _split(np.arange(1000), 0.2, 0)
    assert info["epochs_run"] < 200 and info["best_epoch"] == info["epochs_run"] - 4  # it stopped after its best
    scores = classifier.score(torch.from_numpy(x[heldout])).numpy()
    loss = -np.mean(labels[heldout] * np.log(scores) + (1 - labels[heldout]) * np.log(1 - scores))
    assert loss == pytest.approx(info["heldout_loss"], rel=1e-5)
    np.testing.assert_allclose(classifier.mean, x[~heldout].mean(0), rtol=1e-12)
    assert roc.auc == pytest.approx(brute_force_auc(scores, labels[heldout]), abs=1e-12)
    for share, threshold in info["yes_share_thresholds"].items():
        assert (scores >= threshold).mean() == pytest.approx(float(share), abs=0.01)


def test_labels_and_bad_input():
    np.testing.assert_array_equal(labels_for(np.array([0.5, 1.0, 1.2, 1.3, np.inf]), 1.2), [1, 1, 1, 0, 0])
    with pytest.raises(ValueError, match="NaN"):
        labels_for(np.array([np.nan]), 1.0)
    spec = FeatureSpec(hidden=False)
    with pytest.raises(ValueError, match="both classes"):
        train_classifier(np.zeros((10, 2)), np.ones(10), spec=spec, ratio_threshold=1.0)
    with pytest.raises(ValueError, match="NaN"):
        train_classifier(np.full((10, 2), np.nan), np.arange(10) % 2, spec=spec, ratio_threshold=1.0)
    with pytest.raises(ValueError, match="columns"):
        train_classifier(np.zeros((10, 3)), np.arange(10) % 2, spec=spec, ratio_threshold=1.0)
    with pytest.raises(ValueError, match="both labels"):
        roc_curve(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="at least one"):
        FeatureSpec(False, False, False)
    with pytest.raises(ValueError, match="expected 2 finite"):
        LinearClassifier(np.zeros(3), 0.0, np.zeros(2), np.ones(2), spec, 1.0)
    with pytest.raises(FileNotFoundError, match="sprinter train"):
        LinearClassifier.load("/nonexistent.json")


def test_features_by_hand():
    probs = torch.tensor([[0.5, 0.25, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    features = build_features(FeatureSpec(hidden=False), torch.tensor([1, 0]), probs)
    entropy = -(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25))
    np.testing.assert_allclose(features.numpy(), [[np.log(0.25), entropy], [0.0, 0.0]])
    with pytest.raises(ValueError, match="zero draft probability"):
        build_features(FeatureSpec(hidden=False), torch.tensor([3, 0]), probs)
    with pytest.raises(ValueError, match="hidden state"):
        build_features(FeatureSpec(), torch.tensor([1, 0]), probs)


def test_hidden_state_tap_is_the_output_layer_input(tiny):
    _, draft = tiny
    tap = HiddenStateTap(draft)
    tokens = torch.tensor([[1, 2, 3, 4]])
    with tap:
        logits = draft.forward(draft.new_cache(1), tokens, None, 3)  # [1, 3, V]
    assert tap.last.shape == (1, 3, 16) and tap.hidden_size == 16
    with torch.inference_mode():
        torch.testing.assert_close(draft.model.lm_head(tap.last), logits)
    assert not draft.model.lm_head._forward_hooks  # removed on exit


def test_get_verifier_loads_the_shipped_classifier_as_the_command_line_does(tmp_path):
    from draftverify import get_verifier
    from draftverify.approx.load import DEFAULT_CLASSIFIER, load_classifier

    shipped = load_classifier()
    for text in ("sprinter", "sprinter(classifier=shipped)", f"sprinter(classifier={DEFAULT_CLASSIFIER.parent})"):
        assert get_verifier(text).classifier.info == shipped.info, text
    with pytest.raises(FileNotFoundError, match="sprinter train"):
        get_verifier(f"sprinter(classifier={tmp_path})")  # a folder without classifier.json

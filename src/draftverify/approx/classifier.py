"""The SPRINTER classifier: one linear layer and a sigmoid (seed 003, section 3.2), its training
(Adam, binary cross-entropy, early stopping on a held-out split) and its ROC curve.

Label 1 ("acceptable") when D(x) / T(x) <= lambda for the drafted token x (seed 003, section 3.2,
with its q = our draft, p = our target). The classifier says "yes" (keep drafting) when its score
is >= the threshold tau (seed 003, Algorithm 2). In SPRINTER's terms the false-positive rate is
P(yes | label 0) and the true-positive rate P(yes | label 1).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .features import FeatureSpec, build_features

__all__ = ["LinearClassifier", "RocCurve", "roc_curve", "train_classifier", "labels_for"]


def labels_for(ratio: np.ndarray, ratio_threshold: float) -> np.ndarray:
    """Seed 003 labels: 1 where D(x)/T(x) <= lambda (``ratio`` = D(x)/T(x), inf when T(x) = 0)."""
    ratio = np.asarray(ratio, dtype=np.float64)
    if np.isnan(ratio).any() or (ratio < 0).any():
        raise ValueError("ratio: expected non-negative numbers (inf allowed), got NaN or negatives")
    if not ratio_threshold > 0:
        raise ValueError(f"ratio threshold lambda must be > 0, got {ratio_threshold}")
    return (ratio <= ratio_threshold).astype(np.int64)


@dataclass(frozen=True, eq=False)
class LinearClassifier:
    """score = sigmoid(w . (f - mean) / scale + b) on the features of :mod:`.features`."""

    weight: np.ndarray  # [F]
    bias: float
    mean: np.ndarray  # [F] feature standardisation, from the training split
    scale: np.ndarray  # [F]
    spec: FeatureSpec
    ratio_threshold: float  # lambda of the training labels
    hidden_size: int | None = None
    info: dict[str, Any] = field(default_factory=dict)  # training summary (saved with the weights)

    scored = True  # decisions come from a score and a threshold

    def __post_init__(self) -> None:
        size = self.spec.size(self.hidden_size)
        for name in ("weight", "mean", "scale"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (size,) or not np.all(np.isfinite(value)):
                raise ValueError(f"{name}: expected {size} finite numbers, got shape {value.shape}")
            object.__setattr__(self, name, value)
        if not np.all(self.scale > 0):
            raise ValueError("scale: entries must be > 0")
        if not np.isfinite(self.bias):
            raise ValueError("bias must be finite")

    def score(self, features: torch.Tensor) -> torch.Tensor:
        """Sigmoid scores ``[N]`` (float64) of feature rows ``[N, F]``."""
        if features.dim() != 2 or features.shape[1] != self.weight.shape[0]:
            raise ValueError(f"features: expected shape [N, {self.weight.shape[0]}], got {tuple(features.shape)}")
        mean, scale, weight = (torch.from_numpy(a) for a in (self.mean, self.scale, self.weight))
        return torch.sigmoid(((features.to(torch.float64) - mean) / scale) @ weight + self.bias)

    def yes_probability(
        self,
        tokens: torch.Tensor,  # [N]
        draft_probs: torch.Tensor,  # [N, V]
        *,
        hidden: torch.Tensor | None = None,  # [N, H]
        target_probs: torch.Tensor | None = None,  # unused: a trained classifier never sees the target
        threshold: float = 0.5,
    ) -> torch.Tensor:
        """1.0 where the classifier says "yes" (score >= threshold), else 0.0: ``[N]`` float64."""
        return (self.score(build_features(self.spec, tokens, draft_probs, hidden)) >= threshold).double()

    def yes_all_tokens(
        self,
        draft_probs: torch.Tensor,  # [N, V]
        hidden: torch.Tensor | None = None,  # [N, H]
        threshold: float = 0.5,
    ) -> torch.Tensor:
        """The decision for every token the draft could have drawn at each of N positions: ``[N, V]``
        bool. The score is linear in log D(x), the only feature that depends on x, so this costs one
        pass over ``[N, V]`` (used to compute the exact output law at a prefix)."""
        n, vocab = draft_probs.shape
        probs = draft_probs.to(torch.float64)
        weight = torch.from_numpy(self.weight / self.scale)  # [F]
        offset = self.bias - float((self.mean / self.scale) @ self.weight)
        base = torch.full((n, 1), offset, dtype=torch.float64)  # the x-independent part of the logit
        column = 0
        if self.spec.hidden:
            if hidden is None:
                raise ValueError("this classifier needs the draft's last hidden state (a transformers draft)")
            size = hidden.shape[1]
            base = base + (hidden.to(torch.float64) @ weight[:size])[:, None]
            column = size
        per_token = torch.zeros(n, vocab, dtype=torch.float64)
        if self.spec.log_draft_prob:
            per_token = weight[column] * torch.log(probs)  # -inf where D(x) = 0: never drawn anyway
            column += 1
        if self.spec.entropy:
            base = base + weight[column] * (-torch.special.xlogy(probs, probs).sum(-1, keepdim=True))
        logit = torch.nan_to_num(base + per_token, nan=-torch.inf)  # 0 * -inf: D(x) = 0 with zero weight
        return torch.sigmoid(logit) >= threshold

    # --- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dict(
            kind="sprinter-linear", weight=self.weight.tolist(), bias=float(self.bias), mean=self.mean.tolist(),
            scale=self.scale.tolist(), spec=asdict(self.spec), ratio_threshold=self.ratio_threshold,
            hidden_size=self.hidden_size, info=self.info,
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> LinearClassifier:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no SPRINTER classifier at {path}; train one with `draftverify sprinter train`")
        data = json.loads(path.read_text())
        if data.get("kind") != "sprinter-linear":
            raise ValueError(f"{path}: not a SPRINTER classifier file")
        return cls(
            weight=np.array(data["weight"]), bias=float(data["bias"]), mean=np.array(data["mean"]),
            scale=np.array(data["scale"]), spec=FeatureSpec(**data["spec"]),
            ratio_threshold=float(data["ratio_threshold"]), hidden_size=data["hidden_size"], info=data.get("info", {}),
        )


@dataclass(frozen=True)
class RocCurve:
    """ROC of "yes when score >= threshold": ``false_positive_rate[i]`` and ``true_positive_rate[i]``
    at ``thresholds[i]`` (decreasing; the first is +inf: nobody says yes), and the area under it."""

    false_positive_rate: np.ndarray
    true_positive_rate: np.ndarray
    thresholds: np.ndarray
    auc: float

    def at(self, threshold: float) -> tuple[float, float]:
        """(false-positive rate, true-positive rate) at one threshold."""
        i = int(np.searchsorted(-self.thresholds, -threshold, side="right")) - 1
        return float(self.false_positive_rate[i]), float(self.true_positive_rate[i])


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> RocCurve:
    """The ROC curve and its area (trapezoids; equals the Mann-Whitney probability that a random
    positive scores above a random negative, ties counting one half). Needs both classes."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels)
    if scores.ndim != 1 or scores.shape != labels.shape:
        raise ValueError(f"scores and labels must be 1-d of one length, got {scores.shape} and {labels.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores contain NaN or infinite values")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    positives, negatives = int(labels.sum()), int((1 - labels).sum())
    if positives == 0 or negatives == 0:
        raise ValueError("the ROC curve needs both labels (all samples have one label)")
    order = np.argsort(-scores, kind="stable")
    sorted_scores, sorted_labels = scores[order], labels[order]
    last_of_tie = np.append(np.diff(sorted_scores) != 0, True)  # one point per distinct score
    true_positives = np.cumsum(sorted_labels)[last_of_tie]
    false_positives = np.cumsum(1 - sorted_labels)[last_of_tie]
    tpr = np.concatenate([[0.0], true_positives / positives])
    fpr = np.concatenate([[0.0], false_positives / negatives])
    thresholds = np.concatenate([[np.inf], sorted_scores[last_of_tie]])
    auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    return RocCurve(fpr, tpr, thresholds, auc)


def _split(groups: np.ndarray, heldout: float, seed: int) -> np.ndarray:
    """Held-out mask: a share ``heldout`` of the groups (samples of one sequence stay together)."""
    names = np.unique(groups)
    rng = np.random.default_rng(seed)
    count = max(1, int(round(heldout * len(names))))
    if count >= len(names):
        raise ValueError(f"need at least two groups to hold {heldout:.0%} out, got {len(names)}")
    return np.isin(groups, rng.choice(names, size=count, replace=False))


def train_classifier(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    spec: FeatureSpec,
    ratio_threshold: float,
    hidden_size: int | None = None,
    groups: np.ndarray | None = None,
    heldout: float = 0.2,
    learning_rate: float = 3e-3,
    batch_size: int = 512,
    max_epochs: int = 200,
    patience: int = 8,
    seed: int = 0,
) -> tuple[LinearClassifier, RocCurve]:
    """Fit the linear classifier with Adam on binary cross-entropy; stop when the held-out loss has
    not improved for ``patience`` epochs and keep the best epoch's weights. The held-out split takes
    a share ``heldout`` of the ``groups`` (default: every sample its own group). Returns the
    classifier and its ROC on the held-out split."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"expected features [N, F] and labels [N], got {x.shape} and {y.shape}")
    if x.shape[1] != spec.size(hidden_size):
        raise ValueError(f"features have {x.shape[1]} columns; the spec needs {spec.size(hidden_size)}")
    if not np.all(np.isfinite(x)):
        raise ValueError("features contain NaN or infinite values")
    if not np.isin(y, (0, 1)).all() or len(np.unique(y)) < 2:
        raise ValueError("labels must be 0/1 with both classes present")
    if not 0 < heldout < 1 or max_epochs < 1 or patience < 1 or batch_size < 1 or not learning_rate > 0:
        raise ValueError("need 0 < heldout < 1, learning_rate > 0 and max_epochs, patience, batch_size >= 1")
    groups = np.arange(len(y)) if groups is None else np.asarray(groups)
    test = _split(groups, heldout, seed)
    mean = x[~test].mean(0)
    scale = x[~test].std(0)
    scale = np.where(scale > 0, scale, 1.0)
    standard = torch.from_numpy((x - mean) / scale).float()
    target = torch.from_numpy(y.astype(np.float32))
    train_x, train_y, test_x, test_y = standard[~test], target[~test], standard[test], target[test]

    torch.manual_seed(seed)
    layer = torch.nn.Linear(x.shape[1], 1)
    optimizer = torch.optim.Adam(layer.parameters(), lr=learning_rate)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    generator = torch.Generator().manual_seed(seed)
    best = (float("inf"), 0, None)
    for epoch in range(max_epochs):
        for batch in torch.randperm(len(train_y), generator=generator).split(batch_size):
            optimizer.zero_grad()
            loss_fn(layer(train_x[batch])[:, 0], train_y[batch]).backward()
            optimizer.step()
        with torch.no_grad():
            heldout_loss = float(loss_fn(layer(test_x)[:, 0], test_y))
        if heldout_loss < best[0]:
            best = (heldout_loss, epoch, {k: v.clone() for k, v in layer.state_dict().items()})
        elif epoch - best[1] >= patience:
            break
    layer.load_state_dict(best[2])
    weight = layer.weight.detach().double().numpy()[0]
    bias = float(layer.bias.detach()[0])
    info = dict(train_samples=int((~test).sum()), heldout_samples=int(test.sum()), best_epoch=best[1],
                epochs_run=epoch + 1, heldout_loss=best[0], positive_share=float(y.mean()))
    classifier = LinearClassifier(weight, bias, mean, scale, spec, float(ratio_threshold), hidden_size, info)
    with torch.no_grad():
        scores = classifier.score(torch.from_numpy(x[test])).numpy()
    roc = roc_curve(scores, y[test])
    info["heldout_auc"] = roc.auc
    # thresholds at which the classifier says "yes" to a given share of held-out tokens
    info["yes_share_thresholds"] = {f"{share:g}": float(np.quantile(scores, 1 - share)) for share in (0.9, 0.7, 0.5, 0.3, 0.1)}
    return classifier, roc

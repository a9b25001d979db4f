"""SPRINTER (seed 003): approximate verification by a small trained classifier, and what it costs.

- :mod:`.features`: what the classifier sees (the draft's last hidden state, log D(x), entropy);
- :mod:`.classifier`: the linear classifier, its training and ROC;
- :mod:`.load`: the classifiers shipped with the pairs (one per draft), and loading saved ones (the
  ``sprinter`` verifier itself, pure math, is :mod:`draftverify.verify.sprinter`);
- :mod:`.data`: training data from the four prefix kinds of seed 003, section 3.2;
- :mod:`.audit`: false/true-positive rates and deviation measured on decoded text;
- :mod:`.report`: the report under ``docs/results/``.
"""

from ..models.hidden import HiddenStateTap
from ..verify.sprinter import Sprinter
from .classifier import LinearClassifier, RocCurve, labels_for, roc_curve, train_classifier
from .features import FeatureSpec, build_features
from .load import DEFAULT_CLASSIFIER, load_classifier

__all__ = [
    "DEFAULT_CLASSIFIER",
    "FeatureSpec",
    "HiddenStateTap",
    "LinearClassifier",
    "RocCurve",
    "Sprinter",
    "build_features",
    "labels_for",
    "load_classifier",
    "roc_curve",
    "train_classifier",
]

"""SPRINTER (seed 003): approximate verification by a small trained classifier, and what it costs.

- :mod:`.features`: what the classifier sees (the draft's last hidden state, log D(x), entropy);
- :mod:`.classifier`: the linear classifier, its training and ROC;
- :mod:`.sprinter`: the ``sprinter`` verifier (registered) and a synthetic classifier of given rates;
- :mod:`.data`: training data from the four prefix kinds of seed 003, section 3.2;
- :mod:`.audit`: false/true-positive rates and deviation measured on decoded text;
- :mod:`.report`: the report under ``docs/results/``.
"""

from .classifier import LinearClassifier, RocCurve, labels_for, roc_curve, train_classifier
from .features import FeatureSpec, HiddenStateTap, build_features
from .sprinter import DEFAULT_CLASSIFIER, RateClassifier, Sprinter, checked_token, load_classifier

__all__ = [
    "DEFAULT_CLASSIFIER",
    "FeatureSpec",
    "HiddenStateTap",
    "LinearClassifier",
    "RateClassifier",
    "RocCurve",
    "Sprinter",
    "build_features",
    "checked_token",
    "labels_for",
    "load_classifier",
    "roc_curve",
    "train_classifier",
]

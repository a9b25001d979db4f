"""The SPRINTER classifier shipped with the embedded pair, and loading saved ones.

The ``sprinter`` verifier (:mod:`draftverify.verify.sprinter`) takes its classifier as an argument;
reading one from disk happens here, above the verifiers: ``get_verifier("sprinter",
classifier=load_classifier())``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..models.pair import ASSETS
from .classifier import LinearClassifier

__all__ = ["DEFAULT_CLASSIFIER", "load_classifier"]

DEFAULT_CLASSIFIER = ASSETS / "sprinter" / "classifier.json"


def load_classifier(classifier: Any = None) -> Any:
    """A classifier object: ``None`` -> the shipped default for the embedded pair, a path -> the
    saved :class:`LinearClassifier`, an object with ``yes_probability`` -> itself."""
    if classifier is None:
        return LinearClassifier.load(DEFAULT_CLASSIFIER)
    if isinstance(classifier, (str, Path)):
        return LinearClassifier.load(classifier)
    if not callable(getattr(classifier, "yes_probability", None)):
        raise ValueError(f"classifier: expected None, a path or an object with yes_probability, got {type(classifier).__name__}")
    return classifier

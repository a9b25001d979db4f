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

__all__ = ["DEFAULT_CLASSIFIER", "SHIPPED", "load_classifier"]

DEFAULT_CLASSIFIER = ASSETS / "sprinter" / "classifier.json"
SHIPPED = "shipped"  # the name `draftverify list` gives the default classifier


def load_classifier(classifier: Any = None) -> Any:
    """A classifier object: ``None`` or ``"shipped"`` -> the shipped default for the embedded pair,
    a file -> the saved :class:`LinearClassifier`, a folder (``sprinter train --output DIR``) -> its
    ``classifier.json``, an object with ``yes_probability`` -> itself."""
    if classifier is None or classifier == SHIPPED:
        return LinearClassifier.load(DEFAULT_CLASSIFIER)
    if isinstance(classifier, (str, Path)):
        path = Path(classifier)
        return LinearClassifier.load(path / DEFAULT_CLASSIFIER.name if path.is_dir() else path)
    if not callable(getattr(classifier, "yes_probability", None)):
        raise ValueError(f"classifier: expected None, a path or an object with yes_probability, got {type(classifier).__name__}")
    return classifier

"""The SPRINTER classifiers shipped with the pairs, and loading saved ones.

The ``sprinter`` verifier (:mod:`draftverify.verify.sprinter`) takes its classifier as an argument;
reading one from disk happens here, above the verifiers: ``get_verifier("sprinter",
classifier=load_classifier())``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from ..models.hidden import draft_fingerprint
from ..models.pair import ASSETS, SMOLLM2_DRAFT
from .classifier import LinearClassifier

__all__ = ["DEFAULT_CLASSIFIER", "SHIPPED", "SMOLLM2_CLASSIFIER", "ShippedClassifiers", "load_classifier"]

DEFAULT_CLASSIFIER = ASSETS / "sprinter" / "classifier.json"  # the tiny pair's draft
SMOLLM2_CLASSIFIER = SMOLLM2_DRAFT.parent / "sprinter" / "classifier.json"  # the default pair's feature draft
SHIPPED = "shipped"  # the name `draftverify list` gives the default classifier


class ShippedClassifiers:
    """The classifiers shipped with the pairs, one per draft: the tiny pair's answers every call
    (``yes_probability``, ``spec``, ... are its), and the engine's gated step takes
    :meth:`for_draft` of the draft it decodes with."""

    def __init__(self, paths: tuple[Path, ...] = (DEFAULT_CLASSIFIER, SMOLLM2_CLASSIFIER)):
        self.paths = [path for path in paths if path.is_file()]
        self.classifiers = [LinearClassifier.load(path) for path in self.paths]

    def _index(self, draft: Any) -> int:
        """The shipped classifier trained on ``draft`` (by its fingerprint), else the tiny pair's
        (which the gated step then refuses for another draft, saying how to train one)."""
        fingerprint = draft_fingerprint(draft)
        return next((i for i, c in enumerate(self.classifiers) if c.info.get("draft_fingerprint") == fingerprint), 0)

    def path_for(self, draft: Any) -> Path:
        """The file of the classifier for ``draft`` (:meth:`_index`)."""
        return self.paths[self._index(draft)]

    def for_draft(self, draft: Any) -> LinearClassifier:
        """The classifier for ``draft`` (:meth:`_index`)."""
        return self.classifiers[self._index(draft)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["classifiers"][0], name)


@cache
def _shipped() -> ShippedClassifiers:
    return ShippedClassifiers()


def load_classifier(classifier: Any = None) -> Any:
    """A classifier object: ``None`` or ``"shipped"`` -> the classifiers shipped with the pairs
    (:class:`ShippedClassifiers`: the one trained on the draft a decoding runs), a file -> the saved
    :class:`LinearClassifier`, a folder (``sprinter train --output DIR``) -> its ``classifier.json``,
    an object with ``yes_probability`` -> itself."""
    if classifier is None or classifier == SHIPPED:
        return _shipped()
    if isinstance(classifier, (str, Path)):
        path = Path(classifier)
        return LinearClassifier.load(path / DEFAULT_CLASSIFIER.name if path.is_dir() else path)
    if not callable(getattr(classifier, "yes_probability", None)):
        raise ValueError(f"classifier: expected None, a path or an object with yes_probability, got {type(classifier).__name__}")
    return classifier

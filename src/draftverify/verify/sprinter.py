"""SPRINTER as a verifier: sequential approximate verification by a small classifier (seed 003).

Seed 003, Algorithm 2 (its p is our target, q our draft): draft x ~ D; while the classifier says
"yes" (score >= tau) keep x and draft on; at the first "no" call the target on that position only
and apply the speculative-sampling step there (:func:`draftverify.verify.token.speculative_step`):
keep x with probability min(1, T(x)/D(x)), else emit a correction from norm((T - D)_+). Terms:
*run* = the drafted tokens the classifier kept; the *checked token* = the one it said "no" to,
kept or corrected by the target.

Where ours differs from the seed: a run is capped at L tokens (the draft length); a run that
reaches the cap ends with a target call that scores the run and samples one *bonus* token from
T(. | run), as speculative sampling does after a fully accepted draft. Without a cap, a classifier
that never says "no" would never call the target.

Law of one emitted token (seed 003, Theorem 3.1; our general form in
:func:`draftverify.theory.sprinter_output_law`): with eta(x) = P(yes | drafted x), every token the
classifier decides on has law T + eta (D - T)_+ - (T - D)_+ E / TV(T, D), E = sum eta (D - T)_+;
(1 - eta_FP) T + eta_FP D when eta is eta_FP on every token with D > T. Bonus tokens have law T.

The classifier is an argument: any object with ``yes_probability`` (the trained
:class:`draftverify.approx.LinearClassifier`, loaded by :func:`draftverify.approx.load_classifier`,
or, in the tests, a synthetic one that says "yes" by given rates). Here the contract's
``target_probs`` are all given, as in a test harness; the engine's ``gated`` step
(:mod:`draftverify.engine.gated`) calls the target only where the classifier says "no".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from .. import rng
from .base import Verifier, VerifyResult, register
from .token import speculative_step

__all__ = ["Sprinter"]


@register
@dataclass(frozen=True, eq=False)
class Sprinter(Verifier):
    """``sprinter``: SPRINTER's approximate verification (seed 003, Algorithm 2; see module doc).

    Options: ``classifier`` (an object with ``yes_probability``, e.g. the trained one of
    :func:`draftverify.approx.load_classifier`; through :func:`draftverify.get_verifier` also a
    saved classifier's file or folder, and by default the ones shipped with the pairs, each for its draft),
    ``threshold`` tau in
    [0, 1] (the classifier says "yes" when its score >= tau; the seed uses 0.5). NOT exact: the
    output law deviates from the target's by sum_x eta(x) (D - T)_+(x) in TV per token.
    """

    name = "sprinter"
    description = "SPRINTER (approximate): a trained classifier decides, the target checks only its 'no' tokens"
    exact = False
    strategy = "gated"
    threshold: float = 0.5
    classifier: Any = None
    # get_verifier("sprinter") / "sprinter(classifier=DIR)": the shipped or a saved classifier, loaded above this layer
    loaders: ClassVar[dict[str, str]] = {"classifier": "draftverify.approx.load:load_classifier"}

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.threshold) <= 1.0:
            raise ValueError(f"sprinter: threshold must lie in [0, 1], got {self.threshold}")
        if not callable(getattr(self.classifier, "yes_probability", None)):
            raise ValueError(
                "sprinter: classifier must be an object with yes_probability, got "
                f"{type(self.classifier).__name__}; draftverify.approx.load_classifier() loads a saved one"
            )
        if not getattr(self.classifier, "scored", True) and self.threshold != 0.5:
            raise ValueError("sprinter: threshold applies to scored classifiers; this one has given rates")

    def yes_probability(self, tokens, draft_probs, *, hidden=None, target_probs=None) -> torch.Tensor:
        """P(classifier says "yes") for each drafted token ``[N]``."""
        return self.classifier.yes_probability(
            tokens, draft_probs, hidden=hidden, target_probs=target_probs, threshold=float(self.threshold)
        )

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state: Any) -> VerifyResult:
        x, draft, target = draft_tokens[0], draft_probs[0], target_probs[0]  # [L], [L, V], [L + 1, V]
        length = x.shape[0]
        yes = rng.bernoulli(self.yes_probability(x, draft, target_probs=target[:length]), generator)  # [L]
        no = torch.nonzero(~yes)
        j = int(no[0]) if no.numel() else length  # the run: x[:j]
        if j == length:
            return VerifyResult(x.tolist() + [rng.categorical(target[length], generator)], length, 0, None)  # bonus
        token, _ = speculative_step(int(x[j]), draft[j], target[j], generator)
        return VerifyResult(x[:j].tolist() + [token], j, 0, None)

"""Known-law models, exact enumeration and the exactness checker (a product feature).

``check_exactness(verifier, ...)`` decodes many sequences from a seeded Markov pair through any
object with the verifier contract's ``verify`` and tests the law of the first N tokens against the
target's, enumerated exactly; a test it cannot judge is "inconclusive", never passed.
``exact_sequence_law`` computes that law with no sampling at all. ``conform(implementation)``
checks another engine's verifier (transformers', a function on vLLM's flattened layout, any object
with ``verify``) against the exact law: the law by sampling, and probes of the boundary cases on
scripted uniforms.
"""

from .checker import (
    FAILED, INCONCLUSIVE, PASSED, DecodeTrace, ExactnessReport, check_exactness, decode_known_law, decode_known_laws,
    detectable_tv, draw_drafts, exact_sequence_law, goodness_of_fit,
)
from .conform import ConformanceReport, conform
from .enumerate import enumerate_outcomes, exact_output_law
from .markov import KnownLawPair, MarkovModel, random_pair

__all__ = [
    "ConformanceReport",
    "DecodeTrace",
    "FAILED",
    "INCONCLUSIVE",
    "PASSED",
    "ExactnessReport",
    "KnownLawPair",
    "MarkovModel",
    "check_exactness",
    "conform",
    "decode_known_law",
    "decode_known_laws",
    "detectable_tv",
    "draw_drafts",
    "enumerate_outcomes",
    "exact_output_law",
    "exact_sequence_law",
    "goodness_of_fit",
    "random_pair",
]

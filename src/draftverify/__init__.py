"""draftverify: draft-then-verify (speculative) decoding, exact and approximate.

The verifier contract::

    import draftverify
    v = draftverify.get_verifier("bv")
    r = v.verify(draft_tokens, draft_probs, target_probs, generator=g, state=None)

See :mod:`draftverify.verify.base` for shapes and terms.
"""

from .verify import VerifierInfo, VerifyResult, get_verifier, verifiers

__version__ = "0.1.0"
__all__ = ["VerifierInfo", "VerifyResult", "get_verifier", "verifiers", "__version__"]

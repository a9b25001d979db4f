"""draftverify: draft-then-verify (speculative) decoding, exact and approximate.

The verifier contract::

    import draftverify
    v = draftverify.get_verifier("bv")
    r = v.verify(draft_tokens, draft_probs, target_probs, generator=g, state=None)

See :mod:`draftverify.verify.base` for shapes and terms.
"""

from .verify import VerifierInfo, VerifyResult, get_verifier, verifiers

__version__ = "0.1.0"
__all__ = ["VerifierInfo", "VerifyResult", "get_verifier", "verifiers", "generate", "load_pair", "__version__"]

# the engine and the models import transformers: load them on first use, not on `import draftverify`
_LAZY = {"generate": "engine", "generate_batch": "engine", "stream": "engine", "load_pair": "models"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'draftverify' has no attribute {name!r}")

"""draftverify: draft-then-verify (speculative) decoding, exact and approximate.

The verifier contract::

    import draftverify
    v = draftverify.get_verifier("bv")
    r = v.verify(draft_tokens, draft_probs, target_probs, generator=g, state=None)

See :mod:`draftverify.verify.base` for shapes and terms. The subpackages (``ot``, ``theory``,
``testing``, ``models``, ``engine``, ...) are attributes of this module, imported on first use.
"""

from .verify import VerifierInfo, VerifyResult, get_verifier, verifiers

__version__ = "0.1.0"
__all__ = ["VerifierInfo", "VerifyResult", "get_verifier", "verifiers", "generate", "load_pair", "__version__"]

# `import draftverify` loads the verifier contract (and torch) only; the subpackages load on first
# attribute access (ot, theory and testing import scipy; the models import transformers as a model loads).
_SUBPACKAGES = ("approx", "bench", "cli", "engine", "models", "ot", "testing", "theory", "train")
_REEXPORTS = {"generate": "engine", "generate_batch": "engine", "stream": "engine", "load_pair": "models"}


def __getattr__(name: str):
    import importlib

    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    if name in _REEXPORTS:
        return getattr(importlib.import_module(f".{_REEXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'draftverify' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBPACKAGES, *_REEXPORTS})

"""Verification algorithms: pure math on probability arrays (no models)."""

from .base import STRATEGIES, VerifierInfo, Verifier, VerifyResult, check_inputs, get_verifier, register, verifiers
from .spec import MethodSpec, parse_method, typed_options

__all__ = [
    "STRATEGIES", "MethodSpec", "VerifierInfo", "Verifier", "VerifyResult", "check_inputs", "get_verifier",
    "parse_method", "register", "typed_options", "verifiers",
]

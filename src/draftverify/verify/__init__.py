"""Verification algorithms: pure math on probability arrays (no models)."""

from .base import VerifierInfo, Verifier, VerifyResult, check_inputs, get_verifier, register, verifiers

__all__ = ["VerifierInfo", "Verifier", "VerifyResult", "check_inputs", "get_verifier", "register", "verifiers"]

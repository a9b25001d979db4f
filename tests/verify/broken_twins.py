"""Deliberately wrong verifiers: each exactness test must reject its twin, or it cannot fail."""

from __future__ import annotations

import dataclasses

import torch

from draftverify import rng
from draftverify.verify import block
from draftverify.verify.base import Verifier, VerifyResult, get_verifier


class ResampleFromTarget:
    """`sd` that, after a rejection, draws the correction from the target instead of the residual."""

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        x, draft, target = draft_tokens[0], draft_probs[0], target_probs[0]
        length = x.shape[0]
        ratio = target[torch.arange(length), x] / draft[torch.arange(length), x]
        accepted = rng.bernoulli(ratio.clamp(max=1), generator)
        rejected = torch.nonzero(~accepted)
        n = int(rejected[0]) if rejected.numel() else length
        tokens = x[:n].tolist() + [rng.categorical(target[n], generator)]
        return VerifyResult(tokens, n, 0, None)


class GBVWithoutModification:
    """`gbv` whose target modification is dropped between calls."""

    def __init__(self):
        self.inner = get_verifier("gbv")

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        result = self.inner.verify(draft_tokens, draft_probs, target_probs, generator=generator)
        return dataclasses.replace(result, state=None)


def first_failure(success_prob, length, generator, bound=None) -> int:
    """tau = number of successes before the first failure (the known BV bug); ``bound`` unused."""
    for i in range(1, length + 1):
        if not bool(rng.bernoulli(torch.tensor([success_prob(i)], dtype=torch.float64), generator)[0]):
            return i - 1
    return length


class BVStoppingAtFirstRejection:
    """`bv` that stops at the first failed test instead of taking the last success."""

    def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
        original = block.last_success
        block.last_success = first_failure
        try:
            return get_verifier("bv").verify(draft_tokens, draft_probs, target_probs, generator=generator)
        finally:
            block.last_success = original


@dataclasses.dataclass(frozen=True)
class PeekingLength(Verifier):
    """Broken twin: verifies only the first L - 1 drafted tokens unless the last one is the draft's
    most likely token there, i.e. picks L from the draft it is verifying."""

    name = "peeking-length"
    description = "broken on purpose"
    exact = False
    inner: str = "sd"

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state):
        last = draft_tokens[0, -1]
        keep = draft_tokens.shape[1] - int(last != draft_probs[0, -1].argmax())
        return get_verifier(self.inner).verify_trusted(draft_tokens[:, :keep], draft_probs[:, :keep],
                                                       target_probs[:, : keep + 1], generator, state)


@dataclasses.dataclass(frozen=True)
class AcceptAll(Verifier):
    """Broken twin: keeps every draft token, then a bonus token (its output follows the draft)."""

    name = "accept-all"
    description = "broken on purpose"
    exact = False

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state):
        bonus = rng.categorical(target_probs[0, -1], generator)
        return VerifyResult(draft_tokens[0].tolist() + [bonus], draft_tokens.shape[1], 0, None)


@dataclasses.dataclass(frozen=True)
class StatelessGBV(Verifier):
    """Broken twin: gbv whose state (the target modification) the decoding loop forgets."""

    name = "gbv-stateless"
    description = "broken on purpose"
    exact = False

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state):
        result = block.GreedyBlockVerification().verify_trusted(draft_tokens, draft_probs, target_probs, generator)
        return VerifyResult(result.tokens, result.num_accepted, result.draft_index, None)

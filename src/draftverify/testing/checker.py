"""The exactness checker: decode many sequences from a known-law pair through a verifier and test
the law of their first N tokens against the target's, enumerated exactly.

Works with any object that has the contract's ``verify`` (see :mod:`draftverify.verify.base`),
so users can check their own verifiers. ``state`` is passed along across calls, as the ordinary
decoding loop does. ``draft_length`` is an L for every call, or a policy that chooses each call's
L from the past calls (``initial()``, ``choose(state)``, ``update(state, L, accepted, None)`` over a
hashable state, as :mod:`draftverify.engine.draft_length`'s policies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from scipy import stats

from ..rng import BranchingSource, inverse_cdf
from ..verify.acceptance import pooled_acceptance, rejected_tests
from ..verify.modifications import ModificationStack
from .enumerate import enumerate_outcomes
from .markov import KnownLawPair, random_pair

__all__ = ["ExactnessReport", "DecodeTrace", "decode_known_law", "exact_sequence_law", "check_exactness"]


@dataclass(frozen=True)
class _FixedLength:
    """The same L at every call, as a draft-length policy."""

    length: int
    max_length: int = 0

    def initial(self) -> None:
        return None

    def choose(self, state: None) -> int:
        return self.length

    def update(self, state: None, draft_length: int, accepted: int, seconds: None) -> None:
        return None


def _policy(draft_length):
    return _FixedLength(draft_length, draft_length) if isinstance(draft_length, int) else draft_length


@dataclass(frozen=True)
class DecodeTrace:
    tokens: tuple[int, ...]  # the first num_tokens tokens
    calls: int  # verify calls (= target calls)
    accepted: int  # draft tokens accepted over all calls
    rejections: int  # calls that ended with a correction token rather than a bonus token


@dataclass(frozen=True)
class ExactnessReport:
    """Outcome of :func:`check_exactness`. ``p_value`` is the chi-square goodness-of-fit p-value of
    the empirical law of the first ``num_tokens`` tokens against the target's exact law (cells with
    expected count below 5 are pooled; an outcome of target probability 0 gives p = 0)."""

    p_value: float
    chi2: float
    dof: int
    tv: float  # total variation between the empirical and the exact law
    mean_accepted: float  # accepted draft tokens per verify call
    acceptance_rate: float  # accepted / (accepted + rejected): pooled over verified tokens (seed 002)
    tokens_per_call: float  # committed tokens per verify call (block efficiency)
    samples: int
    num_drafts: int
    draft_length: int  # L, or the largest L of a draft-length policy
    num_tokens: int

    def passed(self, threshold: float = 1e-3) -> bool:
        return self.p_value > threshold


def _draw_drafts(pair: KnownLawPair, prefix: list[int], num_drafts: int, length: int, source):
    """K i.i.d. draft continuations of ``prefix``: tokens [K, L], draft_probs [K, L, V], target_probs
    [K, L+1, V] (float64). ``source`` is a BranchingSource (enumeration) or a numpy Generator."""
    tokens = np.zeros((num_drafts, length), dtype=np.int64)
    for k in range(num_drafts):
        for i in range(length):
            row = pair.draft.conditional(prefix + tokens[k, :i].tolist())
            if isinstance(source, BranchingSource):
                tokens[k, i] = source.categorical(torch.from_numpy(row))
            else:  # the numpy generator's uniform, through the one inverse CDF
                tokens[k, i] = int(inverse_cdf(torch.from_numpy(row)[None], torch.tensor([source.random()]))[0])
    draft_probs = np.stack([pair.draft.conditionals(prefix, tokens[k, :-1]) for k in range(num_drafts)])
    target_probs = np.stack([pair.target.conditionals(prefix, tokens[k]) for k in range(num_drafts)])
    return torch.from_numpy(tokens), torch.from_numpy(draft_probs), torch.from_numpy(target_probs)


def decode_known_law(
    verifier, pair: KnownLawPair, num_drafts: int, draft_length: int | Any, num_tokens: int, source, draft_source=None
) -> DecodeTrace:
    """The ordinary decoding loop on a known-law pair until ``num_tokens`` tokens are committed.

    The verifier draws from ``source``; drafts from ``draft_source`` (a numpy Generator: faster for
    Monte Carlo), or from ``source`` too when that is a BranchingSource (enumeration)."""
    draft_source = source if draft_source is None else draft_source
    policy = _policy(draft_length)
    prefix: list[int] = []
    state, length_state = None, policy.initial()
    calls = accepted = rejections = 0
    while len(prefix) < num_tokens:
        length = max(policy.choose(length_state), ModificationStack.min_draft_length(state))
        tokens, draft_probs, target_probs = _draw_drafts(pair, prefix, num_drafts, length, draft_source)
        result = verifier.verify(tokens, draft_probs, target_probs, generator=source, state=state)
        if not result.tokens:
            raise ValueError("verify committed no token (the contract requires at least one)")
        prefix.extend(int(t) for t in result.tokens)
        state, length_state = result.state, policy.update(length_state, length, result.num_accepted, None)
        calls += 1
        accepted += result.num_accepted
        rejections += rejected_tests([result.num_accepted], length)
    return DecodeTrace(tuple(prefix[:num_tokens]), calls, accepted, rejections)


class _Opaque:
    """Wraps an unhashable verifier state so it can travel in an outcome key (never merged)."""

    def __init__(self, value):
        self.value = value


def _state_key(state):
    try:
        hash(state)
        return state
    except TypeError:
        return _Opaque(state)


def exact_sequence_law(verifier, pair: KnownLawPair, *, num_drafts: int = 1, draft_length: int | Any = 2,
                       num_tokens: int = 3) -> np.ndarray:
    """Exact law of the first ``num_tokens`` tokens decoded through ``verifier``: array [V] * num_tokens,
    to compare with ``pair.target.law(num_tokens)``.

    Dynamic programming over calls: the frontier holds (prefix, state) with their probabilities;
    each call's drafts and verifier draws are enumerated together, and equal (prefix, state)
    outcomes are merged (states that cannot be hashed are kept apart); a draft-length policy's
    state is part of the key.
    """
    policy = _policy(draft_length)
    law = np.zeros((pair.vocab_size,) * num_tokens)
    frontier: dict[tuple, float] = {((), None, policy.initial()): 1.0}
    while frontier:
        (prefix, key, length_state), prob = frontier.popitem()
        if len(prefix) >= num_tokens:
            law[prefix[:num_tokens]] += prob
            continue
        state = key.value if isinstance(key, _Opaque) else key
        length = max(policy.choose(length_state), ModificationStack.min_draft_length(state))

        def one_call(source, prefix=prefix, state=state, length=length):
            tokens, draft_probs, target_probs = _draw_drafts(pair, list(prefix), num_drafts, length, source)
            result = verifier.verify(tokens, draft_probs, target_probs, generator=source, state=state)
            return tuple(int(t) for t in result.tokens), _state_key(result.state), result.num_accepted

        for (tokens, new_key, accepted), branch_prob in enumerate_outcomes(one_call).items():
            if not tokens:
                raise ValueError("verify committed no token (the contract requires at least one)")
            entry = (prefix + tokens, new_key, policy.update(length_state, length, accepted, None))
            frontier[entry] = frontier.get(entry, 0.0) + prob * branch_prob
    return law


def goodness_of_fit(counts: np.ndarray, law: np.ndarray) -> tuple[float, float, int]:
    """Chi-square test of ``counts`` against ``law`` (flat arrays): (p_value, statistic, dof)."""
    total = counts.sum()
    if np.any(counts[law == 0] > 0):
        return 0.0, float("inf"), 0
    expected = law * total
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    if expected[-1] < 5:  # fold a small pooled cell into the smallest kept one
        observed, expected = observed[:-1], expected[:-1]
        smallest = int(np.argmin(expected))
        observed[smallest] += counts[~big].sum()
        expected[smallest] += law[~big].sum() * total
    dof = len(expected) - 1
    if dof < 1:
        return 1.0, 0.0, 0
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(statistic, dof)), statistic, dof


def check_exactness(
    verifier,
    pair: KnownLawPair | None = None,
    *,
    num_drafts: int = 1,
    draft_length: int | Any = 2,
    num_tokens: int = 4,
    samples: int = 20000,
    seed: int = 0,
    on_sample: Callable[[], None] | None = None,
) -> ExactnessReport:
    """Decode ``samples`` sequences through ``verifier`` and test their law against the target's.

    ``pair`` defaults to ``random_pair(vocab_size=4, order=2, seed=seed)``. The p-value is exact
    for a correct verifier up to the chi-square approximation; a biased verifier drives it to 0 as
    ``samples`` grows. ``on_sample``, if given, is called after each decoded sequence (progress).
    """
    if samples < 1 or num_drafts < 1 or _policy(draft_length).max_length < 1 or num_tokens < 1:
        raise ValueError("samples, num_drafts, draft_length and num_tokens must be >= 1")
    pair = pair if pair is not None else random_pair(vocab_size=4, order=2, seed=seed)
    if pair.vocab_size**num_tokens > 200_000:
        raise ValueError("V ** num_tokens is too large to enumerate the law; lower num_tokens")
    generator = torch.Generator().manual_seed(seed)
    draft_rng = np.random.default_rng(seed)
    vocab = pair.vocab_size
    counts = np.zeros(vocab**num_tokens)
    calls = accepted = rejections = 0
    weights = vocab ** np.arange(num_tokens - 1, -1, -1)
    for _ in range(samples):
        trace = decode_known_law(verifier, pair, num_drafts, draft_length, num_tokens, generator, draft_rng)
        counts[int(np.dot(trace.tokens, weights))] += 1
        calls += trace.calls
        accepted += trace.accepted
        rejections += trace.rejections
        if on_sample is not None:
            on_sample()
    law = pair.target.law(num_tokens).ravel()
    p_value, statistic, dof = goodness_of_fit(counts, law)
    return ExactnessReport(
        p_value=p_value,
        chi2=statistic,
        dof=dof,
        tv=float(0.5 * np.abs(counts / samples - law).sum()),
        mean_accepted=accepted / calls,
        acceptance_rate=pooled_acceptance(accepted, rejections),  # every call tests at least one token
        tokens_per_call=(accepted + calls) / calls,
        samples=samples,
        num_drafts=num_drafts,
        draft_length=_policy(draft_length).max_length,
        num_tokens=num_tokens,
    )

"""The exactness checker: decode many sequences from a known-law pair through a verifier and test
the law of their first N tokens against the target's, enumerated exactly.

Works with any object that has the contract's ``verify`` (see :mod:`draftverify.verify.base`),
so users can check their own verifiers. ``state`` is passed along across calls, as the ordinary
decoding loop does. ``draft_length`` is an L for every call, or a policy that chooses each call's
L from the past calls (``initial()``, ``choose(state)``, ``update(state, L, accepted, None)`` over a
hashable state, as :mod:`draftverify.engine.draft_length`'s policies); a call at L = 0 is the
engine's ``ar`` step, one token from the target, the verifier's state kept.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..rng import BranchingSource, categorical, inverse_cdf
from ..verify.acceptance import pooled_acceptance, rejected_tests
from ..verify.modifications import ModificationStack
from .enumerate import enumerate_outcomes
from .markov import KnownLawPair, random_pair

__all__ = [
    "ExactnessReport", "DecodeTrace", "FAILED", "INCONCLUSIVE", "PASSED", "check_exactness", "decode_known_law",
    "decode_known_laws",
    "detectable_tv", "draw_drafts", "exact_sequence_law", "goodness_of_fit",
]


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
    if isinstance(draft_length, numbers.Integral):
        return _FixedLength(draft_length, draft_length)
    if not all(hasattr(draft_length, name) for name in ("initial", "choose", "update", "max_length")):
        raise ValueError(f"draft_length: expected an int >= 1 or a draft-length policy (initial, choose, update, "
                         f"max_length), got {draft_length!r}")
    return draft_length


@dataclass(frozen=True)
class DecodeTrace:
    tokens: tuple[int, ...]  # the first num_tokens tokens
    calls: int  # target calls: verify calls, and a draft-length policy's L = 0 calls
    accepted: int  # draft tokens accepted over all calls
    rejections: int  # calls that ended with a correction token rather than a bonus token
    verified: int  # verify calls (L >= 1)


PASSED, FAILED, INCONCLUSIVE = "passed", "failed", "inconclusive"
MIN_EXPECTED = 5.0  # every bin of the chi-square test has at least this expected count (Cochran's rule)
POWER = 0.9  # the power at which ``detectable_tv`` is computed
LOCKSTEP = 256  # check_exactness decodes its samples this many at a time (decode_known_laws)


@dataclass(frozen=True)
class ExactnessReport:
    """Outcome of :func:`check_exactness`.

    ``p_value`` is the chi-square goodness-of-fit p-value of the empirical law of the first
    ``num_tokens`` tokens against the target's exact law, over bins of expected count >= 5 (rarer
    outcomes pooled, see :func:`goodness_of_fit`); an outcome of target probability 0 gives p = 0;
    NaN when the bins leave no degree of freedom (no test at all).

    ``status`` is ``"inconclusive"`` when the verifier was never called (a draft-length policy
    chose L = 0 at every call), else ``"failed"`` when p <= ``threshold``, ``"inconclusive"`` when
    the test cannot judge: no degree of freedom, or ``detectable_tv`` (the smallest total variation
    from the target the test detects with power 0.9 at level ``threshold``, see :func:`detectable_tv`)
    above ``detect_tv``; ``"passed"`` otherwise. ``reason`` says why in one sentence.
    """

    status: str
    reason: str
    p_value: float
    chi2: float
    dof: int
    detectable_tv: float  # smallest TV from the target detected with power 0.9 at level threshold
    detect_tv: float  # the TV the test must be able to detect to pass
    threshold: float  # the p-value at or below which the test fails
    tv: float  # total variation between the empirical and the exact law
    mean_accepted: float  # accepted draft tokens per verify call
    acceptance_rate: float  # accepted / (accepted + rejected): pooled over verified tokens (seed 002)
    tokens_per_call: float  # committed tokens per target call (block efficiency; a policy's L = 0 calls commit 1)
    samples: int
    num_drafts: int
    draft_length: int  # L, or the largest L of a draft-length policy
    num_tokens: int

    def passed(self) -> bool:
        """True only when the test could judge and the verifier's law fits the target's."""
        return self.status == PASSED


def draw_drafts(pair: KnownLawPair, prefix: list[int], num_drafts: int, length: int, source):
    """K i.i.d. draft continuations of ``prefix`` drawn from ``pair``'s draft, as a verifier takes
    them: tokens [K, L], draft_probs [K, L, V], target_probs [K, L+1, V] (float64), each draft's
    law at its depth in the call (:meth:`KnownLawPair.draft_conditional`, the row each token is
    drawn from). ``source`` is a BranchingSource (enumeration: every draft is a branch) or a numpy
    Generator (Monte Carlo). One call of :func:`_draw_calls`."""
    return _draw_calls(pair, [(prefix, length)], num_drafts, source)[0]


def _draw_calls(pair: KnownLawPair, calls: list[tuple[list[int], int]], num_drafts: int, source) -> list[tuple]:
    """:func:`draw_drafts` for several calls (prefix, L >= 1) at once: depth by depth, every draft
    still that long draws its token at that depth; with a numpy Generator, all of a depth's draws
    are one :func:`~draftverify.rng.inverse_cdf` over their rows (its uniforms in call, then draft
    order), with a BranchingSource one branch a row."""
    vocab = pair.vocab_size
    tokens = [np.zeros((num_drafts, length), dtype=np.int64) for _, length in calls]
    draft_probs = [np.zeros((num_drafts, length, vocab)) for _, length in calls]
    for depth in range(max(length for _, length in calls)):
        live = [(c, k) for c, (_, length) in enumerate(calls) if length > depth for k in range(num_drafts)]
        rows = np.stack([pair.draft_conditional(calls[c][0], tokens[c][k, :depth]) for c, k in live])  # [n, V]
        if isinstance(source, BranchingSource):
            picks = [source.categorical(torch.from_numpy(row)) for row in rows]
        else:
            picks = inverse_cdf(torch.from_numpy(rows), torch.from_numpy(source.random(len(live)))).tolist()
        for (c, k), row, pick in zip(live, rows, picks):
            draft_probs[c][k, depth], tokens[c][k, depth] = row, pick
    return [(torch.from_numpy(drafted), torch.from_numpy(probs),
             torch.from_numpy(np.stack([pair.target.conditionals(prefix, row) for row in drafted])))
            for (prefix, _), drafted, probs in zip(calls, tokens, draft_probs)]


def _call(verifier, pair: KnownLawPair, prefix: list[int], length: int, state, source,
          drafts: tuple | None) -> tuple[tuple[int, ...], Any, int]:
    """One call of the decoding loop: its tokens, the verifier's next state and the accepted count.
    L >= 1 drafted tokens (``drafts``, from :func:`_draw_calls`) go through the verifier; at L = 0
    (a draft-length policy's ``ar`` step) one token is drawn from the target's conditional and the
    state is kept."""
    if length == 0:
        row = pair.target.conditionals(prefix, [])[0]  # [V]
        return (categorical(torch.from_numpy(row), source),), state, 0
    result = _checked(verifier.verify(*drafts, generator=source, state=state))
    return tuple(int(t) for t in result.tokens), result.state, result.num_accepted


def decode_known_law(
    verifier, pair: KnownLawPair, num_drafts: int, draft_length: int | Any, num_tokens: int, source, draft_source=None
) -> DecodeTrace:
    """The ordinary decoding loop on a known-law pair until ``num_tokens`` tokens are committed.

    The verifier draws from ``source``; drafts from ``draft_source`` (a numpy Generator: faster for
    Monte Carlo), or from ``source`` too when that is a BranchingSource (enumeration)."""
    return decode_known_laws(verifier, pair, num_drafts, draft_length, num_tokens, 1, source, draft_source)[0]


def decode_known_laws(verifier, pair: KnownLawPair, num_drafts: int, draft_length: int | Any, num_tokens: int,
                      count: int, source, draft_source=None) -> list[DecodeTrace]:
    """``count`` independent decodings of :func:`decode_known_law`, in lockstep: each round, every
    decoding not yet done makes its next call, the drafts of all of them drawn together
    (:func:`_draw_calls`), then each goes through the verifier in turn, whose draws all come from
    ``source``. Each decoding's law is that of one run alone; only the order in which the sources'
    numbers are used differs. ``ValueError`` unless ``count`` is an int >= 1."""
    if not isinstance(count, numbers.Integral) or isinstance(count, bool) or count < 1:
        raise ValueError(f"count must be an int >= 1, got {count!r}")
    draft_source = source if draft_source is None else draft_source
    policy = _policy(draft_length)
    prefixes: list[list[int]] = [[] for _ in range(count)]
    states, length_states = [None] * count, [policy.initial()] * count
    calls, accepted, rejections, verified = ([0] * count for _ in range(4))
    live = list(range(count))
    while live:
        lengths = {i: max(policy.choose(length_states[i]), ModificationStack.min_draft_length(states[i])) for i in live}
        drafting = [i for i in live if lengths[i]]
        drawn = dict(zip(drafting, _draw_calls(pair, [(prefixes[i], lengths[i]) for i in drafting], num_drafts,
                                               draft_source) if drafting else []))
        for i, length in lengths.items():
            tokens, states[i], kept = _call(verifier, pair, prefixes[i], length, states[i], source, drawn.get(i))
            prefixes[i].extend(tokens)
            length_states[i] = policy.update(length_states[i], length, kept, None)
            calls[i] += 1
            verified[i] += length > 0
            accepted[i] += kept
            rejections[i] += rejected_tests([kept], length)
        live = [i for i in live if len(prefixes[i]) < num_tokens]
    return [DecodeTrace(tuple(prefixes[i][:num_tokens]), calls[i], accepted[i], rejections[i], verified[i])
            for i in range(count)]


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
    verifier = _resolve(verifier)
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
            drafts = draw_drafts(pair, list(prefix), num_drafts, length, source) if length else None
            tokens, new_state, kept = _call(verifier, pair, list(prefix), length, state, source, drafts)
            return tokens, _state_key(new_state), kept

        for (tokens, new_key, accepted), branch_prob in enumerate_outcomes(one_call).items():
            entry = (prefix + tokens, new_key, policy.update(length_state, length, accepted, None))
            frontier[entry] = frontier.get(entry, 0.0) + prob * branch_prob
    return law


def _bins(law: np.ndarray, total: float) -> np.ndarray:
    """The bin of each cell of ``law`` (flat) for a chi-square test on ``total`` samples: a cell of
    expected count >= 5 is a bin of its own, the rarer ones are pooled into one bin, and that bin,
    if its expected count is still below 5, joins the smallest kept one. Every bin then has an
    expected count >= 5 unless there is a single bin (``total`` < 5)."""
    expected = law * total
    big = expected >= MIN_EXPECTED
    bins = np.where(big, np.cumsum(big) - 1, int(big.sum()))  # kept cells 0..m-1, pooled cells m
    if big.any() and expected[~big].sum() < MIN_EXPECTED:
        kept = np.flatnonzero(big)
        bins[~big] = bins[kept[np.argmin(expected[kept])]]
    return bins


def goodness_of_fit(counts: np.ndarray, law: np.ndarray) -> tuple[float, float, int]:
    """Chi-square test of ``counts`` against ``law`` (flat arrays) over the bins of :func:`_bins`
    (every expected count >= 5): (p_value, statistic, dof). An observed outcome of probability 0
    gives (0, inf, 0); bins leaving no degree of freedom give p = NaN: there is no test, and a NaN
    compares false with every threshold."""
    from scipy import stats  # scipy on use: the command line imports this module for every command

    total = counts.sum()
    if np.any(counts[law == 0] > 0):
        return 0.0, float("inf"), 0
    bins = _bins(law, total)
    observed = np.bincount(bins, weights=counts)
    expected = np.bincount(bins, weights=law) * total
    dof = len(expected) - 1
    if dof < 1:
        return float("nan"), 0.0, 0
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(statistic, dof)), statistic, dof


def detectable_tv(law: np.ndarray, samples: int, threshold: float, power: float = POWER) -> float:
    """The smallest total variation from ``law`` that :func:`goodness_of_fit` on ``samples`` draws
    detects with probability ``power`` at level ``threshold``, for every alternative law (1 when it
    cannot detect any).

    A conservative bound, in two parts. (1) Over the test's bins, an alternative at TV delta shifts
    each bin's probability by d_b with sum |d_b| = 2 delta, and the chi-square statistic is
    approximately noncentral chi-square with dof degrees of freedom and noncentrality
    lambda = n sum d_b^2 / P_b (the local-alternative approximation, Mitra 1958), which by
    Cauchy-Schwarz is at least 4 n delta^2. The power is increasing in lambda, so every alternative
    at binned TV >= delta* = sqrt(lambda* / 4n) is detected, lambda* solving
    P(ncx2(dof, lambda*) > chi2 quantile at 1 - threshold) = power. (2) Within a bin of several
    cells an alternative can move mass unseen; it loses at most the bin's probability, so the TV
    over cells is at most the binned TV plus the probability of the bins of several cells.
    The bound is delta* + that probability, at most 1.
    """
    bins = _bins(law, samples)
    mass = np.bincount(bins, weights=law)
    dof = len(mass) - 1
    if dof < 1:
        return 1.0
    shared = np.bincount(bins) > 1  # bins holding several cells
    from scipy import optimize, stats  # on use, as in goodness_of_fit

    critical = stats.chi2.isf(threshold, dof)
    noncentrality = optimize.brentq(lambda nc: stats.ncx2.sf(critical, dof, nc) - power, 0.0, 1e9)
    return float(min(1.0, np.sqrt(noncentrality / (4 * samples)) + mass[shared].sum()))


def _verdict(p_value: float, dof: int, detectable: float, detect_tv: float, threshold: float,
             verified: int) -> tuple[str, str]:
    """(status, reason) of a checker run over ``verified`` verify calls; see :class:`ExactnessReport`."""
    if not verified:  # a draft-length policy took L = 0 at every call: the target's own law, nothing judged
        return INCONCLUSIVE, "the verifier was never called: the draft-length policy chose L = 0 at every call"
    if p_value <= threshold:
        return FAILED, f"p = {p_value:.3g} <= {threshold:g}: the decoded law is not the target's"
    if dof < 1:
        return INCONCLUSIVE, ("no degree of freedom left once outcomes of expected count < 5 are pooled: "
                              "more samples or fewer tokens (V ** num_tokens outcomes)")
    if detectable > detect_tv:
        return INCONCLUSIVE, (f"too few samples: the test detects only a TV >= {detectable:.3f} from the target "
                              f"(power {POWER:g}), not {detect_tv:g}: more samples or fewer tokens")
    return PASSED, f"p = {p_value:.3g} > {threshold:g}, and any TV >= {detectable:.3f} would be detected (power {POWER:g})"


def check_exactness(
    verifier,
    pair: KnownLawPair | None = None,
    *,
    num_drafts: int = 1,
    draft_length: int | Any = 2,
    num_tokens: int = 4,
    samples: int = 20000,
    seed: int = 0,
    threshold: float = 1e-3,
    detect_tv: float = 0.1,
    on_sample: Callable[[], None] | None = None,
) -> ExactnessReport:
    """Decode ``samples`` sequences through ``verifier`` and test their law against the target's.

    ``verifier`` is any object with the contract's ``verify``, or a name in the method grammar
    (``"bv"``, ``"submaximal(fraction=0.5)"``) resolved by :func:`draftverify.get_verifier`.
    ``pair`` defaults to ``random_pair(vocab_size=4, order=2, seed=seed)``. The p-value is exact
    for a correct verifier up to the chi-square approximation; a biased verifier drives it to 0 as
    ``samples`` grows. The report passes only when p > ``threshold`` and the test could have seen
    a law at total variation ``detect_tv`` from the target (power 0.9); a test that cannot judge
    is ``"inconclusive"``, never passed (see :class:`ExactnessReport`). The sequences are decoded
    ``LOCKSTEP`` at a time (:func:`decode_known_laws`); ``on_sample``, if given, is called once for
    each of them as its group finishes (progress).
    """
    verifier = _resolve(verifier)
    if pair is not None and not isinstance(pair, KnownLawPair):
        raise ValueError(f"pair: expected a KnownLawPair (e.g. random_pair(vocab_size=4)), got {type(pair).__name__}")
    for name, value in (("samples", samples), ("num_drafts", num_drafts), ("draft_length", _policy(draft_length).max_length),
                        ("num_tokens", num_tokens)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64 - 1], got {seed!r}")
    if not (isinstance(threshold, numbers.Real) and 0 < threshold < 1):
        raise ValueError(f"threshold must be a p-value in (0, 1), got {threshold!r}")
    if not (isinstance(detect_tv, numbers.Real) and 0 < detect_tv <= 1):
        raise ValueError(f"detect_tv must be a total variation in (0, 1], got {detect_tv!r}")
    pair = pair if pair is not None else random_pair(vocab_size=4, order=2, seed=seed)
    if pair.vocab_size**num_tokens > 200_000:
        raise ValueError("V ** num_tokens is too large to enumerate the law; lower num_tokens")
    generator = torch.Generator().manual_seed(seed)
    draft_rng = np.random.default_rng(seed)
    vocab = pair.vocab_size
    counts = np.zeros(vocab**num_tokens)
    calls = accepted = rejections = verified = 0
    weights = vocab ** np.arange(num_tokens - 1, -1, -1)
    for start in range(0, samples, LOCKSTEP):
        for trace in decode_known_laws(verifier, pair, num_drafts, draft_length, num_tokens,
                                       min(LOCKSTEP, samples - start), generator, draft_rng):
            counts[int(np.dot(trace.tokens, weights))] += 1
            calls += trace.calls
            verified += trace.verified
            accepted += trace.accepted
            rejections += trace.rejections
            if on_sample is not None:
                on_sample()
    law = pair.target.law(num_tokens).ravel()
    p_value, statistic, dof = goodness_of_fit(counts, law)
    detectable = detectable_tv(law, samples, threshold)
    status, reason = _verdict(p_value, dof, detectable, detect_tv, threshold, verified)
    return ExactnessReport(
        status=status,
        reason=reason,
        p_value=p_value,
        chi2=statistic,
        dof=dof,
        detectable_tv=detectable,
        detect_tv=float(detect_tv),
        threshold=float(threshold),
        tv=float(0.5 * np.abs(counts / samples - law).sum()),
        mean_accepted=accepted / max(verified, 1),
        acceptance_rate=float("nan") if not verified else pooled_acceptance(accepted, rejections),  # L = 0 calls test nothing
        tokens_per_call=(accepted + calls) / calls,
        samples=samples,
        num_drafts=num_drafts,
        draft_length=_policy(draft_length).max_length,
        num_tokens=num_tokens,
    )


def _resolve(verifier):
    """A verifier object: a name in the method grammar through ``get_verifier``; anything without
    a callable ``verify`` is refused."""
    if isinstance(verifier, str):
        from ..verify.base import get_verifier

        return get_verifier(verifier)
    if not callable(getattr(verifier, "verify", None)):
        raise ValueError(f"verifier: expected a verifier name or an object with the contract's verify(draft_tokens, "
                         f"draft_probs, target_probs, generator, state), got {type(verifier).__name__}")
    return verifier


def _checked(result):
    """``result`` of a ``verify`` call, refused unless it has the contract's fields."""
    missing = [name for name in ("tokens", "num_accepted", "state") if not hasattr(result, name)]
    if missing:
        raise ValueError(f"verifier: verify returned {type(result).__name__}, not a VerifyResult "
                         f"(no {', '.join(missing)})")
    if not result.tokens:
        raise ValueError("verify committed no token (the contract requires at least one)")
    return result

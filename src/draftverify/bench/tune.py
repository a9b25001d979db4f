"""`draftverify tune`: predict tokens/s of every exact method, K and L from one pass over the pair,
recommend one, and (``verify``) measure the best few beside the prediction.

1. Paths: each prompt's continuation of N tokens sampled from the (warped) target, then one forward
   of target and draft over it: the warped distributions at every position, reduced at once to what
   the predictions need (the ratio D(y_t) / T(y_t) at the sampled token, the draft's probability of
   it, each plug-in method's acceptance of one position with K' = 1..K drafts, K-SEQ's and
   multidraft-bv's law of the token and the drafts it keeps alive). A draft whose
   law depends on the depth within a step (a feature draft: ``LanguageModel.depth_dependent``) is
   recorded at every depth d = 1..L_max as the engine's draft phase has it (:func:`depth_laws`),
   and the predictions read the depth of each position within its step.
2. Tokens per target call (:mod:`draftverify.theory.tuning`): ``sd``, ``bv``, ``submaximal``, ``kseq``
   and ``multidraft-bv`` unbiased from the paths (the block boundaries given a path are a Markov chain;
   for the multi-draft ones with the law of how many drafts stay alive); ``gbv`` by a renewal
   approximation of its per-call E[tau]; ``ot`` (and ``multidraft-bv(selection=ot)``) by the plug-in
   product of one-position acceptance along target prefixes (biased: an accepted draft prefix does
   not follow the target; for ``sd`` both are printed, the gap is that bias). Standard errors are
   over prompts.
3. Costs (:class:`draftverify.theory.tuning.StepCosts`): the model calls as ``bench model-cost``
   measures them (:func:`.model_cost.call_costs`, every L interleaved: a step's L draft forwards on K rows with one crop
   after them, a target call scoring K drafts of L tokens, cache upkeep included), the verifier's own
   time on the pass's distributions, and what the engine spends beside them, from a short decoding
   at each L (the first method of each K): the rest of a step as a line a + b L (first call on the
   pending tokens, warping and sampling, the verifier's bookkeeping, the commit) and the prefill;
   predicted tokens/s = k / (L t_d + t_T(L) + t_v(L) + a + b L + k t_prefill / N). The line is
   fitted to the engine's steps less the calls timed alone and less the verifier's time as the
   engine measured it on those same steps, so that one verifier's timing (a handful of windows,
   open to a load spike) prices that verifier only: taken from its isolated timing, a spike had made
   the line, hence another method's predicted step, negative (3 of 30 runs beside two busy loops).
The recommendation is the best setting by an unbiased estimate, or ``ar`` where no drafting
setting is predicted to beat it (then ``draft_length="auto"``, which may take steps of the target
alone, is the way to keep a draft at hand); a better one by an approximation is named beside it
(``--verify`` measures both).

4. ``verify``: the best settings, the recommended method (the best drafting one where ``ar`` is
   recommended) with ``draft_length="auto"`` and ``"heuristic"``, and ``ar`` decoded on the same
   prompts (as ``bench speed`` runs them, EOS ignored), measured beside the prediction. Step 3
   then runs again and the prediction from those costs stands beside the first
   (``error_after``): on a shared machine the clock can move over the decodings' minutes, and the
   two errors bracket that drift.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..engine import PREFIX_DRAFT_ONLY, generate, generate_batch, refuses_draft
from ..engine.pending import pending_tokens
from ..models.base import LanguageModel
from ..probs import check_warping, warp
from ..theory import kseq_position_law, maximal_acceptance, selection_position_law
from ..theory.tuning import (
    StepCosts,
    expected_calls,
    fit_overhead,
    gbv_expected_accepted,
    kseq_path_survival,
    multidraft_bv_path_survival,
    path_survival,
    plug_in_survival,
    predicted_tokens_per_second,
    tokens_per_call,
)
from ..verify import get_verifier, parse_method
from ..verify.multidraft_bv import sequential_selection
from .compare import run_spec
from .model_cost import call_costs

__all__ = ["METHODS", "Costs", "PathRecord", "TuneSettings", "check_pair", "depth_laws", "measure", "plot", "predict",
           "record_along", "record_paths", "tune"]

METHODS = ("sd", "bv", "gbv", "kseq", "multidraft-bv")
"""The exact methods ``tune`` compares by default (less ``gbv`` for a draft whose law depends on its
depth within a step: :meth:`TuneSettings.for_draft`). ``submaximal`` is exact and predicted too when
named, never by default: it accepts (1 - fraction) of what ``sd`` accepts at the same cost. ``ot`` with an exact solver
(``"ot(solver=maxflow-cs)"``) may be added at small vocabularies: at the embedded pair's 8192
tokens its network exceeds the solvers' limit (49.7M arcs > 20M at K = 2)."""

_SINGLE = ("sd", "bv", "gbv", "submaximal")  # methods of one draft
UNBIASED = "path (unbiased)"
KSEQ_LAW = "kseq-law"  # PathRecord.acceptance key of K-SEQ's position law (theory.kseq_position_law), flattened
SELECTION_LAW = "selection-law"  # and of multidraft-bv's sequential selection (theory.selection_position_law)
_LOGITS_BUDGET = 2**26  # target logits held at once while recording paths per depth (256 MB of float32)


@dataclass(frozen=True)
class TuneSettings:
    """What ``tune`` predicts over and how it measures."""

    methods: tuple[str, ...] | None = None  # None: METHODS that the draft runs exactly (for_draft)
    num_drafts: tuple[int, ...] = (2, 4)  # K of the multi-draft methods
    max_draft_length: int = 8  # L = 1..max_draft_length
    max_new_tokens: int = 128  # N, tokens sampled per prompt
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repeats: int = 30  # timed calls per model-call cost (verifiers: once per window of an answer)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.methods is not None and not self.methods:
            raise ValueError("methods: give at least one")
        for method in self.methods or ():
            spec = parse_method(method)
            verifier = get_verifier(spec.name, **spec.options)  # unknown names and options raise here
            if not (verifier.exact or (spec.name == "ot" and verifier.solver != "gr")):  # ot is exact but with gr
                raise ValueError(f"methods: {method!r} is not exact (tune's estimators assume the target's law)")
        if self.max_draft_length < 1 or self.max_new_tokens < 2 or self.repeats < 1:
            raise ValueError("max_draft_length and repeats must be >= 1, max_new_tokens >= 2")
        if not self.num_drafts or min(self.num_drafts) < 2:
            raise ValueError(f"num_drafts: the multi-draft methods' K must be >= 2, got {self.num_drafts}")
        check_warping(self.temperature, self.top_k, self.top_p)

    def for_draft(self, draft: LanguageModel) -> TuneSettings:
        """These settings with ``methods`` resolved for ``draft``. A verifier exact only for a draft
        whose law is a function of the prefix (``gbv``: ``Verifier.prefix_draft_only``) cannot run
        with a draft whose law depends on its depth within a step (``draft.depth_dependent``): None
        gives :data:`METHODS` without it, naming it is a ValueError."""

        def refused(method: str) -> bool:
            return refuses_draft(get_verifier(parse_method(method).name), draft)

        if self.methods is None:
            return replace(self, methods=tuple(m for m in METHODS if not refused(m)))
        if bad := [m for m in self.methods if refused(m)]:
            raise ValueError(f"methods: {', '.join(bad)} is {PREFIX_DRAFT_ONLY}")
        return self

    def settings(self) -> list[tuple[str, int]]:
        """(method, K) pairs: one draft for sd, bv, gbv, submaximal; each K for the others."""
        if self.methods is None:
            raise ValueError("methods: None is resolved for a draft by for_draft(draft) first")
        return [(m, 1) if parse_method(m).name in _SINGLE else (m, k)
                for m in self.methods for k in ((1,) if parse_method(m).name in _SINGLE else self.num_drafts)]


@dataclass(frozen=True)
class PathRecord:
    """One prompt's target-sampled continuation y_1..y_N, reduced: ``ratios`` = D(y_t) / T(y_t),
    ``draft_probs`` = D(y_t), ``acceptance[name]`` one-position acceptance with K' = 1..K drafts
    (``acceptance[KSEQ_LAW]``, ``acceptance[SELECTION_LAW]``: position laws, K K values). For a
    draft whose law is the same at every depth (``LanguageModel.depth_dependent`` False) they are
    [N], [N] and [N, K]; otherwise per depth, [N, L], [N, L] and [N, L, K], entry [t, d - 1] the
    draft's law at t as the d-th drafted position of a step (:mod:`draftverify.theory.tuning`;
    entries with t < d - 1, where no step starts, hold 1 (ratios, draft probabilities) or 0 and are
    never read). ``target_first``: the engine's first step is the target's alone (a draft that reads
    the target's hidden states, ``LanguageModel.reads_target``): one call for y_1, whose entries are
    not recorded (1 or 0), and steps from y_2 on (:meth:`drafted`)."""

    ratios: np.ndarray
    draft_probs: np.ndarray
    acceptance: dict[str, np.ndarray] = field(default_factory=dict)
    target_first: bool = False

    def drafted(self) -> PathRecord:
        """The record of the positions the engine's drafting steps cover: all, or all but the first
        where ``target_first`` (the estimators then read y_2 as the first start)."""
        if not self.target_first:
            return self
        return PathRecord(self.ratios[1:], self.draft_probs[1:], {name: a[1:] for name, a in self.acceptance.items()})


def _warp(logits: torch.Tensor, settings: TuneSettings) -> torch.Tensor:
    """The settings' temperature, top-k and top-p on ``logits`` [..., V], in float64."""
    return warp(logits.double(), settings.temperature, settings.top_k, settings.top_p)


def _warped(target: LanguageModel, draft: LanguageModel, sequence: list[int], count: int,
            settings: TuneSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's and the draft's warped conditionals [count, V] of the last ``count`` tokens of
    ``sequence``, teacher-forced: each row is the draft's law at a step's first drafted position
    (a feature draft reads the target's hidden states along the whole sequence; for its later
    depths see :func:`depth_laws`)."""
    tokens = torch.tensor([sequence[:-1]])
    target_cache = target.new_cache(1)
    target_logits = target.forward(target_cache, tokens, None, count)[0]  # [count, V]
    draft_logits = draft.forward(draft.new_cache(1, target_cache), tokens, None, count)[0]
    return _warp(target_logits, settings), _warp(draft_logits, settings)


def depth_laws(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], paths: list[list[int]],
               settings: TuneSettings) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """For each step start s along ``paths`` (B continuations of N tokens after ``prompts``), last
    to first: (s, the target's warped laws [B, D, V] of y_s..y_{s+D-1}, the draft's warped laws
    [B, D, V] there at depths 1..D), D = min(L_max, N - s): what the engine's draft phase computes
    when a step starts at s, forced along the path. The engine's state before that step is
    replayed with the model API: the target holds every committed token but the pending one
    (P + s - 1 for a prompt of P tokens; none at the first step, which has not scored the prompt
    yet), the draft what it held of those; the draft feeds the rest, then y_s, ..., y_{s+D-2} one
    at a time. A draft that reads the target's hidden states never drafts at s = 0 (the engine's
    first step is the target's alone): its starts are 1..N - 1. The target scores the paths once;
    going from the last start to the first, each start only crops the caches back."""
    count = len(paths[0])
    if any(len(path) != count for path in paths) or len(paths) != len(prompts):
        raise ValueError("paths: expected one continuation per prompt, all of one length")
    sequences, starts = [prompt + path for prompt, path in zip(prompts, paths)], [len(prompt) for prompt in prompts]
    target_cache = target.new_cache(len(prompts))
    tokens, valid = pending_tokens([sequence[:-1] for sequence in sequences], [0] * len(sequences))  # left-padded
    target_logits = target.forward(target_cache, tokens, valid, count)  # [B, N, V]
    draft_cache = draft.new_cache(len(prompts), target_cache)
    for s in reversed(range(1 if draft.reads_target else 0, count)):
        held = [start + s - 1 if s else 0 for start in starts]
        target.crop(target_cache, held)
        draft.crop(draft_cache, [min(h, limit) for h, limit in zip(draft_cache.held, held)])
        chunk, valid = pending_tokens([sequence[: start + s] for sequence, start in zip(sequences, starts)],
                                      draft_cache.held)
        laws = []
        for depth in range(min(settings.max_draft_length, count - s)):
            laws.append(draft.forward(draft_cache, chunk, valid, 1)[:, 0])  # [B, V]
            chunk, valid = torch.tensor([[path[s + depth]] for path in paths]), None
        yield s, _warp(target_logits[:, s : s + len(laws)], settings), _warp(torch.stack(laws, 1), settings)


def _reduce(target_probs: np.ndarray, draft_probs: np.ndarray, tokens: np.ndarray, names: set[str],
            max_k: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Rows [R, V] of target and draft at R positions whose path tokens are ``tokens`` [R]:
    ratios [R], draft probabilities [R], each plug-in method's acceptance [R, K'] and the position
    laws of ``kseq`` and ``multidraft-bv`` [R, K K] (:data:`KSEQ_LAW`, :data:`SELECTION_LAW`)."""
    at = (np.arange(len(tokens)), tokens)
    acceptance = {"sd": maximal_acceptance(target_probs, draft_probs)[:, None]}
    if "kseq" in names:  # not an acceptance: K-SEQ's law at the path token, [R, K, K] flattened
        acceptance[KSEQ_LAW] = kseq_position_law(target_probs, draft_probs, tokens, max_k).reshape(len(tokens), -1)
    if "multidraft-bv" in names:
        acceptance[SELECTION_LAW] = _selection_laws(target_probs, draft_probs, tokens, max_k).reshape(len(tokens), -1)
    if "ot" in names:
        from ..ot import optimal_acceptance  # the OT package (scipy) on use: the command line imports this module

        acceptance["optimal"] = np.array([[optimal_acceptance(t, d, k) for k in range(1, max_k + 1)]
                                          for t, d in zip(target_probs, draft_probs)])
    return draft_probs[at] / target_probs[at], draft_probs[at], acceptance


def _estimator_input(method: str) -> str:
    """What a method's estimate reads from the paths: its name, or "ot" for the plug-in of alpha*(K)
    (``ot``, ``multidraft-bv(selection=ot)``)."""
    spec = parse_method(method)
    return "ot" if spec.name == "ot" or spec.options.get("selection", "sequential") == "ot" else spec.name


def _selection_laws(target_probs: np.ndarray, draft_probs: np.ndarray, tokens: np.ndarray, max_k: int) -> np.ndarray:
    """``multidraft-bv``'s selection law at the path tokens [R, K, K] (theory.selection_position_law
    with its sequential rule, :func:`~draftverify.verify.multidraft_bv.sequential_selection`, per row
    and count m = 1..K; one candidate is selected whatever its rule says)."""
    rows = np.arange(len(tokens))
    t_y, d_y = target_probs[rows, tokens], draft_probs[rows, tokens]
    laws = np.zeros((len(tokens), max_k, max_k))
    for m in range(1, max_k + 1):
        taken, mass = np.zeros(len(tokens)), np.zeros(len(tokens))
        if m > 1:
            for r, (t, d) in enumerate(zip(target_probs, draft_probs)):
                accept = sequential_selection(torch.from_numpy(t), torch.from_numpy(d), m)[0].numpy()
                taken[r], mass[r] = accept[tokens[r]], d @ accept
        laws[:, m - 1, :m] = selection_position_law(t_y, d_y, taken, mass, m, first_if_none=True)
    return laws


def record_along(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], paths: list[list[int]],
                 settings: TuneSettings) -> list[PathRecord]:
    """A :class:`PathRecord` of each continuation in ``paths`` (one length) after its prompt: one
    teacher-forced pass per prompt, or, for a depth-dependent draft, the prompts together per depth
    (:func:`depth_laws`), each step start's rows reduced at once (no [N, L, V] is kept)."""
    settings = settings.for_draft(draft)
    names, max_k = {_estimator_input(m) for m in settings.methods}, max(settings.num_drafts)
    if not draft.depth_dependent:
        return [PathRecord(*_reduce(*(rows.numpy() for rows in _warped(target, draft, prompt + path, len(path), settings)),
                                    np.array(path), names, max_k), target_first=draft.reads_target)
                for prompt, path in zip(prompts, paths)]
    tokens = np.array(paths)  # [B, N]
    rows, count, depths = len(paths), tokens.shape[1], settings.max_draft_length
    ratios, draft_probs, acceptance = np.ones((rows, count, depths)), np.ones((rows, count, depths)), {}
    for s, target_laws, draft_laws in depth_laws(target, draft, prompts, paths, settings):
        size = draft_laws.shape[1]
        positions = np.arange(s, s + size)  # depth d at position s + d - 1
        at = (slice(None), positions, positions - s)
        ratio, prob, accept = _reduce(target_laws.flatten(0, 1).numpy(), draft_laws.flatten(0, 1).numpy(),
                                      tokens[:, positions].reshape(-1), names, max_k)
        ratios[at], draft_probs[at] = ratio.reshape(rows, size), prob.reshape(rows, size)
        for name, values in accept.items():
            if name not in acceptance:
                acceptance[name] = np.zeros((rows, count, depths, values.shape[1]))
            acceptance[name][at] = values.reshape(rows, size, -1)
    return [PathRecord(ratios[b], draft_probs[b], {name: a[b] for name, a in acceptance.items()}, draft.reads_target)
            for b in range(rows)]


def record_paths(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]],
                 settings: TuneSettings) -> list[PathRecord]:
    """Step 1 of the module doc: the paths sampled together, then recorded (:func:`record_along`) in
    groups of prompts whose target logits take at most ``_LOGITS_BUDGET`` floats."""
    settings = settings.for_draft(draft)
    check_pair(target, draft, prompts, settings.max_new_tokens)
    runs = generate_batch(target, None, prompts, "ar", max_new_tokens=settings.max_new_tokens, seed=settings.seed,
                          temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, ignore_eos=True)
    group = max(1, _LOGITS_BUDGET // (settings.max_new_tokens * target.vocab_size))
    return [record for i in range(0, len(prompts), group)
            for record in record_along(target, draft, prompts[i : i + group], [r.tokens for r in runs[i : i + group]],
                                       settings)]


def check_pair(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], max_new_tokens: int) -> None:
    """Bad input as ``ValueError``: different vocabularies, no prompts, a prompt that does not fit."""
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"the draft's vocabulary ({draft.vocab_size} tokens) differs from the target's "
                         f"({target.vocab_size}): draft and target must share one tokenizer")
    if not prompts:
        raise ValueError("prompts: none given")
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ValueError(f"prompt {i} encodes to no tokens")
        for model in (target, draft):
            limit = getattr(model, "max_length", None)
            if limit is not None and len(prompt) + max_new_tokens > limit:
                raise ValueError(f"prompt {i} has {len(prompt)} tokens: with max_new_tokens = {max_new_tokens} it "
                                 f"exceeds the context of {limit} tokens")


@dataclass(frozen=True)
class Costs:
    """Seconds: ``draft[K][L]`` a step's L draft forwards on K rows (one crop after them, as the
    engine drafts; ``draft[K][0]``: one forward and its crop), ``target[K][L]`` one target call scoring K
    drafts of L (``target[K][0]``: one token, ``ar``), ``verify[(method, K, L)]`` one verifier
    call; ``overhead[K][L]`` the rest of a step with K drafts of L as the engine runs it and
    ``prefill[K]`` its prompt's first calls (:func:`.theory.tuning.fit_overhead` on short decodings);
    ``ar_step`` and ``ar_prefill`` the same for ``ar`` (its step's wall time and its first call)."""

    draft: dict[int, list[float]]
    target: dict[int, list[float]]
    verify: dict[tuple[str, int, int], float]
    overhead: dict[int, tuple[float, ...]]
    prefill: dict[int, float]
    ar_step: float
    ar_prefill: float

    @property
    def one_token(self) -> float:
        """t_T(0): the target's one-token call (``ar``'s step)."""
        return self.target[min(self.target)][0]

    def step_costs(self, method: str, num_drafts: int) -> StepCosts:
        """The terms of :class:`.theory.tuning.StepCosts` for ``method`` with K = ``num_drafts``."""
        k = num_drafts
        verify = [0.0] + [self.verify[method, k, length] for length in range(1, len(self.draft[k]))]
        return StepCosts(tuple(self.draft[k]), tuple(self.target[k]), tuple(verify), self.overhead[k], self.prefill[k])


def _time_verifier(method: str, k: int, length: int, target_rows: torch.Tensor, draft_rows: torch.Tensor,
                   settings: TuneSettings, generator: torch.Generator) -> float:
    """Mean seconds of ``method``'s verifier on K drafts of L over every window of L + 1 consecutive
    positions of the pass (``target_rows``, ``draft_rows`` [W, V]), one call each on fresh drafts
    sampled there. A verifier's time can depend on its drafts (how far they are accepted, which
    branch of its algorithm runs: for multidraft-bv, how many levels the drafts agree on, each a
    selection over the vocabulary), and a step's expected cost is the mean over the positions a
    decoding meets: one draft timed three times had priced multidraft-bv at L = 6 and 7 twice L = 5's,
    fresh drafts at one window (the first tokens of one answer) L = 4, 6 and 7 a quarter to a third
    too high, and five windows L = 5 a third too low."""
    spec = parse_method(method)
    verifier = get_verifier(spec.name, **{"validate": False, **spec.options})
    times = []
    for start in range(len(target_rows) - length):
        rows = draft_rows[start : start + length].expand(k, length, -1).contiguous()
        targets = target_rows[start : start + length + 1].expand(k, length + 1, -1).contiguous()
        tokens = torch.stack([torch.multinomial(rows[j], 1, generator=generator)[:, 0] for j in range(k)])
        begin = time.perf_counter()
        verifier.verify_trusted(tokens, rows, targets, generator)
        times.append(time.perf_counter() - begin)
    return statistics.fmean(times)


def _calibrate(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], spec: str, k: int,
               model_seconds: list[float], settings: TuneSettings) -> tuple[tuple[float, ...], float]:
    """Step 3's engine terms for K = ``k``: ``spec`` decoded briefly at each L (prompts in turn);
    per L the mean wall time of a step after the first (the time outside the steps' calls spread
    over all steps) less the verifier's time the engine measured on those steps, against
    ``model_seconds[L]`` (the draft and target calls timed alone), and the first step's excess (the
    prefill; with a draft that reads the target's hidden states the first two steps', the target's
    alone, then the draft's first pass over the prompt). Returns (overhead [L_max + 1], prefill)."""
    head = 2 if draft.reads_target else 1  # the steps that read the prompt
    lengths, engine, prefills = [], [], []
    tokens = min(settings.max_new_tokens, 4 * (settings.max_draft_length + 1))
    for length in range(1, settings.max_draft_length + 1):
        prompt = prompts[(length - 1) % len(prompts)]
        result = run_spec(spec, target, {"draft": draft}, prompt, max_new_tokens=tokens, draft_length=length,
                          temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                          ignore_eos=True, seed=settings.seed + length).result
        calls = [s.draft_seconds + s.target_seconds + s.verify_seconds for s in result.steps]
        if len(calls) <= head:
            continue
        outside = (result.seconds - sum(calls)) / len(calls)
        lengths.append(length)
        verify = statistics.fmean(s.verify_seconds for s in result.steps[head:])  # each method's is priced alone
        engine.append(statistics.fmean(calls[head:]) + outside - verify)
        prefills.append(sum(calls[:head]) - head * statistics.fmean(calls[head:]))
    if not lengths:
        raise ValueError(f"max_new_tokens = {settings.max_new_tokens}: too few for {head + 1} steps of {spec}")
    overhead = fit_overhead(lengths, engine, [model_seconds[length] for length in lengths], settings.max_draft_length)
    return overhead, max(statistics.fmean(prefills), 0.0)


def measure_costs(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], settings: TuneSettings,
                  target_rows: torch.Tensor, draft_rows: torch.Tensor) -> Costs:
    """Step 3 of the module doc. ``target_rows``, ``draft_rows`` [W, V] (W > L_max): the laws at W
    consecutive positions of an answer, on whose windows each verifier is timed with drafts sampled
    from them (:func:`_time_verifier`)."""
    settings = settings.for_draft(draft)
    draft_seconds, target_seconds = {}, {}
    lengths = list(range(1, settings.max_draft_length + 1))
    for k in sorted({k for _, k in settings.settings()}):
        # every L in one run, calls interleaved round by round: a transient slows every L alike
        # instead of one L's block of repeats (it had priced one L a third above its neighbours)
        costs = call_costs({"pair": (target, draft)}, prompts[0], repeats=settings.repeats, draft_lengths=lengths,
                           accepted=1, num_drafts=k, seed=settings.seed)["pair"]
        target_seconds[k] = [costs["target_1"]] + [costs[f"target_{length + 1}"] for length in lengths]
        draft_seconds[k] = [costs["draft_1"]] + [costs[f"draft_phase_{length}"] for length in lengths]
    generator = torch.Generator().manual_seed(settings.seed)
    verify_seconds = {(method, k, length): _time_verifier(method, k, length, target_rows, draft_rows, settings, generator)
                      for method, k in settings.settings() for length in range(1, settings.max_draft_length + 1)}
    overhead, prefill = {}, {}
    for k in draft_seconds:  # one method per K runs the engine: the first of the settings
        method = next(m for m, kk in settings.settings() if kk == k)
        spec = _spec(dict(method=method, num_drafts=k))
        model = [draft_seconds[k][length] + target_seconds[k][length] for length in range(settings.max_draft_length + 1)]
        overhead[k], prefill[k] = _calibrate(target, draft, prompts, spec, k, model, settings)
    ar = generate(target, None, prompts[0], "ar", max_new_tokens=min(64, settings.max_new_tokens), ignore_eos=True,
                  temperature=settings.temperature, seed=settings.seed)
    ar_prefill = ar.steps[0].target_seconds  # the prompt's forward
    return Costs(draft_seconds, target_seconds, verify_seconds, overhead, prefill,
                 (ar.seconds - ar_prefill) / (len(ar.steps) - 1), ar_prefill)


def predict(paths: list[PathRecord], costs: Costs, settings: TuneSettings) -> list[dict[str, Any]]:
    """Step 2 and the predicted tokens/s, one row per (method, K, L), best first; then ``ar``."""
    tokens = np.array([len(p.ratios) for p in paths], dtype=float)
    first = np.array([float(p.target_first) for p in paths])  # the engine's first call, the target's alone
    drafted = [p.drafted() for p in paths]  # what its drafting steps cover
    rows = []
    for method, k in settings.settings():
        spec = parse_method(method)
        name = spec.name
        fraction = get_verifier(name, **spec.options).fraction if name == "submaximal" else None  # its path survival's
        step_costs = costs.step_costs(method, k)
        for length in range(1, settings.max_draft_length + 1):
            if name in ("sd", "bv", "submaximal"):
                calls = [expected_calls(path_survival(p.ratios, length, name, fraction=fraction)) for p in drafted]
                estimator = UNBIASED
            elif name == "gbv":
                calls = [len(p.ratios) / (1 + gbv_expected_accepted(p.ratios, length).mean()) for p in drafted]
                estimator = "renewal (approx.)"
            elif name == "kseq":
                calls = [expected_calls(kseq_path_survival(_laws(p, KSEQ_LAW, k), length)) for p in drafted]
                estimator = UNBIASED
            elif _estimator_input(method) == "multidraft-bv":
                calls = [expected_calls(multidraft_bv_path_survival(_laws(p, SELECTION_LAW, k), length)) for p in drafted]
                estimator = UNBIASED
            else:
                calls = [expected_calls(plug_in_survival(p.acceptance["optimal"][..., :k], length, p.draft_probs))
                         for p in drafted]
                estimator = "plug-in (approx.)"
            per_call = tokens_per_call(tokens, first + np.array(calls))
            speed = predicted_tokens_per_second(per_call.mean, step_costs, length, settings.max_new_tokens)
            row = dict(method=method, num_drafts=k, draft_length=length, tokens_per_call=per_call.mean,
                       standard_error=per_call.standard_error, estimator=estimator, tokens_per_second=speed,
                       step_ms=1e3 * per_call.mean / speed,
                       terms_ms={term: 1e3 * getattr(step_costs, term)[length]
                                 for term in ("draft", "target", "verify", "overhead")})
            if name == "sd":  # the plug-in beside the unbiased value: the bias of target prefixes
                plug = [expected_calls(plug_in_survival(p.acceptance["sd"], length)) for p in drafted]
                row["plug_in_tokens_per_call"] = tokens_per_call(tokens, first + np.array(plug)).mean
            rows.append(row)
    rows.sort(key=lambda r: -r["tokens_per_second"])
    ar_speed = 1.0 / (costs.ar_step + costs.ar_prefill / settings.max_new_tokens)
    for row in rows:
        row["vs_ar"] = row["tokens_per_second"] / ar_speed
    rows.append(dict(method="ar", num_drafts=0, draft_length=0, tokens_per_call=1.0, standard_error=0.0,
                     estimator="-", tokens_per_second=ar_speed, vs_ar=1.0, step_ms=1e3 / ar_speed))
    return rows


def _laws(path: PathRecord, key: str, num_drafts: int) -> np.ndarray:
    """The position laws ``key`` (KSEQ_LAW, SELECTION_LAW) of ``path`` for K = ``num_drafts`` drafts:
    [N, (L,) K, K] (a law for m live drafts involves only m' <= m)."""
    laws = path.acceptance[key]
    side = int(round(laws.shape[-1] ** 0.5))
    return laws.reshape(*laws.shape[:-1], side, side)[..., :num_drafts, :num_drafts]


def _spec(row: dict[str, Any]) -> str:
    """The method in the grammar, with K for the multi-draft ones."""
    spec = parse_method(row["method"])
    if spec.name in _SINGLE or row["method"] == "ar":
        return row["method"]
    options = ",".join([f"{k}={v}" for k, v in spec.options.items()] + [f"K={row['num_drafts']}"])
    return f"{spec.name}({options})"


def measure(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], specs: list[tuple[str, Any]],
            settings: TuneSettings) -> list[dict[str, Any]]:
    """Tokens/s and tokens per target call of each (method spec, draft length) decoded on every
    prompt, methods taking turns prompt by prompt (load drifts hit all alike), after a warm-up."""
    drafts = {"draft": draft}
    common = dict(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature, top_k=settings.top_k,
                  top_p=settings.top_p, ignore_eos=True)
    for spec, length in specs:
        run_spec(spec, target, drafts, prompts[0], **{**common, "max_new_tokens": 4, "seed": 0},
                 **({} if spec == "ar" else {"draft_length": length}))
    runs: list[list[Any]] = [[] for _ in specs]
    for p, prompt in enumerate(prompts):
        for i, (spec, length) in enumerate(specs):
            runs[i].append(run_spec(spec, target, drafts, prompt, seed=settings.seed + p, **common,
                                    **({} if spec == "ar" else {"draft_length": length})).result)
    rows = []
    for (spec, length), results in zip(specs, runs):
        per_call = tokens_per_call([len(r.tokens) for r in results], [r.target_calls for r in results])
        rows.append(dict(spec=spec, draft_length="-" if length is None else str(length),
                         tokens_per_second=sum(len(r.tokens) for r in results) / sum(r.seconds for r in results),
                         tokens_per_call=per_call.mean, measured_standard_error=per_call.standard_error))
    return rows


def tune(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], settings: TuneSettings,
         *, verify: int = 0) -> dict[str, Any]:
    """The whole run: paths, costs, predictions, recommendation; with ``verify`` > 0 the best
    ``verify`` settings, ``auto``, ``heuristic`` and ``ar`` measured (see the module doc)."""
    settings = settings.for_draft(draft)
    paths = record_paths(target, draft, prompts, settings)
    count = max(settings.max_new_tokens, settings.max_draft_length + 2)  # windows for the verifiers' timing
    sequence = prompts[0] + generate(target, None, prompts[0], "ar", max_new_tokens=count, ignore_eos=True,
                                     seed=settings.seed).tokens
    target_rows, draft_rows = (rows.float() for rows in _warped(target, draft, sequence, count, settings))
    costs = measure_costs(target, draft, prompts, settings, target_rows, draft_rows)
    rows = predict(paths, costs, settings)
    # recommended: the best by an unbiased estimate, or ar; one of the approximations may predict more
    # (gbv's renewal estimate ignores the modification its state puts on the next call: an overestimate)
    drafting = next((r for r in rows if r["estimator"] == UNBIASED), rows[0])  # rows: the fastest first, ar last
    best = rows[-1] if rows[-1]["tokens_per_second"] > drafting["tokens_per_second"] else drafting
    ahead = rows[0] if rows[0] is not drafting and rows[0]["tokens_per_second"] > best["tokens_per_second"] else None
    report: dict[str, Any] = dict(
        settings=dict(prompts=len(prompts), methods=list(settings.methods), max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                      top_k=settings.top_k, top_p=settings.top_p, max_draft_length=settings.max_draft_length,
                      num_drafts=list(settings.num_drafts), repeats=settings.repeats, threads=torch.get_num_threads()),
        costs_ms=dict(draft={k: [1e3 * s for s in v] for k, v in costs.draft.items()},
                      target={k: [1e3 * s for s in v] for k, v in costs.target.items()},
                      overhead={k: [1e3 * s for s in v] for k, v in costs.overhead.items()},
                      prefill={k: 1e3 * s for k, s in costs.prefill.items()},
                      ar_step=1e3 * costs.ar_step, ar_prefill=1e3 * costs.ar_prefill),
        predictions=rows,
        recommendation=dict(method=_spec(best), num_drafts=best["num_drafts"], draft_length=best["draft_length"],
                            tokens_per_second=best["tokens_per_second"], vs_ar=best["vs_ar"]),
        approximate_ahead=None if ahead is None else dict(method=_spec(ahead), draft_length=ahead["draft_length"],
                                                          tokens_per_second=ahead["tokens_per_second"],
                                                          estimator=ahead["estimator"]),
    )
    if verify:
        chosen = [r for r in rows if r["method"] != "ar"][:verify]
        # every L of the best drafting method: auto's yardstick is that method's best fixed L
        chosen += [r for r in rows if _spec(r) == _spec(drafting) and r not in chosen]
        specs = [(_spec(r), r["draft_length"]) for r in chosen]
        specs += [(_spec(drafting), "auto"), (_spec(drafting), "heuristic"), ("ar", None)]
        measured = measure(target, draft, prompts, specs, settings)
        # the costs timed again after the decodings: how far the machine's clock moved meanwhile
        after = measure_costs(target, draft, prompts, settings, target_rows, draft_rows)
        rows_after = {(_spec(r), r["draft_length"]): r for r in predict(paths, after, settings)}
        for m, r in zip(measured, chosen + [None, None, rows[-1]]):
            if r is not None:
                m["predicted_tokens_per_second"] = r["tokens_per_second"]
                m["predicted_tokens_per_call"] = r["tokens_per_call"]
                m["error"] = r["tokens_per_second"] / m["tokens_per_second"] - 1
                again = rows_after[_spec(r), r["draft_length"]]["tokens_per_second"]
                m["predicted_after_tokens_per_second"] = again
                m["error_after"] = again / m["tokens_per_second"] - 1
        report["costs_after_ms"] = dict(ar_step=1e3 * after.ar_step, ar_prefill=1e3 * after.ar_prefill,
                                        target={k: [1e3 * s for s in v] for k, v in after.target.items()})
        same = [m["tokens_per_second"] for m, r in zip(measured, chosen) if _spec(r) == _spec(drafting)]
        any_method = max(m["tokens_per_second"] for m in measured[: len(chosen)])
        auto, heuristic = measured[len(chosen)], measured[len(chosen) + 1]
        report["verify"] = dict(rows=measured, auto_vs_best_fixed=auto["tokens_per_second"] / max(same),
                                auto_vs_best_fixed_any_method=auto["tokens_per_second"] / any_method,
                                auto_vs_heuristic=auto["tokens_per_second"] / heuristic["tokens_per_second"])
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    """Predicted tokens/s against L, one line per method and K (error bars: the tokens-per-call
    standard error carried to tokens/s), ``ar`` dashed; measured points when verified."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    lines: dict[str, list[dict[str, Any]]] = {}
    for row in report["predictions"]:
        if row["method"] != "ar":
            lines.setdefault(_spec(row), []).append(row)
    for name, line in lines.items():
        line.sort(key=lambda r: r["draft_length"])
        speed = np.array([r["tokens_per_second"] for r in line])
        error = speed * np.array([r["standard_error"] / r["tokens_per_call"] for r in line])
        axis.errorbar([r["draft_length"] for r in line], speed, yerr=error, marker="o", ms=3, capsize=2, label=name)
    ar = next(r for r in report["predictions"] if r["method"] == "ar")
    axis.axhline(ar["tokens_per_second"], color="gray", linestyle="--", label="ar")
    for m in report.get("verify", {}).get("rows", []):
        if m["draft_length"].isdigit():
            axis.plot(int(m["draft_length"]), m["tokens_per_second"], "kx")
    axis.set_xlabel("draft length L")
    axis.set_ylabel("tokens / s (predicted; x measured)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)

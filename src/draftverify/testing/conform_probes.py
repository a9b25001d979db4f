"""The checks of :func:`draftverify.testing.conform`: the law by sampling, and probes of the boundary
cases that sampling almost never reaches.

Why a single uniform value can be judged at all: torch draws uniforms on a grid (``torch.rand``
returns k 2^-m, each with probability 2^-m; m = 24 in float32, 53 in float64), so every grid value,
exactly 0 and 1 - 2^-m included, is drawn with positive probability. An output that the target
gives probability 0, produced at any grid value, is therefore in the implementation's law with
probability at least D(drafts) 2^-m per scripted uniform, and an exact verifier never produces it.
The probes judge what holds for *every* exact verifier, whatever its algorithm (sd, block
verification, sub-maximal couplings): the committed tokens are well formed (accepted drafts, then
one token), each has positive target probability where it is committed, invalid rows are refused,
batched rows do not see each other, and seeds act. The law check judges the rest, with its power;
for an implementation that carries a state from call to call, the depth-law check judges it again
with a draft whose law depends on its depth within a call (``gbv``'s target modification is exact
only for a draft whose law depends on the prefix alone: docs/corrections.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .checker import FAILED, PASSED, check_exactness
from .checker import INCONCLUSIVE as INCONCLUSIVE_LAW
from .conform_adapters import Adapter, Misbehaved, Raised, Row
from .markov import random_pair

__all__ = ["CheckResult", "PROBES", "ProbeSettings"]

PASS, FAIL, NOT_APPLICABLE, INCONCLUSIVE = "pass", "fail", "n/a", "inconclusive"
# the law check judges only where its chi-square sees a deviation of this total variation with power
# 0.9 (testing.checker.detectable_tv): 800 samples see 0.21, the default 10000 about 0.06
LAW_DETECT_TV = 0.25
TOP = 1 - 2.0**-53  # the largest float64 below 1; the scripts round it onto each grid's top, 1 - 2^-m
STEP = 2.0**-53  # the smallest positive float64 grid value; rounded up to 2^-m on a coarser grid
_LABELS = {TOP: "1 - 2^-m (the largest below 1)", STEP: "2^-m (the smallest positive)"}  # m: the grid's bits
VOCAB = 6  # tokens 0 and 5 have target probability 0 in most probe rows: a leak of either shows


@dataclass(frozen=True)
class CheckResult:
    """One check: ``status`` pass / fail / n/a (the adapter cannot express the case); ``proves`` and
    ``power`` say what a pass means; ``detail`` what the implementation did; ``effect`` the size of
    the deviation from the exact law where it can be computed."""

    name: str
    status: str
    proves: str
    power: str
    detail: str
    effect: str = ""


@dataclass(frozen=True)
class ProbeSettings:
    """What every check runs with: the law check's sample count and the seed of every draw."""

    samples: int
    seed: int


def _row(drafts: list[int], draft_rows: list[list[float]], target_rows: list[list[float]]) -> Row:
    def normalised(rows):
        array = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), VOCAB)
        return array / array.sum(-1, keepdim=True)

    return Row(torch.tensor(drafts, dtype=torch.int64).reshape(-1), normalised(draft_rows).reshape(-1, VOCAB),
               normalised(target_rows))


def _violations(rows: list[Row], outputs: list[list[int]]) -> list[tuple[int, int, int]]:
    """(row, position, token) of every committed token the target gives probability 0 there."""
    return [(b, j, t) for b, (row, out) in enumerate(zip(rows, outputs)) for j, t in enumerate(out)
            if not row.target_probs[j, t] > 0]


def _lower_bound(adapter: Adapter, row_index: int, drafted: float) -> str:
    """D(drafts) x 2^-m per scripted uniform the row's call drew: a lower bound on the probability
    of what the call did, since the drafts and each grid value are drawn with that probability."""
    digits, draws = adapter.last_draws[row_index]
    return (f">= D(drafts) x 2^-{digits} per scripted uniform drawn ({draws}) = {drafted:.3g} x 2^-{digits * draws} "
            f"= {drafted * 2.0 ** (-digits * draws):.3g}")


def _drafted(row: Row, count: int) -> float:
    """D(x_1) ... D(x_count): the probability of drafting the row's first ``count`` tokens."""
    return float(torch.prod(row.draft_probs[torch.arange(count), row.draft_tokens[:count]]))


def _support_effect(adapter: Adapter, rows: list[Row], found: tuple[int, int, int]) -> str:
    b, j, t = found
    row = rows[b]
    drafted_here = j < row.length and t == int(row.draft_tokens[j])
    return (f"token {t} committed at position {j + 1}, where the target gives it probability 0; the law gives it "
            + _lower_bound(adapter, b, _drafted(row, j + 1 if drafted_here else j)))


def _scripted_support(adapter: Adapter, rows: list[Row], values: list[float]) -> tuple[str, str, str]:
    """Run ``rows`` with every uniform scripted to each value in turn; check form and support."""
    for value in values:
        shown = _LABELS.get(value, repr(value))
        try:
            outputs = adapter.scripted(rows, [[value] * (row.length + 1) for row in rows])
        except Misbehaved as error:
            where, effect = "", ""
            if error.row is not None:
                row = rows[error.row]
                where = f"row {error.row} (drafts {row.draft_tokens.tolist()}): "
                effect = "a valid call fails with probability " + _lower_bound(adapter, error.row, _drafted(row, row.length))
            return FAIL, f"uniforms = {shown}: {where}on valid input it {error}", effect
        bad = _violations(rows, outputs)
        if bad:
            b, j, t = bad[0]
            return FAIL, (f"uniforms = {shown}: row {b} (drafts {rows[b].draft_tokens.tolist()}) committed "
                          f"{outputs[b]}; token {t} has target probability 0 at position {j + 1}"), _support_effect(adapter, rows, bad[0])
    shown = ", ".join(_LABELS.get(value, repr(value)) for value in values)
    return PASS, f"{len(rows)} rows x uniforms {shown}: every committed token in the target's support", ""


_DETERMINISTIC = "deterministic (scripted uniforms): a failure is certain, not a statistical call"


def _uniform_zero(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    rows = [
        _row([2], [[0, 1, 3, 2, 4, 0]], [[0, 4, 0, 4, 2, 0], [0, 1, 1, 1, 1, 0]]),
        _row([1, 3, 2], [[0, 1, 1, 1, 1, 0]] * 3,
             [[0, 5, 1, 2, 2, 0], [0, 2, 2, 3, 3, 0], [0, 1, 0, 1, 0, 0], [0, 1, 1, 1, 1, 0]]),
    ]
    status, detail, effect = _scripted_support(adapter, rows, [0.0])
    return CheckResult("uniform-zero", status, "a uniform of exactly 0 never accepts a drafted token of target "
                       "probability 0 (the `u <= ratio` defect)", _DETERMINISTIC, detail, effect)


def _zero_target_draft(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    rows = [
        _row([4, 1], [[0, 2, 2, 2, 4, 0], [0, 1, 1, 1, 1, 0]], [[0, 3, 3, 4, 0, 0], [0, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0]]),
        _row([3, 4], [[0, 1, 1, 1, 1, 0]] * 2, [[0, 1, 1, 6, 1, 0], [0, 1, 2, 1, 0, 0], [0, 1, 1, 1, 1, 0]]),
    ]
    status, detail, effect = _scripted_support(adapter, rows, [STEP, 0.5])
    return CheckResult("zero-target-draft", status, "drafted tokens of target probability 0 are never accepted, at the "
                       "smallest positive uniform (catches a ratio floored above 0) and at 1/2", _DETERMINISTIC, detail, effect)


def _uniform_top(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    rows = [
        _row([4], [[0, 1, 1, 2, 6, 0]], [[0, 4, 3, 3, 0, 0], [0, 1, 1, 1, 1, 0]]),
        _row([1, 2], [[0, 1, 1, 0, 0, 0]] * 2, [[0, 6, 2, 2, 0, 0], [0, 2, 3, 5, 0, 0], [0, 1, 1, 0, 0, 0]]),
        _row([1], [[0, 1, 1, 0, 0, 0]], [[0, 1, 1, 0, 0, 0], [0, 3, 7, 0, 0, 0]]),
    ]
    status, detail, effect = _scripted_support(adapter, rows, [TOP])
    return CheckResult("uniform-top", status, "at the largest uniform below 1 the correction and bonus tokens stay in "
                       "their law's support (catches a draw that overruns an unnormalised residual)", _DETERMINISTIC, detail, effect)


def _empty_residual_rows() -> list[Row]:
    """Target equal to draft: exactly (a rejection has probability 0; float32 softmax of equal laws at
    different logit offsets can still reject), and with the drafted token's target probability one
    part in 2^23 lower (a rejection of probability ~1e-7 whose residual (T - D)_+ is 0 everywhere)."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(12):
        law = torch.zeros(VOCAB, dtype=torch.float64)
        law[1:5] = torch.rand(4, generator=generator, dtype=torch.float64) + 0.05
        law /= law.sum()
        for token in range(1, 5):
            lowered = law.clone()
            lowered[token] *= 1 - 2.0**-23
            for target in (law, lowered):
                rows.append(Row(torch.tensor([token]), law[None], torch.stack([target, law])))
    return rows


def _empty_residual(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    status, detail, effect = _scripted_support(adapter, _empty_residual_rows(), [TOP])
    return CheckResult("empty-residual", status, "target equal to draft: a rejection whose residual (T - D)_+ has no "
                       "mass still commits a token of the target's law, without error", _DETERMINISTIC, detail, effect)


def _one_hot_target(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    hot = [[0, 0, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0]]
    spread = [[0, 1, 2, 3, 4, 0]] * 2
    rows = [
        _row([2, 4], spread, hot),  # greedy request: 2 is the argmax, 4 is not
        _row([1, 3], spread, [[0, 1, 1, 1, 1, 0]] * 3),  # a sampled request in the same batch
        _row([3, 3], spread, hot),  # the first drafted token is not the argmax
    ]
    status, detail, effect = _scripted_support(adapter, rows, [0.0, 0.5, TOP])
    return CheckResult("one-hot-target", status, "temperature-0 rows (one-hot targets) in a sampled batch commit the "
                       "target's argmax path", _DETERMINISTIC, detail, effect)


def _disjoint_supports(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    rows = [
        _row([1, 2], [[0, 1, 1, 0, 0, 0]] * 2, [[0, 0, 0, 1, 1, 0]] * 3),
        _row([2], [[0, 1, 3, 0, 0, 0]], [[0, 0, 0, 1, 2, 0], [0, 1, 0, 0, 0, 0]]),
    ]
    status, detail, effect = _scripted_support(adapter, rows, [0.0, STEP, 0.5, TOP])
    return CheckResult("disjoint-supports", status, "when draft and target share no token every draft is rejected and "
                       "the correction comes from the target's support", _DETERMINISTIC, detail, effect)


def _random_rows(rng: np.random.Generator, lengths: list[int]) -> list[Row]:
    """Rows of random laws in the probes' convention: the target gives tokens 0 and 5 probability 0,
    so a committed 0 or 5 is a leak; the draft proposes every token."""
    rows = []
    for length in lengths:
        draft = rng.dirichlet(np.ones(VOCAB), size=length)
        target = np.pad(rng.dirichlet(np.ones(VOCAB - 2), size=length + 1), ((0, 0), (1, 1)))
        drafts = [int(rng.choice(VOCAB, p=d)) for d in draft]
        rows.append(Row(torch.tensor(drafts, dtype=torch.int64), torch.from_numpy(draft), torch.from_numpy(target)))
    return rows


def _batch_versus_alone(adapter: Adapter, context: ProbeSettings, lengths: list[int], name: str, proves: str) -> CheckResult:
    power = "deterministic: 8 batches of random rows and scripted random uniforms, each row also run alone"
    if not adapter.ragged:
        return CheckResult(name, NOT_APPLICABLE, proves, power, f"{adapter.name} verifies one row per call: no batch layout to misalign")
    rng = np.random.default_rng(context.seed)
    for trial in range(8):
        rows = _random_rows(rng, lengths)
        uniforms = [rng.random(row.length + 1).tolist() for row in rows]
        try:
            together = adapter.scripted(rows, uniforms)
            alone = [adapter.scripted([row], [u])[0] for row, u in zip(rows, uniforms)]
        except Misbehaved as error:
            return CheckResult(name, FAIL, proves, power, f"on valid input it {error}")
        for b, (mixed, single) in enumerate(zip(together, alone)):
            if mixed != single:
                return CheckResult(name, FAIL, proves, power, (
                    f"batch {trial}, lengths {lengths}: row {b} committed {mixed} in the batch and {single} alone "
                    "on the same uniforms: it reads another row's draws or rows"))
        bad = _violations(rows, together)
        if bad:
            b, j, t = bad[0]
            return CheckResult(name, FAIL, proves, power, (f"batch {trial}, lengths {lengths}: row {b} committed {together[b]}; "
                                                           f"token {t} has target probability 0 at position {j + 1}"))
    return CheckResult(name, PASS, proves, power, f"8 batches of lengths {lengths}: every row as alone, in the support")


def _zero_draft_rows(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    return _batch_versus_alone(adapter, context, [2, 0, 1, 0, 0, 3], "zero-draft-rows",
                               "rows with no drafts commit one token from their bonus row and leave the other "
                               "rows' draws alone (catches a generator advanced for them)")


def _ragged_batch(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    return _batch_versus_alone(adapter, context, [3, 1, 2, 1], "ragged-batch",
                               "each row of a ragged batch commits what it commits alone (the layout's offsets)")


def _nan_inf(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    proves = "a row with NaN or inf is refused (an exception), never turned into tokens (catches token 0 leaking)"
    good = _row([1], [[0, 1, 1, 1, 1, 0]], [[0, 1, 1, 1, 1, 0]] * 2)
    nan = torch.full((VOCAB,), float("nan"), dtype=torch.float64)
    infinite = torch.tensor([0, float("inf"), 0, 0, 0, 0], dtype=torch.float64)
    cases = {
        "NaN draft row": Row(good.draft_tokens, nan[None], good.target_probs),
        "NaN target row": Row(good.draft_tokens, good.draft_probs, torch.stack([nan, good.target_probs[1]])),
        "inf in a target row": Row(good.draft_tokens, good.draft_probs, torch.stack([infinite, good.target_probs[1]])),
        "inf in a draft row": Row(good.draft_tokens, infinite[None], good.target_probs),
    }
    refusals = []
    for label, bad in cases.items():
        rows = [good, bad] if adapter.ragged else [bad]
        try:
            outputs = adapter.scripted(rows, [[0.5] * (row.length + 1) for row in rows])
        except Raised as error:
            refusals.append(f"{label}: {str(error)[:80]}")
            continue
        except Misbehaved as error:
            return CheckResult("nan-inf", FAIL, proves, _DETERMINISTIC, f"{label}: it {error}")
        return CheckResult("nan-inf", FAIL, proves, _DETERMINISTIC,
                           f"{label}: committed {outputs[-1]} instead of refusing", "tokens from a row that is no law")
    return CheckResult("nan-inf", PASS, proves, _DETERMINISTIC, "; ".join(refusals))


def _seeds(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    proves = "the same seed twice commits the same tokens, and another seed other tokens"
    rows = [_row([1], [[0, 1, 1, 1, 1, 0]], [[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0]])] * 16
    power = ("an exact implementation's first token is uniform on 3 tokens in each of 16 calls: two different seeds "
             f"agree everywhere with probability (1/3)^16 = {3.0**-16:.1e}")
    try:
        first, again, other = (adapter.stream(s)(rows) for s in (context.seed, context.seed, context.seed + 1))
    except Misbehaved as error:
        return CheckResult("seeds", FAIL, proves, power, f"on valid input it {error}")
    if first != again:
        return CheckResult("seeds", FAIL, proves, power, f"seed {context.seed} twice: {_firsts(first)} then {_firsts(again)}")
    if first == other:
        return CheckResult("seeds", FAIL, proves, power,
                           f"seeds {context.seed} and {context.seed + 1} both committed {_firsts(first)}: the seed has no effect")
    return CheckResult("seeds", PASS, proves, power, f"seed {context.seed} twice: equal; seed {context.seed + 1}: differs")


def _firsts(outputs: list[list[int]]) -> str:
    return "".join(str(out[0]) for out in outputs) + " (first tokens)"


def _law(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    proves = ("the law of the first 4 tokens decoded through it (L = 2 drafts per call) from a known-law Markov pair "
              "(V = 4, order 2) equals the target's, enumerated exactly (chi-square, pass at p > 1e-3)")
    return _law_of(adapter, context, "law", proves, depth_dependent=False)


def _depth_law(adapter: Adapter, context: ProbeSettings) -> CheckResult:
    proves = ("as law, with a draft whose law depends on its depth within a call (one table at a call's first drafted "
              "position, another after it, as an EAGLE draft's): a state carried from call to call (gbv's target "
              "modification) must not assume a draft whose law depends on the prefix alone")
    if not adapter.carries_state:
        return CheckResult("depth-law", NOT_APPLICABLE, proves, "-",
                           f"{adapter.name} carries no state from one call to the next, so each call's law given its "
                           "draft's does not depend on how the draft's law came about: the law check covers it")
    return _law_of(adapter, context, "depth-law", proves, depth_dependent=True)


def _law_of(adapter: Adapter, context: ProbeSettings, name: str, proves: str, *, depth_dependent: bool) -> CheckResult:
    pair = random_pair(vocab_size=4, order=2, seed=context.seed, depth_dependent=depth_dependent)
    try:
        report = check_exactness(adapter.law_verifier(context.seed), pair, draft_length=2, num_tokens=4,
                                 samples=context.samples, seed=context.seed, detect_tv=LAW_DETECT_TV)
    except Misbehaved as error:
        return CheckResult(name, FAIL, proves, f"{context.samples} samples", f"while decoding it {error}")
    if report.dof < 1 and report.p_value == 0:
        power = f"{report.samples} samples; an outcome of target probability 0 fails at any power"
        detail = f"decoded a sequence of target probability 0; empirical TV {report.tv:.4f}"
    else:
        smallest = report.detectable_tv
        power = f"{report.samples} samples: detects a deviation of TV >= {smallest:.3f} with probability 0.9 (dof {report.dof})"
        detail = f"p = {report.p_value:.3g} (chi2 {report.chi2:.1f}, dof {report.dof}); empirical TV {report.tv:.4f}"
    status = {PASSED: PASS, FAILED: FAIL, INCONCLUSIVE_LAW: INCONCLUSIVE}[report.status]
    return CheckResult(name, status, proves, power, detail if status != INCONCLUSIVE else f"{detail}; {report.reason}")


PROBES: dict[str, Callable[[Adapter, ProbeSettings], CheckResult]] = {
    "law": _law,
    "depth-law": _depth_law,
    "uniform-zero": _uniform_zero,
    "zero-target-draft": _zero_target_draft,
    "uniform-top": _uniform_top,
    "empty-residual": _empty_residual,
    "one-hot-target": _one_hot_target,
    "disjoint-supports": _disjoint_supports,
    "zero-draft-rows": _zero_draft_rows,
    "ragged-batch": _ragged_batch,
    "nan-inf": _nan_inf,
    "seeds": _seeds,
}

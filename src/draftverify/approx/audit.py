"""What SPRINTER gave up on a decoded text, measured afterwards against the target.

During decoding the target never sees the tokens the classifier said "yes" to. Afterwards one
teacher-forced forward of each model over prompt + completion gives, at every prefix where the
classifier decided, D(. | prefix), T(. | prefix) and the draft's hidden state. From them:

- the classifier's online false/true-positive rates against the true ratio (labels D/T > 1, the
  theory's "unacceptable", and D/T > lambda, the training labels);
- ``tv_draws``: the mean over decided positions of yes * (1 - T(x)/D(x))_+ for the token x that was
  actually drafted. Its expectation at a prefix is sum_x eta(x) (D - T)_+(x) = TV(T, SPRINTER's
  law), so this is a Monte Carlo estimate of the per-token TV from the decoding's own draws;
- ``tv_theory``: the same TV computed exactly at each prefix from the classifier's decision on
  every token (our general form of seed 003, Theorem 3.1), and ``kl_theory`` = KL(law || T);
- ``tv_uniform``: the seed's Theorem 3.1 with one rate, eta_FP (measured) times TV(T, D).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import theory
from ..models.base import Cache, LanguageModel
from ..models.hidden import HiddenStateTap
from ..probs import warp

__all__ = ["PositionAudit", "Audit", "audit_positions", "summarise", "teacher_forced"]


@dataclass(frozen=True)
class PositionAudit:
    """Per decided position of one completion."""

    yes: np.ndarray  # [n] bool, the logged decision
    ratio: np.ndarray  # [n] D(x)/T(x) of the drafted token
    kept: np.ndarray  # [n] bool, the drafted token was committed
    tv_draw: np.ndarray  # [n] yes * (1 - T(x)/D(x))_+
    tv_theory: np.ndarray  # [n] sum_x eta(x) (D - T)_+(x)
    kl_theory: np.ndarray  # [n] KL(SPRINTER's law || T)
    tv_draft: np.ndarray  # [n] TV(T, D)
    acceptance_theory: np.ndarray  # [n] P(drafted token kept), seed 003 Theorem A.4 (general eta)


@dataclass(frozen=True)
class Audit:
    decisions: int
    yes_share: float
    false_positive_rate: float  # P(yes | D/T > 1)
    true_positive_rate: float  # P(yes | D/T <= 1)
    false_positive_rate_lambda: float  # P(yes | D/T > lambda), lambda of the training labels
    true_positive_rate_lambda: float
    tv_draws: float
    tv_draws_stderr: float
    tv_theory: float
    tv_uniform: float
    kl_theory: float
    tv_draft: float
    kept_share: float
    acceptance_theory: float


def teacher_forced(model: LanguageModel, tokens: list[int], count: int, tap: HiddenStateTap | None, warping: dict,
                   target_cache: Cache | None = None):
    """Warped distributions ``[count, V]`` (float64) predicting the last ``count`` tokens of
    ``tokens``. The logits are warped in float64, so each row sums to one to float64 precision
    (float32 rows upcast afterwards are off by up to 1e-5, beyond the float64 tolerance of the
    theory functions they are passed to). ``warping``: :func:`draftverify.probs.warp`'s keywords;
    with a ``tap``, also the draft's hidden states ``[count, H]`` there (else None); a draft reads
    ``target_cache``, the target's cache after the same tokens (a feature draft's input). Returns
    the cache too."""
    inputs = torch.tensor([tokens[:-1]], dtype=torch.int64)
    cache = model.new_cache(1, target_cache)
    if tap is None:
        return warp(model.forward(cache, inputs, None, count)[0].double(), **warping), None, cache
    with tap:
        probs = warp(model.forward(cache, inputs, None, count)[0].double(), **warping)
    return probs, tap.last[0, -count:], cache


def audit_positions(target: LanguageModel, draft: LanguageModel, verifier, prompt_ids: list[int],
                    generated: list[int], log, *, temperature: float = 1.0, top_k=None, top_p=None) -> PositionAudit:
    """Audit one completion decoded by the engine's ``sprinter`` method (``log``: its SprinterLog).
    A draft whose law depends on its depth in a step (a feature draft, ``depth_dependent``) is
    audited on the decisions at depth 1 only, where one teacher-forced pass gives the law its token
    was drawn from; deeper decisions drew from laws of the draft's own features."""
    warping = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    first_only = getattr(draft, "depth_dependent", False)
    keep = [i for i, pos in enumerate(log.positions) if pos < len(generated) and (not first_only or log.depths[i] == 1)]
    positions = np.array([log.positions[i] for i in keep], dtype=np.int64)
    drafted = torch.tensor([log.tokens[i] for i in keep], dtype=torch.int64)
    yes = np.array([log.yes[i] for i in keep], dtype=bool)
    sequence = list(prompt_ids) + list(generated)
    spec = getattr(verifier.classifier, "spec", None)
    tap = HiddenStateTap(draft) if spec is not None and spec.hidden else None
    target_all, _, target_cache = teacher_forced(target, sequence, len(generated), None, warping)
    draft_all, hidden_all, _ = teacher_forced(draft, sequence, len(generated), tap, warping, target_cache)
    index = torch.from_numpy(positions)
    draft_probs, target_probs = draft_all[index], target_all[index]  # [n, V]
    hidden = None if hidden_all is None else hidden_all[index]
    draft_at = draft_probs.gather(1, drafted[:, None])[:, 0].numpy()
    target_at = target_probs.gather(1, drafted[:, None])[:, 0].numpy()
    with np.errstate(divide="ignore"):
        ratio = draft_at / target_at
    eta = verifier.classifier.yes_all_tokens(draft_probs, hidden, threshold=float(verifier.threshold)).double().numpy()
    target_np, draft_np = target_probs.numpy(), draft_probs.numpy()
    law = theory.sprinter_output_law(target_np, draft_np, eta)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(law > 0, law * np.log(law / target_np), 0.0).sum(-1)
    return PositionAudit(
        yes=yes,
        ratio=ratio,
        kept=np.array(generated)[positions] == drafted.numpy(),
        tv_draw=yes * np.clip(1 - target_at / draft_at, 0, None),
        tv_theory=theory.sprinter_tv(target_np, draft_np, eta),
        kl_theory=kl,
        tv_draft=0.5 * np.abs(target_np - draft_np).sum(-1),
        acceptance_theory=theory.sprinter_acceptance(target_np, draft_np, eta),
    )


def _rate(yes: np.ndarray, among: np.ndarray) -> float:
    return float(yes[among].mean()) if among.any() else float("nan")


def summarise(parts: list[PositionAudit], ratio_threshold: float) -> Audit:
    """Pool the audits of several completions (means over every decided position)."""
    cat = {name: np.concatenate([getattr(p, name) for p in parts]) for name in PositionAudit.__dataclass_fields__}
    yes, ratio = cat["yes"], cat["ratio"]
    fp = _rate(yes, ratio > 1)
    n = len(yes)
    return Audit(
        decisions=n, yes_share=float(yes.mean()),
        false_positive_rate=fp, true_positive_rate=_rate(yes, ratio <= 1),
        false_positive_rate_lambda=_rate(yes, ratio > ratio_threshold),
        true_positive_rate_lambda=_rate(yes, ratio <= ratio_threshold),
        tv_draws=float(cat["tv_draw"].mean()), tv_draws_stderr=float(cat["tv_draw"].std(ddof=1) / np.sqrt(n)),
        tv_theory=float(cat["tv_theory"].mean()), tv_uniform=float(fp * cat["tv_draft"].mean()),
        kl_theory=float(cat["kl_theory"].mean()), tv_draft=float(cat["tv_draft"].mean()),
        kept_share=float(cat["kept"].mean()), acceptance_theory=float(cat["acceptance_theory"].mean()),
    )

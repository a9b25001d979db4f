"""The SPRINTER audit: each decision measured at its own prefix against a known-law pair's tables,
the drawn TV and kept share against the theory they estimate, the pooled rates by hand; and its
teacher-forced distributions are valid float64 rows for the theory functions (regression: the
embedded target's float32 rows, upcast after the softmax, summed to 1 + 2e-6 at V = 8192 and
`sprinter report` stopped on the float64 tolerance)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify import theory
from draftverify.approx import Sprinter
from draftverify.approx.audit import PositionAudit, audit_positions, summarise, teacher_forced
from draftverify.engine import DecodeConfig, Decoder
from draftverify.models.pair import load_pair
from draftverify.probs import check_distributions, warp
from draftverify.testing import random_pair
from tests.factories import probability_classifier, toy_models

PROMPT = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n\n\ndef mean(values):\n'
VOCAB, DRAFT_LENGTH = 3, 3
KNOWN = random_pair(vocab_size=VOCAB, order=2, seed=3)  # the known-law pair the audit is checked on


def test_teacher_forced_rows_of_the_embedded_target_pass_the_float64_checks():
    pair = load_pair("tiny")
    tokens = pair.tokenizer.encode(PROMPT)
    probs, _, _ = teacher_forced(pair.target, tokens, len(tokens) - 1, None,
                               dict(temperature=1.0, top_k=None, top_p=None))
    assert probs.dtype.is_floating_point and probs.dtype.itemsize == 8
    check_distributions(probs, "target_probs")


def audited(prompts: list[list[int]], num_tokens: int, seed: int, **warping):
    """Decode ``prompts`` with the engine's ``sprinter`` on the known-law pair (``warping``: the
    temperature, top-k and top-p of both); each prompt's (prompt, generated, log, audit)."""
    verifier = Sprinter(classifier=probability_classifier())
    target, draft = toy_models(KNOWN)
    decoder = Decoder(target, draft, prompts, DecodeConfig(verifier, draft_length=DRAFT_LENGTH,
                                                           max_new_tokens=num_tokens, seed=seed, **warping))
    while not decoder.done:
        decoder.step()
    runs = []
    for index, prompt in enumerate(prompts):
        log, generated = decoder.states[index], decoder.generated(index)
        runs.append((prompt, generated, log,
                     audit_positions(target, draft, decoder.verifier, prompt, generated, log, **warping)))
    return runs


@pytest.mark.filterwarnings("ignore:divide by zero")  # T(x) = 0 < D(x): a ratio and a KL of inf, the audit's too
@pytest.mark.parametrize("warping", [{}, dict(temperature=0.6, top_k=2)])
def test_each_audited_decision_is_measured_at_its_own_prefix(warping):
    """Every field of a position's audit against the Markov tables at the prefix the token was
    drafted after, warped as the decoding warped them: its ratio D(x) / T(x), whether the decoding
    kept it, yes (1 - T(x) / D(x))_+, TV(T, D), and the theory's TV, KL and acceptance under the
    classifier's decision on each token."""
    classifier = probability_classifier()
    decisions = 0
    for prompt, generated, log, audit in audited([[1], [0, 2], [2, 2, 1]] * 4, 10, seed=5, **warping):
        decided = [i for i, position in enumerate(log.positions) if position < len(generated)]
        assert len(audit.yes) == len(decided) > 0
        for k, i in enumerate(decided):
            position, token = log.positions[i], log.tokens[i]
            prefix = prompt + generated[:position]
            target, draft = (warp(torch.from_numpy(model.conditional(prefix)).log(), **warping).numpy()
                             for model in (KNOWN.target, KNOWN.draft))
            eta = classifier.yes_all_tokens(torch.from_numpy(draft[None]), threshold=0.5).double().numpy()[0]
            law = theory.sprinter_output_law(target, draft, eta)
            assert audit.yes[k] == log.yes[i]
            assert audit.ratio[k] == pytest.approx(draft[token] / target[token], rel=1e-12)
            assert audit.kept[k] == (generated[position] == token)
            assert audit.tv_draw[k] == pytest.approx(log.yes[i] * max(0.0, 1 - target[token] / draft[token]), abs=1e-12)
            assert audit.tv_draft[k] == pytest.approx(0.5 * np.abs(target - draft).sum(), abs=1e-12)
            assert audit.tv_theory[k] == pytest.approx(float((eta * np.maximum(draft - target, 0)).sum()), abs=1e-12)
            assert audit.acceptance_theory[k] == pytest.approx(
                float(np.minimum(target, draft).sum() + (eta * np.maximum(draft - target, 0)).sum()), abs=1e-12)
            kl = sum(v * np.log(v / t) for v, t in zip(law, target) if v > 0)
            assert audit.kl_theory[k] == pytest.approx(float(kl), abs=1e-12)
            decisions += 1
    assert decisions > 100


def test_the_drawn_tv_estimates_the_theorys_and_the_kept_share_its_acceptance():
    """tv_draws is a Monte Carlo estimate of the per-token TV from the decoding's own draws: at a
    prefix, E_{x ~ D}[yes(x) (1 - T(x) / D(x))_+] = sum_x eta(x) (D - T)_+(x), the theory's TV; and
    the share of drafted tokens kept estimates the theory's acceptance. Both pooled over ~6,000
    decisions, within four standard errors; the TV is large enough that an estimate off by a quarter
    of it would be eight standard errors away."""
    runs = audited([[1], [0, 2], [2, 2, 1], [0]] * 100, 16, seed=7)
    audit = summarise([run[3] for run in runs], ratio_threshold=1.0)
    kept = np.concatenate([run[3].kept for run in runs]).astype(float)
    assert audit.decisions > 5000
    assert audit.tv_theory > 32 * audit.tv_draws_stderr  # a quarter of it is eight standard errors
    assert abs(audit.tv_draws - audit.tv_theory) < 4 * audit.tv_draws_stderr
    kept_stderr = kept.std(ddof=1) / np.sqrt(len(kept))
    assert 1 - audit.acceptance_theory > 10 * kept_stderr  # not every token kept: a flipped count would show
    assert abs(audit.kept_share - audit.acceptance_theory) < 4 * kept_stderr


def test_summarise_pools_the_rates_over_every_decided_position():
    """Rates over the pooled positions, by hand: D / T > 1 (unacceptable) and > lambda decide which
    "yes" is a false positive; tv_uniform is the seed's Theorem 3.1, eta_FP TV(T, D)."""
    def part(yes, ratio, tv_draft):
        n = len(yes)
        return PositionAudit(yes=np.array(yes), ratio=np.array(ratio), kept=np.ones(n, dtype=bool),
                             tv_draw=np.full(n, 0.1), tv_theory=np.full(n, 0.2), kl_theory=np.full(n, 0.3),
                             tv_draft=np.array(tv_draft), acceptance_theory=np.full(n, 0.9))

    audit = summarise([part([True, False, True], [2.0, 3.0, 0.5], [0.2, 0.4, 0.1]),
                       part([True, False, True], [1.5, 1.2, 1.0], [0.3, 0.2, 0.0])], ratio_threshold=1.4)
    assert audit.decisions == 6 and audit.yes_share == pytest.approx(4 / 6)
    assert audit.false_positive_rate == pytest.approx(2 / 4)  # yes among ratios 2, 3, 1.5, 1.2
    assert audit.true_positive_rate == pytest.approx(2 / 2)  # yes among ratios 0.5, 1.0
    assert audit.false_positive_rate_lambda == pytest.approx(2 / 3)  # among 2, 3, 1.5
    assert audit.true_positive_rate_lambda == pytest.approx(2 / 3)  # among 0.5, 1.2, 1.0
    assert audit.tv_uniform == pytest.approx(0.5 * 1.2 / 6)
    assert audit.tv_draft == pytest.approx(1.2 / 6) and audit.tv_draws == pytest.approx(0.1)
    assert audit.kept_share == 1.0 and audit.acceptance_theory == pytest.approx(0.9)

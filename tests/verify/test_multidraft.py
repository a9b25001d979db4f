"""kseq and ot: exact laws by enumeration, Monte Carlo with broken twins, K = 1 is sd."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from draftverify import get_verifier, ot, rng
from draftverify.testing import check_exactness, exact_output_law, exact_sequence_law, random_pair
from draftverify.formulas import kseq_rho
from draftverify.verify.multidraft import KSeq, OptimalTransport, multi_step
from tests.factories import random_distributions, random_verify_inputs

TOL = 1e-4
CONFIGS = [("kseq", {}), ("ot", {"solver": "lp"}), ("ot", {"solver": "maxflow"}), ("ot", {"solver": "maxflow-cs"}), ("ot", {"solver": "gr", "tol": TOL})]


def _law_error(verifier, pair, **shape) -> float:
    law = exact_sequence_law(verifier, pair, **shape)
    return float(np.abs(law - pair.target.law(shape["num_tokens"])).sum())


@pytest.mark.parametrize("name,options", CONFIGS)
@pytest.mark.parametrize("num_drafts", [2, 3])
def test_exact_law_one_position_across_calls(name, options, num_drafts):
    pair = random_pair(vocab_size=3, order=2, seed=num_drafts)
    error = _law_error(get_verifier(name, **options), pair, num_drafts=num_drafts, draft_length=1, num_tokens=2)
    assert error <= (3 * TOL * 2 if options.get("solver") == "gr" else 1e-9)


@pytest.mark.parametrize("name,options", [CONFIGS[3], CONFIGS[4]])  # kseq over two positions: the Monte Carlo test
def test_exact_law_two_positions(name, options):
    pair = random_pair(vocab_size=3, order=2, seed=7)
    error = _law_error(get_verifier(name, **options), pair, num_drafts=2, draft_length=2, num_tokens=2)
    assert error <= (3 * TOL * 2 if options.get("solver") == "gr" else 1e-9)


def _random_inputs(seed: int, num_drafts: int, length: int, vocab: int):
    return random_verify_inputs(seed, num_drafts, length, vocab)


@pytest.mark.parametrize("name,options", CONFIGS)
def test_one_draft_reduces_to_sd(name, options):
    sd = get_verifier("sd")
    verifier = get_verifier(name, **options)
    for seed in range(3):
        inputs = _random_inputs(seed, 1, 2, 4)
        expected, got = exact_output_law(sd, *inputs), exact_output_law(verifier, *inputs)
        keys = set(expected) | set(got)
        error = sum(abs(expected.get(k, 0.0) - got.get(k, 0.0)) for k in keys)
        assert error <= (3 * TOL * 2 if options.get("solver") == "gr" else 1e-9)


def _acceptance(verifier, target, draft, num_drafts) -> float:
    """P(the verified token is a draft) at one position, over all drafted tuples (enumerated)."""
    total = 0.0
    for tuple_ in itertools.product(range(target.size), repeat=num_drafts):
        mass = float(np.prod(draft[list(tuple_)]))
        if mass == 0:
            continue
        tokens = torch.tensor([[t] for t in tuple_])
        law = exact_output_law(verifier, tokens, torch.from_numpy(np.tile(draft, (num_drafts, 1, 1))), torch.from_numpy(np.tile(target, (num_drafts, 2, 1))))
        total += mass * sum(p for out, p in law.items() if out[0] in tuple_)
    return total


@pytest.mark.parametrize("num_drafts", [2, 3])
def test_kseq_acceptance_closed_form_and_guarantee(num_drafts):
    generator = np.random.default_rng(num_drafts)
    target, draft = random_distributions(generator, 4), random_distributions(generator, 4)
    rho = kseq_rho(target, draft, num_drafts)
    beta = np.minimum(draft, target / rho).sum()
    acceptance = _acceptance(get_verifier("kseq"), target, draft, num_drafts)
    assert acceptance == pytest.approx(1 - (1 - beta) ** num_drafts, abs=1e-9)
    best = ot.optimal_acceptance(target, draft, num_drafts)
    assert (1 - 1 / np.e) * best <= acceptance <= best + 1e-12
    assert _acceptance(get_verifier("ot", solver="maxflow-cs"), target, draft, num_drafts) == pytest.approx(best, abs=1e-9)


def _bisected_rho(target, draft, k, steps=200):
    """The plain bisection over [1, K] with the full sum (the solver before the sorted ratios)."""
    def gap(rho):
        beta = np.minimum(draft, target / rho).sum()
        return 1 - (1 - beta) ** k - rho * beta
    if gap(1.0) <= 0:
        return 1.0
    low, high = 1.0, float(k)
    for _ in range(steps):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if gap(middle) <= 0 else (middle, high)
    return high


@pytest.mark.parametrize("vocab", [2, 5, 300, 8192])
def test_kseq_rho_on_sorted_ratios_matches_a_plain_bisection(vocab):
    generator = np.random.default_rng(vocab)
    cases = []
    for trial in range(12):
        logits = 3 * generator.standard_normal(vocab)
        target = np.exp(logits - logits.max())
        draft = target * np.exp(generator.choice([0.3, 1.0, 3.0]) * generator.standard_normal(vocab))
        if trial % 3 == 1:
            draft[generator.integers(vocab)] = 0.0  # tokens the draft never proposes
        if trial % 3 == 2:
            target[generator.integers(vocab)] = 0.0
        cases.append((target / target.sum(), draft / draft.sum(), int(generator.integers(2, 9))))
    for target, draft, k in cases:
        rho = float(kseq_rho(target, draft, k))
        beta = np.minimum(draft, target / rho).sum()
        assert 1 - (1 - beta) ** k <= rho * beta  # the feasible side under the full sum
        assert abs(1 - (1 - beta) ** k - rho * beta) < 1e-12 or rho == 1.0  # a root
        assert rho == pytest.approx(_bisected_rho(target, draft, k), rel=1e-3)
    # leading axes: each row as if alone
    targets, drafts = np.stack([c[0] for c in cases[:4]]), np.stack([c[1] for c in cases[:4]])
    np.testing.assert_array_equal(kseq_rho(targets, drafts, 3), [float(kseq_rho(t, d, 3)) for t, d in zip(targets, drafts)])


@pytest.mark.parametrize("k", [2, 3])
def test_kseq_rho_places_ratios_of_exactly_one_and_k(k):
    # dyadic laws, so T / D is exactly 1 at three tokens and 2 at one: the solver sorts only the
    # ratios inside (1, K) and counts these in closed form on the side each is on
    draft = np.full(8, 1 / 8)
    target = np.array([1 / 8, 1 / 4, 3 / 16, 1 / 16, 1 / 8, 3 / 32, 1 / 8, 1 / 32])
    rho = float(kseq_rho(target, draft, k))
    assert rho == pytest.approx(_bisected_rho(target, draft, k), rel=1e-9)


def test_kseq_rho_is_the_theorys_and_exactly_one_when_draft_equals_target():
    from draftverify import theory

    generator = np.random.default_rng(7)
    target, draft = random_distributions(generator, 3, 5), random_distributions(generator, 3, 5)  # [3, V]
    np.testing.assert_array_equal(kseq_rho(target, draft, 3), theory.kseq_rho(target, draft, 3))  # one implementation
    rho = kseq_rho(target, draft, 3)
    beta = np.minimum(draft, target / rho[:, None]).sum(-1)
    assert np.all(1 - (1 - beta) ** 3 <= rho * beta) and np.all((rho >= 1) & (rho <= 3))  # the feasible side
    # D = T: rho* = 1 up to float rounding of the sums, and K-SEQ keeps a candidate with probability 1
    same = np.array([0.5, 0.25, 0.125, 0.125])
    assert float(kseq_rho(same, same, 4)) == pytest.approx(1.0, abs=1e-4)
    assert _acceptance(get_verifier("kseq"), same, same, 2) == pytest.approx(1.0, abs=1e-9)


# --- broken twins: each must be caught -------------------------------------------------------


def _sd_on_each_draft(target, draft, candidates, generator) -> int:
    """The naive bug: single-draft SD on each candidate in turn (rho = 1), residual (T - D)_+."""
    target, draft = target.to(torch.float64), draft.to(torch.float64)
    accept = torch.clamp(target[candidates] / draft[candidates], max=1.0)
    hits = torch.nonzero(rng.bernoulli(accept, generator))
    if hits.numel():
        return int(candidates[int(hits[0])])
    return rng.categorical(torch.clamp(target - draft, min=0.0) + 1e-300, generator)


@dataclass(frozen=True)
class BrokenKSeq(KSeq):
    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state):
        return multi_step(draft_tokens, draft_probs, target_probs, _sd_on_each_draft, generator)


@dataclass(frozen=True)
class BrokenOT(OptimalTransport):
    """Keeps using the K-draft plan after drafts drop out (the count is not recomputed)."""

    def _verify(self, draft_tokens, draft_probs, target_probs, generator, state):
        num_drafts = draft_tokens.shape[0]

        def position(target, draft, candidates, source):
            padded = torch.cat([candidates, candidates[:1].repeat(num_drafts - candidates.numel())])
            plan = ot.solve(target.numpy(), draft.numpy(), num_drafts, method=self.solver)
            return rng.categorical(torch.from_numpy(plan.conditional(padded.numpy())), source)

        return multi_step(draft_tokens, draft_probs, target_probs, position, generator)


def test_broken_kseq_twin_has_a_wrong_exact_law():
    pair = random_pair(vocab_size=3, order=2, seed=7)
    assert _law_error(BrokenKSeq(), pair, num_drafts=3, draft_length=1, num_tokens=2) > 0.05


@pytest.mark.parametrize("good,broken", [(KSeq(), BrokenKSeq()), (OptimalTransport(solver="maxflow-cs"), BrokenOT(solver="maxflow-cs"))])
def test_monte_carlo_checker_passes_the_verifier_and_fails_its_twin(good, broken):
    pair = random_pair(vocab_size=3, order=2, seed=3)
    shape = dict(num_drafts=3, draft_length=2, num_tokens=3, samples=1200, seed=3)
    assert check_exactness(good, pair, **shape).p_value > 1e-3
    assert check_exactness(broken, pair, **shape).p_value < 1e-6


def test_seeded_runs_are_bit_identical_and_options_are_checked():
    inputs = _random_inputs(0, 3, 3, 5)
    for verifier in (get_verifier("kseq"), get_verifier("ot")):
        a = verifier.verify(*inputs, generator=torch.Generator().manual_seed(5))
        b = verifier.verify(*inputs, generator=torch.Generator().manual_seed(5))
        assert a == b
    with pytest.raises(ValueError, match="solver"):
        get_verifier("ot", solver="simplex")
    with pytest.raises(ValueError, match="tol"):
        get_verifier("ot", tol=2.0)

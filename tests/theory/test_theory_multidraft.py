"""K i.i.d. drafts: K-SEQ's acceptance and (1 - 1/e) guarantee, alpha*, and SpecTr-GBV's claimed
bound (seed 004 Lemma 5.1: not an upper bound on exact verifiers)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from draftverify import theory
from draftverify.testing import exact_output_law, random_pair
from tests.factories import distribution_pairs, markov_tables, registered_verifier


def brute_force_alpha_star(target: np.ndarray, draft: np.ndarray, k: int) -> float:
    """1 + min over every subset H of T(H) - D(H)^K (Hu et al. 2025), by enumeration."""
    vocab = len(target)
    subsets = itertools.chain.from_iterable(itertools.combinations(range(vocab), r) for r in range(vocab + 1))
    return 1 + min(target[list(h)].sum() - draft[list(h)].sum() ** k for h in subsets)


def simulate_kseq(target, draft, k, rho, runs, rng):
    """K-SEQ (Sun et al. 2023), ``runs`` calls at once: (accepted flags, emitted tokens)."""
    drafts = rng.choice(len(draft), size=(runs, k), p=draft)  # [N, K]
    accept = rng.random((runs, k)) < np.minimum(1, target[drafts] / (rho * draft[drafts]))
    first = accept.argmax(axis=1)
    any_accepted = accept.any(axis=1)
    residual = np.maximum(target - rho * draft, 0)
    corrections = rng.choice(len(target), size=runs, p=residual / residual.sum())
    emitted = np.where(any_accepted, drafts[np.arange(runs), first], corrections)
    return any_accepted, emitted


@settings(max_examples=100, deadline=None)
@given(distribution_pairs(max_vocab=7), st.integers(1, 6))
def test_kseq_rho_solves_its_equation_on_the_feasible_side(pair, k):
    target, draft = pair
    rho = theory.kseq_rho(target, draft, k)
    beta = theory.kseq_beta(target, draft, rho)
    gap = 1 - (1 - beta) ** k - rho * beta
    assert 1 <= rho <= k
    assert gap <= 1e-12  # feasible side: 1 - (1 - beta)^K <= rho beta
    assert abs(gap) < 1e-12 or rho == 1.0  # a root, unless feasible already at rho = 1
    if k == 1:
        assert theory.kseq_acceptance(target, draft, 1) == pytest.approx(theory.maximal_acceptance(target, draft))


@settings(max_examples=150, deadline=None)
@given(distribution_pairs(max_vocab=7), st.integers(2, 6))
def test_kseq_guarantee_and_alpha_star(pair, k):
    target, draft = pair
    alpha_star = brute_force_alpha_star(target, draft, k)
    kseq = float(theory.kseq_acceptance(target, draft, k))
    assert theory.KSEQ_GUARANTEE * alpha_star - 1e-12 <= kseq <= alpha_star + 1e-12
    # Lemma 5.1's value at L = 1 never exceeds alpha*: it optimises over a smaller class
    assert theory.spectr_gbv_claimed_bound([target], [draft], k).sum() <= alpha_star + 1e-12


def test_kseq_acceptance_and_exactness_by_simulation():
    rng = np.random.default_rng(0)
    target, draft, k = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4]), 3
    rho = float(theory.kseq_rho(target, draft, k))
    accepted, emitted = simulate_kseq(target, draft, k, rho, 400_000, rng)
    expected = float(theory.kseq_acceptance(target, draft, k))
    assert abs(accepted.mean() - expected) < 4 * np.sqrt(expected * (1 - expected) / accepted.size)
    law = np.bincount(emitted, minlength=4) / emitted.size
    assert np.abs(law - target).max() < 0.004
    # broken twin: without the scale (rho = 1) the same simulation is visibly biased
    _, broken = simulate_kseq(target, draft, k, 1.0, 400_000, rng)
    assert np.abs(np.bincount(broken, minlength=4) / broken.size - target).max() > 0.02


def test_multidraft_acceptance_uses_the_ot_alpha_star():
    target, draft = np.array([0.9, 0.1]), np.array([0.5, 0.5])
    values = theory.multidraft_acceptance(target, draft, 2)
    assert values.optimal == pytest.approx(0.85)  # 1 + (T(b) - D(b)^2) = 1 - 0.15
    assert values.optimal == pytest.approx(brute_force_alpha_star(target, draft, 2))
    assert values.single == pytest.approx(0.6)
    assert values.kseq_guarantee == pytest.approx((1 - np.exp(-1)) * 0.85)  # of alpha*, not of K-SEQ's own
    assert values.kseq_guarantee <= values.kseq <= values.optimal


def test_lemma_5_1_value_in_the_algorithms_counterexample():
    # docs/corrections.md: V = 2, K = 2, L = 1, draft (0.5, 0.5), target (0.9, 0.1): claimed 0.822
    target, draft = np.array([0.9, 0.1]), np.array([0.5, 0.5])
    claim = theory.spectr_gbv_claimed_bound([target], [draft], 2).sum()
    assert claim == pytest.approx(0.9 * (1 - (4 / 9) ** 2) + 0.1)
    assert claim == pytest.approx(0.8222, abs=1e-4)
    assert claim < brute_force_alpha_star(target, draft, 2)  # alpha* = 0.85 is achievable


def test_kseq_beats_the_lemma_5_1_upper_bound():
    # only token 2 can be accepted; K-SEQ accepts it whenever a draft proposes it: 1 - 0.8^3
    target, draft, k = np.array([0.0, 0.5, 0.5]), np.array([0.8, 0.0, 0.2]), 3
    claim = theory.spectr_gbv_claimed_bound([target], [draft], k).sum()
    assert claim == pytest.approx(0.5 * (1 - 0.6**3))  # 0.392
    assert float(theory.kseq_acceptance(target, draft, k)) == pytest.approx(1 - 0.8**3)  # 0.488
    rho = float(theory.kseq_rho(target, draft, k))
    accepted, emitted = simulate_kseq(target, draft, k, rho, 200_000, np.random.default_rng(1))
    assert accepted.mean() > claim + 0.08
    assert np.abs(np.bincount(emitted, minlength=3) / emitted.size - target).max() < 0.005


def test_remark_5_2_properties_and_their_corrections():
    pair = random_pair(vocab_size=3, order=2, seed=2, zero_share=0.0)
    target, draft = markov_tables(pair.target, 3), markov_tables(pair.draft, 3)
    bounds = [theory.spectr_gbv_claimed_bound(target, draft, k).sum() for k in (1, 2, 4, 4096)]
    # consistency: K = 1 gives GBV's sum_i sum_{x^i} min(T, D)
    assert bounds[0] == pytest.approx(theory.longest_prefix_claim(target, draft).claimed.sum())
    assert np.all(np.diff(bounds) > 0) and bounds[-1] == pytest.approx(3, abs=1e-2)
    # corrected: no strict increase, and a limit below L, when the draft misses target mass
    t, d = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    flat = [theory.spectr_gbv_claimed_bound([t], [d], k).sum() for k in (1, 2, 50)]
    np.testing.assert_allclose(flat, 0.5)


@pytest.mark.parametrize(
    "call",
    [
        lambda: theory.kseq_rho([0.5, 0.5], [0.5, 0.5], 0),
        lambda: theory.kseq_beta([0.5, 0.5], [0.5, 0.5], 0.5),
        lambda: theory.kseq_acceptance([0.5, 0.5], [0.2, 0.2], 2),
        lambda: theory.spectr_gbv_claimed_bound([np.array([0.5, 0.5])], [np.array([0.5, 0.5])], 1.5),
    ],
)
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()


def spectr_gbv_one_token_law(target, draft, k):
    """Exact law of the first emitted token and E[tau] of seed 004's Algorithm 1 as written, L = 1:
    drafts in order, each new token accepted with h = T(x)[1 - (1 - min(D/T, 1))^K] / (1 - (1 - D(x))^K)
    (eq. 3), repeated tokens skipped (the set H), else the residual of eq. 4."""
    ratio = np.minimum(np.divide(draft, target, out=np.ones_like(target), where=target > 0), 1)
    accept = target * (1 - (1 - ratio) ** k) / (1 - (1 - draft) ** k)
    residual = target * (1 - ratio) ** k
    residual = residual / residual.sum()
    law, expected_tau = np.zeros_like(target), 0.0
    for drafts in itertools.product(range(len(target)), repeat=k):
        weight, tried = np.prod(draft[list(drafts)]), set()
        for x in drafts:  # weight: probability of reaching this draft with nothing accepted
            if x in tried:
                continue
            tried.add(x)
            law[x] += weight * accept[x]
            expected_tau += weight * accept[x]
            weight *= 1 - accept[x]
        law += weight * residual
    return law, expected_tau


def test_spectr_gbv_as_written_is_not_exact_and_misses_its_claim():
    # docs/corrections.md: V = 2, K = 2, L = 1, draft (0.5, 0.5), target (0.9, 0.1)
    target, draft = np.array([0.9, 0.1]), np.array([0.5, 0.5])
    law, expected_tau = spectr_gbv_one_token_law(target, draft, 2)
    assert law[0] == pytest.approx(151 / 162)  # not 0.9: seed 004 Theorem 4.2 fails for K >= 2
    assert expected_tau == pytest.approx(307 / 405)  # 0.758, not the 0.822 of Theorem 5.3
    claim = theory.spectr_gbv_claimed_bound([target], [draft], 2).sum()
    assert expected_tau < claim - 0.06
    # K = 1 (GBV at L = 1, i.e. SD) is exact and attains the claim
    law_one, tau_one = spectr_gbv_one_token_law(target, draft, 1)
    np.testing.assert_allclose(law_one, target)
    assert tau_one == pytest.approx(theory.spectr_gbv_claimed_bound([target], [draft], 1).sum())


def exact_expected_tau(name, target_tables, draft_tables, k, **options):
    """E[accepted tokens] of one call of a registered K-draft verifier, by enumerating every drafted
    K x L block (weighted by its draft probability) and every branch of the verifier's randomness."""
    verifier = registered_verifier(name, **options)
    length, vocab = len(target_tables), target_tables[0].shape[0]
    total = 0.0
    for flat in itertools.product(range(vocab), repeat=k * length):
        drafts = np.array(flat).reshape(k, length)
        draft_rows = np.stack([[draft_tables[i][tuple(row[:i])] for i in range(length)] for row in drafts])
        bonus = [target_tables[0]]  # any distribution: the bonus token does not count in tau
        target_rows = np.stack([[target_tables[i][tuple(row[:i])] for i in range(length)] + bonus for row in drafts])
        weight = np.prod(np.take_along_axis(draft_rows, drafts[..., None], -1))
        if weight == 0:
            continue
        law = exact_output_law(verifier, torch.tensor(drafts), torch.tensor(draft_rows), torch.tensor(target_rows))
        total += weight * sum(p * (len(tokens) - 1) for tokens, p in law.items())
    return total


def test_lemma_5_1_claim_beside_the_implemented_multidraft_verifiers():
    # L = 2, K = 2 on a known-law order-2 Markov pair: per-position optimal transport (exact with the
    # LP solver) accepts more than SpecTr-GBV's "upper bound"; every exact verifier stays below the
    # true bound sum_j alpha*(T^(j), D^(j), K) over the joint laws of the first j tokens
    pair = random_pair(vocab_size=2, order=2, seed=1)
    target, draft = markov_tables(pair.target, 2), markov_tables(pair.draft, 2)
    claim = theory.spectr_gbv_claimed_bound(target, draft, 2).sum()
    kseq = exact_expected_tau("kseq", target, draft, 2)
    transport = exact_expected_tau("ot", target, draft, 2, solver="lp")
    joint_bound = sum(  # the joint laws of the first j tokens
        brute_force_alpha_star(pair.target.law(j).ravel(), pair.draft.law(j).ravel(), 2) for j in (1, 2)
    )
    assert transport > claim + 0.1  # 1.857 against 1.748
    assert kseq <= transport + 1e-9 and transport <= joint_bound + 1e-9
    # at L = 1 the registered kseq accepts exactly 1 - (1 - beta(rho*))^K
    one = exact_expected_tau("kseq", target[:1], draft[:1], 3)
    assert one == pytest.approx(float(theory.kseq_acceptance(target[0], draft[0], 3)), abs=1e-9)

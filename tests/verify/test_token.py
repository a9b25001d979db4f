"""`sd`, `greedy` and `submaximal`: forced outcomes, closed forms against exact and Monte Carlo
values, determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from draftverify import get_verifier
from draftverify.testing import draw_drafts, enumerate_outcomes, exact_output_law, random_pair


def test_sd_accepts_everything_when_draft_equals_target():
    probs = torch.tensor([[[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]], dtype=torch.float64)
    target = torch.cat([probs, torch.tensor([[[0.0, 1.0, 0.0]]], dtype=torch.float64)], dim=1)
    law = exact_output_law(get_verifier("sd"), torch.tensor([[2, 0]]), probs, target)
    assert law == {(2, 0, 1): 1.0}


def test_sd_rejection_draws_from_the_residual():
    draft = torch.tensor([[[0.5, 0.5, 0.0]]], dtype=torch.float64)
    target = torch.tensor([[[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]]], dtype=torch.float64)
    law = exact_output_law(get_verifier("sd"), torch.tensor([[0]]), draft, target)
    assert law == pytest.approx({(2,): 1.0})  # T(0) = 0: always rejected; residual (T - D)+ is token 2


def path_product_expected_accepted(pair, prefix, length):
    """sum_{i<=L} sum_{x^i} prod_{j<=i} min(T, D)(x_j | x^{j-1}) (seed 002; docs/corrections.md)."""
    total = 0.0
    for i in range(1, length + 1):
        for path in itertools.product(range(pair.vocab_size), repeat=i):
            target = pair.target.conditionals(prefix, path)
            draft = pair.draft.conditionals(prefix, path)
            total += np.prod([min(target[j, path[j]], draft[j, path[j]]) for j in range(i)])
    return total


def expected_accepted(verifier, pair, prefix, length):
    def one_call(source):
        tokens, draft_probs, target_probs = draw_drafts(pair, prefix, 1, length, source)
        return verifier.verify(tokens, draft_probs, target_probs, generator=source).num_accepted

    return sum(n * p for n, p in enumerate_outcomes(one_call).items())


def monte_carlo_accepted(verifier, pair, prefix, length, samples, seed=0):
    rng, generator = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    counts = [verifier.verify(*draw_drafts(pair, prefix, 1, length, rng), generator=generator).num_accepted for _ in range(samples)]
    return np.mean(counts), np.std(counts) / np.sqrt(samples)


@pytest.mark.parametrize("length", [1, 2, 3])
def test_sd_expected_accepted_matches_path_product(length):
    pair = random_pair(vocab_size=3, seed=2)
    formula = path_product_expected_accepted(pair, [1], length)
    verifier = get_verifier("sd")
    assert expected_accepted(verifier, pair, [1], length) == pytest.approx(formula, abs=1e-12)
    mean, stderr = monte_carlo_accepted(verifier, pair, [1], length, samples=3000)
    assert abs(mean - formula) < 4.5 * stderr


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.6, 1.0])
def test_submaximal_extra_rejections_equal_sum_of_epsilons(fraction):
    # L = 1: rejection probability TV + eps, eps = sum sigma = fraction * (1 - TV) (seed 000 Prop 3.2)
    draft = torch.tensor([[[0.5, 0.3, 0.2]]], dtype=torch.float64)
    target = torch.tensor([[[0.2, 0.3, 0.5], [1 / 3, 1 / 3, 1 / 3]]], dtype=torch.float64)
    tv = 0.5 * float((draft[0, 0] - target[0, 0]).abs().sum())
    epsilon = fraction * (1 - tv)
    verifier = get_verifier("submaximal", fraction=fraction)

    def rejected(source):
        token = source.categorical(draft[0, 0])  # the draft draw, enumerated too
        return verifier.verify(torch.tensor([[token]]), draft, target, generator=source).num_accepted == 0

    exact = enumerate_outcomes(rejected).get(True, 0.0)
    assert exact == pytest.approx(tv + epsilon, abs=1e-12)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.multinomial(draft[0, 0], 4000, replacement=True, generator=generator)
    rate = np.mean([verifier.verify(t.view(1, 1), draft, target, generator=generator).num_accepted == 0 for t in tokens])
    assert abs(rate - (tv + epsilon)) < 4.5 * np.sqrt((tv + epsilon) * (1 - tv - epsilon) / 4000) + 1e-9


def test_submaximal_with_fraction_zero_is_sd():
    pair = random_pair(vocab_size=3, seed=4)
    for seed in range(20):
        tokens, draft, target = draw_drafts(pair, [], 1, 3, np.random.default_rng(seed))
        a = get_verifier("sd").verify(tokens, draft, target, generator=torch.Generator().manual_seed(seed))
        b = get_verifier("submaximal", fraction=0.0).verify(tokens, draft, target, generator=torch.Generator().manual_seed(seed))
        assert a == b


def test_greedy_equals_argmax_decoding():
    pair = random_pair(vocab_size=5, order=2, seed=9)
    verifier = get_verifier("greedy")
    expected, prefix = [], []
    while len(expected) < 12:  # the target's own greedy decoding
        expected.append(int(np.argmax(pair.target.conditional(expected))))
    rng = np.random.default_rng(0)
    while len(prefix) < 12:
        result = verifier.verify(*draw_drafts(pair, prefix, 1, 3, rng))
        prefix.extend(result.tokens)
    assert prefix[:12] == expected

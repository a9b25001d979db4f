"""rng: one inverse CDF for every draw; float64 uniforms; seeded draws repeat; enumeration hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from draftverify import rng
from draftverify.rng import BranchingSource, Coins


def test_sample_draws_each_row_from_its_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0], [0.1, 0.6, 0.3, 0.0]], dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([rng.sample(probs, generator) for _ in range(4000)])  # [n, 3]
    for row in range(3):
        counts = torch.bincount(draws[:, row], minlength=4).numpy()
        assert counts[probs[row].numpy() == 0].sum() == 0
        keep = probs[row] > 0
        if int(keep.sum()) == 1:
            assert counts[keep.numpy()].sum() == 4000
            continue
        expected = probs[row][keep].double().numpy()
        expected = expected / expected.sum() * 4000
        assert stats.chisquare(counts[keep.numpy()], expected).pvalue > 1e-3
    shifted = torch.tensor([[0.4, 0.1, 0.3, 0.2]], dtype=torch.float64)  # a wrong law must be told apart
    counts = torch.bincount(torch.stack([rng.sample(probs[:1], generator) for _ in range(4000)])[:, 0], minlength=4)
    assert stats.chisquare(counts.numpy(), shifted[0].double().numpy() * 4000).pvalue < 1e-3


def test_inverse_cdf_edges_never_return_a_zero_weight_index():
    weights = torch.tensor([[0.0, 2.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    picks = [int(rng.inverse_cdf(weights, torch.tensor([u], dtype=torch.float64))[0]) for u in (0.0, 0.5, 2 / 3 - 1e-12, 2 / 3, 1 - 1e-16)]
    assert picks == [1, 1, 1, 3, 3]
    # u * total rounding up to the total: the last index with weight, not the trailing zero
    assert int(rng.inverse_cdf(weights, torch.tensor([1.0], dtype=torch.float64))[0]) == 3


def test_categorical_takes_unnormalised_weights_and_refuses_zero_mass():
    generator = torch.Generator().manual_seed(1)
    draws = [rng.categorical(torch.tensor([0.0, 3.0, 1.0]), generator) for _ in range(2000)]
    assert 0 not in draws and abs(draws.count(1) / 2000 - 0.75) < 0.04
    with pytest.raises(ValueError, match="all weights are zero"):
        rng.categorical(torch.zeros(3), generator)


def test_categorical_falls_back_only_on_zero_mass():
    generator = torch.Generator().manual_seed(2)
    target = torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64)
    tiny = torch.tensor([0.0, 1e-300, 0.0], dtype=torch.float64)
    assert all(rng.categorical(tiny, generator, fallback=target) == 1 for _ in range(50))  # tiny but positive mass
    draws = [rng.categorical(torch.zeros(3, dtype=torch.float64), generator, fallback=target) for _ in range(400)]
    assert set(draws) == {0, 2}
    for weights in (tiny, torch.zeros(3, dtype=torch.float64)):  # a branching source sees the weights actually used
        class Record(BranchingSource):
            def categorical(self, chosen):
                return int(chosen.argmax())
        assert rng.categorical(weights, Record(), fallback=target) == (1 if weights.any() else 0)


def test_categorical_draws_what_inverse_cdf_draws_from_the_same_uniform():
    # the per-row verifiers (categorical) and the batched kernels (inverse_cdf) must agree bit for bit
    source = torch.Generator().manual_seed(3)
    for size in (5, 1000, 32001):
        for _ in range(30):
            weights = torch.rand(size, generator=source) ** 30
            weights[weights < 0.2] = 0.0  # mostly zeros, as a residual is
            weights[size // 2] += 0.01
            seed = int(torch.randint(0, 2**31, (1,), generator=source))
            one = rng.categorical(weights, torch.Generator().manual_seed(seed))
            uniform = torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
            assert one == int(rng.inverse_cdf(weights[None], uniform)[0]) and weights[one] > 0


def test_categorical_at_the_edge_uniforms_draws_what_inverse_cdf_draws(monkeypatch):
    # u = 0 and u * total exactly on a cumulative weight: the first index whose cumulative weight
    # exceeds the point, never a zero weight before it (random uniforms almost never land there)
    weights = torch.tensor([0.0, 2.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    for u, expected in ((0.0, 1), (2 / 3, 3), (0.5, 1)):
        monkeypatch.setattr(rng, "_uniforms", lambda shape, generator, u=u: torch.full((shape,), u, dtype=torch.float64))
        assert rng.categorical(weights, None) == expected
        assert int(rng.inverse_cdf(weights[None], torch.tensor([u], dtype=torch.float64))[0]) == expected


def test_a_bounded_coin_tests_the_smaller_probability_and_skips_what_it_cannot_use():
    calls = []

    def prob():
        calls.append(1)
        return 0.5

    coins = Coins(20_000, torch.Generator().manual_seed(4))
    wins = [coins.toss_below(i, 0.3, prob) for i in range(20_000)]
    assert abs(sum(wins) / 20_000 - 0.3) < 0.015  # min(bound, prob) = 0.3
    assert abs(len(calls) / 20_000 - 0.3) < 0.015  # prob() only below the bound
    same = Coins(20_000, torch.Generator().manual_seed(4))
    assert wins == [same.toss(i, 0.3) for i in range(20_000)]  # the same coins as an unbounded toss of min(bound, prob)

    class Record(BranchingSource):
        def bernoulli(self, probs):
            self.seen = float(probs[0])
            return torch.ones(1, dtype=torch.bool)

    source = Record()
    assert Coins(1, source).toss_below(0, 0.3, lambda: 0.2) and source.seen == 0.2


def test_seeded_draws_repeat_bit_for_bit():
    def run(seed):
        generator = torch.Generator().manual_seed(seed)
        coins = Coins(4, generator)
        return (rng.bernoulli(torch.full((5,), 0.5), generator).tolist(), rng.categorical(torch.ones(7), generator),
                rng.sample(torch.full((3, 6), 1 / 6), generator).tolist(), [coins.toss(i, 0.5) for i in range(4)])

    assert run(3) == run(3) and run(3) != run(4)


def test_bernoulli_uses_float64_uniforms_so_zero_probability_never_succeeds():
    generator = torch.Generator().manual_seed(0)
    assert not bool(rng.bernoulli(torch.zeros(100_000, dtype=torch.float32), generator).any())
    assert bool(rng.bernoulli(torch.ones(1000), generator).all())


def test_a_branching_source_decides_instead_of_drawing():
    class Always(BranchingSource):
        def bernoulli(self, probs):
            return torch.ones_like(probs, dtype=torch.bool)

        def categorical(self, weights):
            return int(weights.argmin())

    source = Always()
    assert rng.bernoulli(torch.zeros(2), source).tolist() == [True, True]
    assert rng.categorical(torch.tensor([3.0, 1.0, 2.0]), source) == 1
    assert Coins(2, source).toss(1, 0.0) is True


@pytest.mark.parametrize("bad", [42, "seed", np.random.default_rng(0)], ids=["int", "str", "numpy"])
def test_a_generator_that_is_not_a_torch_generator_is_a_value_error(bad):
    message = r"generator: expected a torch.Generator .* or None, got "
    with pytest.raises(ValueError, match=message):
        rng.check_generator(bad)
    for draw in (lambda: rng.sample(torch.full((2, 3), 1 / 3), bad), lambda: rng.categorical(torch.ones(3), bad),
                 lambda: rng.bernoulli(torch.full((3,), 0.5), bad), lambda: Coins(3, bad)):
        with pytest.raises(ValueError, match=message):
            draw()
    rng.check_generator(None)
    rng.check_generator(torch.Generator())
    rng.check_generator(BranchingSource())
    with pytest.raises(ValueError, match="or None, got draftverify.rng.BranchingSource"):
        rng.check_generator(BranchingSource(), branching=False)  # the decoding loop's draws cannot branch

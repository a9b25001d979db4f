"""The interpolated Kneser-Ney n-gram drafter: a hand-computed bigram case, a dictionary-based
reference implementation of the formula at order 3, distributions, save/load, bad input."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from draftverify.models.ngram import NGramDrafter


def test_hand_computed_bigram_case():
    # corpus 0 1 0 1 2, V = 3. Bigrams: (0,1) x2, (1,0), (1,2) -> n1 = 2, n2 = 1, D2 = 1/2.
    # Continuation counts N1+(. w): 1 for each of 0, 1, 2 -> n1 = 3, n2 = 0, D1 = 1, P1 = 1/3.
    drafter = NGramDrafter.train([[0, 1, 0, 1, 2]], vocab_size=3, order=2)
    assert drafter.discounts == pytest.approx((1.0, 0.5))
    probs = drafter.next_token_probs([[0], [2, 1], [2], []]).double()
    # after 0: c = 2, one follower; (2 - 1/2)/2 + (1/2 * 1/2) * 1/3 for token 1
    assert probs[0].tolist() == pytest.approx([1 / 12, 0.75 + 1 / 12, 1 / 12])
    # after 1: c = 2, followers 0 and 2 once each; (1 - 1/2)/2 + (1/2 * 2/2) * 1/3
    assert probs[1].tolist() == pytest.approx([0.25 + 1 / 6, 1 / 6, 0.25 + 1 / 6])
    # after 2: unseen context backs off to the unigram; empty context is the unigram
    assert probs[2].tolist() == pytest.approx([1 / 3] * 3)
    assert probs[3].tolist() == pytest.approx([1 / 3] * 3)


def _reference_kn(sequences, vocab_size, order):
    """Interpolated KN written directly from the formula with dictionaries (no shared code):
    returns prob(w, h); a context h of length k is scored at order k + 1, whose counts are raw at
    the top order and continuation counts below."""
    top = Counter(tuple(s[i:i + order]) for s in sequences for i in range(len(s) - order + 1))
    counts = {order: top}
    for n in range(order - 1, 0, -1):
        left = defaultdict(set)
        for gram in counts[n + 1]:
            left[gram[1:]].add(gram[0])
        counts[n] = Counter({gram: len(prev) for gram, prev in left.items()})

    def discount(c):
        n1 = sum(1 for v in c.values() if v == 1)
        n2 = sum(1 for v in c.values() if v == 2)
        return n1 / (n1 + 2 * n2) if n1 else 0.0

    def prob(w, h):
        c, d = counts[len(h) + 1], discount(counts[len(h) + 1])
        if not h:
            total = sum(c.values())
            return max(c.get((w,), 0) - d, 0) / total + d * len(c) / total / vocab_size
        followers = {g[-1]: v for g, v in c.items() if g[:-1] == h}
        if not followers:
            return prob(w, h[1:])
        total = sum(followers.values())
        return max(followers.get(w, 0) - d, 0) / total + d * len(followers) / total * prob(w, h[1:])

    return prob


def test_matches_reference_formula_at_order_3():
    rng = np.random.default_rng(0)
    # a skewed source so that counts of 1, 2 and more all occur
    sequences = [rng.choice(5, size=n, p=[0.4, 0.3, 0.15, 0.1, 0.05]).tolist() for n in (40, 25, 9)]
    drafter = NGramDrafter.train(sequences, vocab_size=5, order=3)
    reference = _reference_kn(sequences, 5, 3)
    contexts = [[], [0], [4], [1, 2], [0, 1], [4, 4], [3, 0, 0], [2, 2, 2, 1]]
    got = drafter.next_token_probs(contexts).double().numpy()
    for context, row in zip(contexts, got):
        expected = [reference(w, tuple(context[-2:])) for w in range(5)]
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def drafter():
    rng = np.random.default_rng(1)
    sequences = [rng.integers(0, 50, size=n) for n in rng.integers(1, 300, size=40)]
    return NGramDrafter.train(sequences, vocab_size=50, order=4)


def test_rows_are_distributions(drafter):
    rng = np.random.default_rng(2)
    contexts = [rng.integers(0, 50, size=n).tolist() for n in range(0, 12)]
    probs = drafter.next_token_probs(contexts)
    assert probs.dtype == torch.float32 and probs.shape == (12, 50)
    assert torch.all(probs > 0)
    torch.testing.assert_close(probs.double().sum(-1), torch.ones(12, dtype=torch.float64),
                               atol=1e-6, rtol=0)


def test_tensor_input_and_only_last_tokens_matter(drafter):
    contexts = torch.tensor([[7, 1, 2, 3], [9, 1, 2, 3], [1, 1, 2, 4]])
    probs = drafter.next_token_probs(contexts)
    torch.testing.assert_close(probs[0], probs[1])
    torch.testing.assert_close(probs[0], drafter.next_token_probs([[1, 2, 3]])[0])
    assert not torch.allclose(probs[0], probs[2])


def test_save_load_round_trip(drafter, tmp_path):
    drafter.save(tmp_path / "ngram")
    loaded = NGramDrafter.load(tmp_path / "ngram")
    assert (loaded.vocab_size, loaded.order) == (50, 4)
    contexts = [[], [3], [3, 4, 5], [10, 11, 12, 13]]
    torch.testing.assert_close(loaded.next_token_probs(contexts),
                               drafter.next_token_probs(contexts), atol=0, rtol=0)


def test_bad_input(drafter, tmp_path):
    with pytest.raises(ValueError, match="token ids"):
        drafter.next_token_probs([[1, 50]])
    with pytest.raises(ValueError, match="integer"):
        drafter.next_token_probs(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at least one"):
        drafter.next_token_probs([])
    with pytest.raises(ValueError, match="token ids"):
        NGramDrafter.train([[0, 1, 5]], vocab_size=5, order=2)
    with pytest.raises(ValueError, match="no sequence"):
        NGramDrafter.train([[0, 1]], vocab_size=5, order=3)
    with pytest.raises(FileNotFoundError):
        NGramDrafter.load(tmp_path / "missing")


def test_codes_use_the_whole_int64_range(tmp_path):
    vocab = 49152  # the default pair's: 49152^4 < 2^63, so order 4 fits
    top = vocab - 1
    drafter = NGramDrafter.train([[top] * 4] * 3 + [[1, 2, 3, 4]], vocab_size=vocab, order=4)  # the largest code
    drafter.save(tmp_path / "big")
    loaded = NGramDrafter.load(tmp_path / "big")
    contexts = [[top, top, top], [1, 2, 3]]
    probs = loaded.next_token_probs(contexts)
    torch.testing.assert_close(probs, drafter.next_token_probs(contexts), atol=0, rtol=0)
    assert probs[0, top] > 0.6  # (3 - D) / 3 with D = 1: the largest code was counted and found
    with pytest.raises(ValueError, match="int64"):
        NGramDrafter.train([[0, 1, 2, 3]], vocab_size=1 << 16, order=4)  # 2^64 codes

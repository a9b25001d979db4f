"""The default pair's n-gram drafter: which tokens are counted, and the held-out top-k bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.models.ngram import NGramDrafter
from draftverify.models.toy import tiny_causal_lm
from draftverify.train.ngram import (NGramConfig, answer_counts, exact_acceptance, shard_sequences, topk_acceptance,
                                     train_ngram)

VOCAB = 12


def _write_shard(path, sequences, starts, laws=None, top_k=3, seed=0):
    """A teacher shard (the layout of :func:`draftverify.train.teacher.label_shards`): the top-k of
    ``laws`` (one [A, V] tensor per sequence) or random top-k with some mass left out."""
    rng = np.random.default_rng(seed)
    lengths = [len(s) - start for s, start in zip(sequences, starts)]
    tokens = np.full((len(sequences), max(map(len, sequences))), -1, dtype=np.int32)
    top_ids = np.zeros((len(sequences), max(lengths), top_k), dtype=np.int32)
    top_probs = np.zeros((len(sequences), max(lengths), top_k), dtype=np.float16)
    for i, (s, length) in enumerate(zip(sequences, lengths)):
        tokens[i, : len(s)] = s
        if laws is None:
            top_ids[i, :length] = [rng.permutation(VOCAB)[:top_k] for _ in range(length)]
            top_probs[i, :length] = rng.dirichlet(np.ones(top_k + 1), size=length)[:, :top_k]
        else:
            top = torch.topk(laws[i], top_k, -1)
            top_ids[i, :length], top_probs[i, :length] = top.indices.numpy(), top.values.numpy()
    np.savez(path, tokens=tokens, answer_start=np.array(starts), answer_length=np.array(lengths),
             top_ids=top_ids, top_probs=top_probs)


@pytest.fixture
def shards(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    _write_shard(first / "shard-00000.npz", [[1, 2, 3, 4, 5, 6, 7], [8, 9, 1, 2, 3]], [4, 3])
    _write_shard(second / "shard-00000.npz", [[10, 11, 1, 2, 3, 4, 5, 11]], [5], seed=1)
    return [first, second]


def test_answers_come_with_the_context_before_them(shards):
    answers = [s.tolist() for s in shard_sequences(shards, prompts=False, context=2)]
    assert answers == [[3, 4, 5, 6, 7], [9, 1, 2, 3], [2, 3, 4, 5, 11]]  # padding dropped
    whole = [s.tolist() for s in shard_sequences(shards, prompts=True, context=2)]
    assert whole == [[1, 2, 3, 4, 5, 6, 7], [8, 9, 1, 2, 3], [10, 11, 1, 2, 3, 4, 5, 11]]
    assert answer_counts(shards) == (3, 3 + 2 + 3)


def test_the_drafter_counts_the_ngrams_that_end_in_an_answer_token(shards):
    contexts = [[1, 2], [2, 3], [4, 5], [10, 11], [9]]
    for prompts, expected in ((False, [[3, 4, 5, 6, 7], [9, 1, 2, 3], [2, 3, 4, 5, 11]]),
                              (True, [[1, 2, 3, 4, 5, 6, 7], [8, 9, 1, 2, 3], [10, 11, 1, 2, 3, 4, 5, 11]])):
        drafter = train_ngram(shards, VOCAB, NGramConfig(order=3, prompts=prompts))
        reference = NGramDrafter.train(expected, VOCAB, order=3)
        assert drafter.num_ngrams == reference.num_ngrams
        torch.testing.assert_close(drafter.next_token_probs(contexts), reference.next_token_probs(contexts),
                                   atol=0, rtol=0)
    with pytest.raises(FileNotFoundError, match="no teacher shards"):
        train_ngram([shards[0] / "nothing"], VOCAB)
    with pytest.raises(ValueError, match="order"):
        NGramConfig(order=0)


def test_the_topk_bound_scores_each_answer_token_after_its_prefix(shards):
    drafter = train_ngram(shards, VOCAB, NGramConfig(order=2, prompts=True))
    expected = []
    for folder in shards:
        data = np.load(folder / "shard-00000.npz")
        for b, (start, length) in enumerate(zip(data["answer_start"], data["answer_length"])):
            for j in range(length):
                draft = drafter.next_token_probs([data["tokens"][b, : start + j].tolist()])[0]   # [V]
                target = data["top_probs"][b, j].astype(np.float64)                           # [k]
                expected.append(np.minimum(target, draft[data["top_ids"][b, j]].numpy()).sum())
    result = topk_acceptance(drafter, shards)
    assert result["positions"] == 8 and result["mean"] == pytest.approx(np.mean(expected), rel=1e-6)
    assert 0 < result["mean"] < 1 and result["stderr"] > 0


def test_the_exact_acceptance_is_the_bound_when_the_shards_keep_the_whole_law(shards, tmp_path):
    target = tiny_causal_lm(VOCAB, width=16, layers=1, dtype=torch.float32).eval()
    drafter = train_ngram(shards, VOCAB, NGramConfig(order=2))
    sequences, starts = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 1, 2, 3]], [4, 3]
    with torch.no_grad():  # the target's law before each answer token
        laws = [torch.softmax(target(input_ids=torch.tensor([s])).logits[0, start - 1:-1].double(), -1)
                for s, start in zip(sequences, starts)]                                            # [A, V] each
    for top_k in (VOCAB, 3):
        (tmp_path / f"top{top_k}").mkdir()
        _write_shard(tmp_path / f"top{top_k}" / "shard-00000.npz", sequences, starts, laws, top_k=top_k)
    exact = exact_acceptance(drafter, target, [tmp_path / f"top{VOCAB}"])
    assert exact["positions"] == 3 + 2
    whole = topk_acceptance(drafter, [tmp_path / f"top{VOCAB}"])
    assert whole["mean"] == pytest.approx(exact["mean"], abs=2e-3)  # all V probabilities: the bound is exact (float16)
    assert topk_acceptance(drafter, [tmp_path / "top3"])["mean"] < exact["mean"] - 0.01  # a top-3 bound falls short

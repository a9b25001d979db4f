"""The slot table shared by every backend: forward, reindex and per-row crop."""

from __future__ import annotations

import pytest
import torch

from draftverify.models.base import HistoryModel, chunk_repeats


class Recorder(HistoryModel):
    """Logits that encode the context they were computed from: its length and last token."""

    vocab_size = 100

    def __init__(self):
        self.contexts = []

    def next_token_logits(self, contexts):
        self.contexts.append([list(c) for c in contexts])
        logits = torch.full((len(contexts), self.vocab_size), -1.0)
        for i, context in enumerate(contexts):
            logits[i, len(context)] = float(context[-1])
        return logits


def test_ragged_forward_sees_each_row_alone():
    model = Recorder()
    cache = model.new_cache(2)
    tokens = torch.tensor([[5, 6, 7], [0, 8, 9]])
    valid = torch.tensor([[True, True, True], [False, True, True]])
    model.forward(cache, tokens, valid, num_logits=2)
    assert model.contexts[-1] == [[5, 6], [5, 6, 7], [8], [8, 9]]
    assert cache.row(0) == [5, 6, 7] and cache.row(1) == [8, 9]
    assert model.lengths(cache).tolist() == [3, 2]


def test_crop_is_per_row_and_removes_columns_empty_in_every_row():
    model = Recorder()
    cache = model.new_cache(2)
    model.forward(cache, torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]))
    model.crop(cache, torch.tensor([3, 1]))
    assert cache.row(0) == [1, 2, 3] and cache.row(1) == [5]
    assert cache.tokens.shape[1] == 3  # column 3 held nothing in any row
    model.forward(cache, torch.tensor([[9], [10]]))
    assert model.contexts[-1] == [[1, 2, 3, 9], [5, 10]]


def test_reindex_repeats_and_drops_rows():
    model = Recorder()
    cache = model.new_cache(2)
    model.forward(cache, torch.tensor([[1, 2], [3, 4]]))
    model.reindex(cache, torch.tensor([1, 1, 0]))
    assert [cache.row(b) for b in range(3)] == [[3, 4], [3, 4], [1, 2]]
    model.reindex(cache, torch.tensor([2]))
    assert cache.batch_size == 1 and cache.row(0) == [1, 2]


def test_lists_and_tensors_give_the_same_crop_reindex_and_keep_draft():
    """The engine passes plain lists (no tensor op when nothing moves); users may pass tensors."""
    rows = []
    for as_list in (False, True):
        arg = (lambda values: values) if as_list else torch.tensor
        model = Recorder()
        cache = model.new_cache(2)
        model.forward(cache, torch.tensor([[1, 2, 3], [4, 5, 6]]))
        model.crop(cache, arg([3, 1]))
        model.reindex(cache, arg([1, 0, 0]))
        model.score_drafts(cache, torch.tensor([[7], [8], [9]]), None, torch.tensor([[[10, 11]], [[12, 13]], [[14, 15]]]))
        model.keep_draft(cache, arg([0, 0, 0]), arg([2, 0, 1]))
        rows.append([cache.row(b) for b in range(cache.batch_size)])
    assert rows[0] == rows[1] == [[4, 7, 10, 11], [1, 2, 3, 8], [1, 2, 3, 9, 14]]


@pytest.mark.parametrize(
    "call",
    [
        lambda m, c: m.forward(c, torch.tensor([1, 2])),  # not [B, S]
        lambda m, c: m.forward(c, torch.tensor([[1, 2]])),  # B = 1, cache has 2 rows
        lambda m, c: m.forward(c, torch.tensor([[1], [2]]), num_logits=2),  # num_logits > S
        lambda m, c: m.crop(c, torch.tensor([1, 0])),  # longer than held
        lambda m, c: m.crop(c, [0]),  # one length for two rows
        lambda m, c: m.crop(c, torch.tensor(0)),  # not [B]
        lambda m, c: m.new_cache(0),
    ],
)
def test_bad_calls_raise_value_error(call):
    model = Recorder()
    with pytest.raises(ValueError):
        call(model, model.new_cache(2))


def test_logits_of_padding_are_refused():
    model = Recorder()
    cache = model.new_cache(2)
    with pytest.raises(ValueError, match="padding"):
        model.forward(cache, torch.tensor([[1, 2], [3, 0]]), torch.tensor([[True, True], [True, False]]))


def test_chunk_repeats_points_each_shared_opening_at_its_first_computed_slot():
    """Row 1 opens as no earlier row; row 2 shares three tokens with row 0 (padded by two) and row 3
    four (padded by one), so their slots point at row 0's; row 4 shares five with row 3, whose first
    four are row 0's: those point at row 0, the fifth at row 3. A row alone, or rows that open
    differently, repeat nothing."""
    tokens = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6], [5, 6, 7, 9, 9, 9], [0, 5, 6, 7, 8, 1],
                           [5, 6, 7, 8, 1, 2]])
    valid = torch.ones_like(tokens, dtype=torch.bool)
    valid[0, :2] = valid[3, 0] = False
    assert chunk_repeats(tokens, valid).tolist() == [[-1] * 6, [-1] * 6, [2, 3, 4, -1, -1, -1], [-1, 2, 3, 4, 5, -1],
                                                     [2, 3, 4, 5, 23, -1]]
    assert chunk_repeats(tokens[:1], valid[:1]) is None
    assert chunk_repeats(torch.tensor([[1, 2], [2, 1]]), None) is None


@pytest.mark.parametrize("padding", ["none", "left", "scattered"])
def test_chunk_repeats_is_its_definition_on_random_batches(padding):
    """At the i-th valid slot of row b: the i-th valid slot of the first earlier row whose first i + 1
    valid tokens are row b's, else -1 (written out by comparing every pair of rows)."""
    generator = torch.Generator().manual_seed(1)
    for _ in range(200):
        rows, size = (int(n) for n in torch.randint(1, 8, (2,), generator=generator))
        tokens = torch.randint(0, 3, (rows, size), generator=generator)
        valid = {"none": None, "scattered": torch.rand(rows, size, generator=generator) < 0.7,
                 "left": torch.arange(size) >= torch.randint(0, size, (rows, 1), generator=generator)}[padding]
        slots = [[s for s in range(size) if valid is None or valid[b, s]] for b in range(rows)]
        opening = [[int(tokens[b, s]) for s in slots[b]] for b in range(rows)]
        expected = [[-1] * size for _ in range(rows)]
        for b in range(rows):
            for i, s in enumerate(slots[b]):
                first = next(c for c in range(b + 1) if opening[c][: i + 1] == opening[b][: i + 1])
                expected[b][s] = first * size + slots[first][i] if first < b else -1
        found = chunk_repeats(tokens, valid)
        assert (found.tolist() if found is not None else [[-1] * size for _ in range(rows)]) == expected
        assert (found is None) == all(v == -1 for row in expected for v in row)

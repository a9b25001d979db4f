"""probs: distribution checks name what is wrong and never renormalise; warping; the zero-residual fallback."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftverify.probs import as_tensor, check_distributions, sum_tolerance, warp
from tests.factories import random_distributions


def test_valid_rows_pass_in_both_dtypes_within_their_tolerance():
    rows = torch.from_numpy(random_distributions(0, 3, 4, 7))
    check_distributions(rows, "rows")
    check_distributions(rows.float(), "rows")
    check_distributions(rows.float() * (1 + 0.5 * sum_tolerance(torch.float32)), "rows")  # inside float32's tolerance
    with pytest.raises(ValueError, match=r"rows: rows must sum to 1 \(row \(0, 0\)"):
        check_distributions(rows * (1 + 10 * sum_tolerance(torch.float64)), "rows")  # outside float64's


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda r: r.masked_fill(torch.arange(5) == 2, float("nan")), "NaN or infinite"),
        (lambda r: r.masked_fill(torch.arange(5) == 2, float("inf")), "NaN or infinite"),
        (lambda r: r - 0.1 * (torch.arange(5) == 0) + 0.1 * (torch.arange(5) == 1), "negative"),
        (lambda r: r + (0.05 + 1e-12) * ((torch.arange(5) == 1).double() - (torch.arange(5) == 0).double()),
         "negative"),  # an entry of -1e-12: no slack
        (lambda r: r.long(), "dtype must be float32 or float64"),
        (lambda r: r[:, :0], "empty"),
        (lambda r: r * 2, "nothing is renormalised"),
    ],
)
def test_each_bad_input_is_named(change, message):
    rows = torch.full((2, 5), 0.2, dtype=torch.float64)
    rows[:, 0], rows[:, 1] = 0.05, 0.35
    with pytest.raises(ValueError, match=message):
        check_distributions(change(rows), "probs")


def test_as_tensor_views_numpy_and_refuses_lists():
    array = np.zeros(3)
    assert as_tensor(array, "x").data_ptr() == torch.from_numpy(array).data_ptr()
    with pytest.raises(ValueError, match="x: expected a torch.Tensor or numpy array, got list"):
        as_tensor([0.5, 0.5], "x")


@pytest.mark.parametrize("dtype", [object, str, "datetime64[s]"])
def test_as_tensor_refuses_non_numeric_arrays(dtype):
    with pytest.raises(ValueError, match="x: expected a numeric array, got dtype"):
        as_tensor(np.zeros(3, dtype=dtype), "x")


def test_as_tensor_copies_only_what_torch_cannot_view_and_detaches():
    array = np.array([0.1, 0.2, 0.7])
    for unviewable in (array[::-1], array.astype(">f8")):  # negative strides, big-endian
        assert as_tensor(unviewable, "x").tolist() == unviewable.tolist()
    strided = np.arange(6.0)[::2]  # positive strides: still a view
    assert as_tensor(strided, "x").data_ptr() == torch.from_numpy(strided).data_ptr()
    leaf = torch.tensor(array, requires_grad=True)
    assert not as_tensor(leaf, "x").requires_grad


def test_warp_temperature_top_k_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    torch.testing.assert_close(warp(logits), torch.softmax(logits, -1))
    torch.testing.assert_close(warp(logits, temperature=0.5), torch.softmax(logits / 0.5, -1))
    assert warp(torch.tensor([[1.0, 3.0, 3.0]]), temperature=0).tolist() == [[0.0, 1.0, 0.0]]  # ties: lowest index
    probs = torch.softmax(logits, -1)[0]  # 0.644, 0.237, 0.087, 0.032
    torch.testing.assert_close(warp(logits, top_k=2)[0], torch.cat([probs[:2] / probs[:2].sum(), torch.zeros(2)]))
    nucleus = warp(logits, top_p=0.7)  # the smallest prefix with mass >= 0.7: the first two tokens
    torch.testing.assert_close(nucleus[0], torch.cat([probs[:2] / probs[:2].sum(), torch.zeros(2)]))
    assert warp(logits, top_p=0.5)[0].tolist() == [1.0, 0.0, 0.0, 0.0]  # the top token already has 0.64
    for bad in (dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            warp(logits, **bad)


def _nucleus_by_rule(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Top-p's drops row by row as the rule reads: every token in descending order of probability,
    ties by the lower id first, dropped when the mass before it reaches top_p."""
    drop = torch.zeros(probs.shape, dtype=torch.bool)
    for row, (law, out) in enumerate(zip(probs.view(-1, probs.shape[-1]), drop.view(-1, probs.shape[-1]))):
        order = sorted(range(len(law)), key=lambda i: (-float(law[i]), i))
        before = torch.cumsum(law[order], 0) - law[order]  # the same prefix sums as the warp's sort
        out[order] = before >= top_p
    return drop


@pytest.mark.parametrize("vocab,scale,top_p", [(5000, 3.0, 0.9), (5000, 0.3, 0.95), (600, 1.0, 0.999), (300, 0.0, 0.5),
                                                (49, 2.0, 0.7)], ids=["peaked", "flat", "almost-all", "all-tied", "small"])
def test_the_nucleus_drops_what_the_rule_drops_ties_by_lower_id(vocab, scale, top_p):
    """Rounded logits tie many tokens, some across the nucleus's edge; flat laws need more than the
    first candidates (and all of them where every token ties)."""
    from draftverify.probs import _NUCLEUS_CANDIDATES, _nucleus_drop

    gen = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(2, 3, vocab, generator=gen) * scale * 4).round() / 4  # steps of 0.25: ties
    probs = torch.softmax(logits, -1)
    drop = _nucleus_drop(probs, top_p)
    assert torch.equal(drop, _nucleus_by_rule(probs, top_p))
    kept = (~drop).sum(-1)
    assert bool((kept >= 1).all())
    if scale == 0.3:
        assert int(kept.min()) > _NUCLEUS_CANDIDATES  # decided beyond the first candidates
    warped = warp(logits, top_p=top_p)
    assert torch.equal(warped == 0, drop)


def test_warp_takes_numpy_logits_as_the_verifiers_do():
    logits = np.array([[2.0, 1.0, 0.0]])
    torch.testing.assert_close(warp(logits, temperature=0.5), warp(torch.from_numpy(logits), temperature=0.5))


@pytest.mark.parametrize(
    "settings,argument",
    [
        (dict(top_k=1.5), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(temperature="0.5"), "temperature"),
        (dict(top_p="0.9"), "top_p"),
    ],
)
def test_warp_refuses_settings_of_the_wrong_type_naming_them(settings, argument):
    with pytest.raises(ValueError, match=argument):
        warp(torch.zeros(1, 3), **settings)


@pytest.mark.parametrize(
    "logits",
    [
        torch.tensor([[0.0, float("nan"), 1.0]]),
        torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]]),
        torch.tensor([[0.0, float("inf")]]),
        torch.tensor(1.0),
        torch.zeros(2, 0),
        [0.0, 1.0],
    ],
    ids=["nan", "all-minus-inf-row", "plus-inf", "0-d", "empty-V", "list"],
)
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_warp_refuses_logits_that_give_no_distribution(logits, temperature):
    with pytest.raises(ValueError, match="logits"):
        warp(logits, temperature)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "all -inf"])
@pytest.mark.parametrize("column", [0, 777, 49151])
@pytest.mark.parametrize("settings", [{}, dict(temperature=0.7), dict(top_k=50), dict(top_p=0.9)])
def test_warp_refuses_a_bad_row_among_good_ones_wherever_it_is(bad, column, settings):
    # rows of the target's width: the vectorised softmax, whose NaN rows the check reads
    logits = torch.randn(5, 49152, generator=torch.Generator().manual_seed(column))
    if bad == "all -inf":
        logits[3] = float("-inf")
    else:
        logits[3, column] = bad
    assert not warp(logits[[0, 1, 2, 4]], **settings).isnan().any()
    with pytest.raises(ValueError, match="logits: a row has"):
        warp(logits, **settings)


def test_warp_keeps_minus_inf_entries_beside_finite_ones_as_masked_tokens():
    assert warp(torch.tensor([[0.0, float("-inf")]])).tolist() == [[1.0, 0.0]]

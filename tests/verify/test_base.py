"""The verifier contract: registry, options, and a clear ValueError for every bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import draftverify
from draftverify import get_verifier, verifiers
from tests.factories import random_distributions, random_verify_inputs, registered_verifier

SINGLE = ["sd", "greedy", "bv", "gbv", "submaximal"]


def valid_inputs(num_drafts=1, length=3, vocab=5, dtype=torch.float32, seed=0):
    return random_verify_inputs(seed, num_drafts, length, vocab, dtype)


def test_registry_lists_every_single_draft_verifier_with_its_exactness():
    infos = {info.name: info for info in verifiers()}
    for name in SINGLE:
        assert infos[name].exact and not infos[name].multi_draft and infos[name].description
    assert "fraction" in infos["submaximal"].options


def test_unknown_name_and_option_are_value_errors():
    with pytest.raises(ValueError, match="unknown verifier 'nope'.*known: .*bv"):
        get_verifier("nope")
    with pytest.raises(ValueError, match="does not take option.*lam"):
        get_verifier("sd", lam=0.5)
    with pytest.raises(ValueError, match="fraction must lie in"):
        get_verifier("submaximal", fraction=1.5)


@pytest.mark.parametrize("name", SINGLE)
def test_valid_inputs_in_both_float_dtypes_and_numpy(name):
    for dtype in (torch.float32, torch.float64):
        tokens, draft, target = valid_inputs(dtype=dtype)
        result = get_verifier(name).verify(tokens, draft, target, generator=torch.Generator().manual_seed(0))
        assert len(result.tokens) == result.num_accepted + 1 and result.draft_index == 0
        assert 0 <= result.num_accepted <= 3 and all(0 <= t < 5 for t in result.tokens)
    result = get_verifier(name).verify(tokens.numpy(), draft.numpy(), target.numpy())
    assert len(result.tokens) == result.num_accepted + 1


def corrupt(kind):
    tokens, draft, target = valid_inputs()
    if kind == "tokens rank":
        tokens = tokens[0]
    elif kind == "float tokens":
        tokens = tokens.float()
    elif kind == "token out of range":
        tokens = tokens.clone()
        tokens[0, 1] = 5
    elif kind == "negative token":
        tokens = tokens.clone()
        tokens[0, 0] = -1
    elif kind == "draft shape":
        draft = draft[:, :2]
    elif kind == "target length":
        target = target[:, :3]
    elif kind == "vocab mismatch":
        target = torch.from_numpy(random_distributions(0, 1, 4, 6)).float()
    elif kind == "dtype mismatch":
        target = target.double()
    elif kind == "integer probs":
        draft = (draft * 0).long()
    elif kind == "nan":
        target = target.clone()
        target[0, 2, 1] = float("nan")
    elif kind == "inf":
        draft = draft.clone()
        draft[0, 0, 0] = float("inf")
    elif kind == "negative":
        target = target.clone()
        target[0, 1, 0] -= 0.3
        target[0, 1, 1] += 0.3
    elif kind == "not normalised":
        draft = draft * 1.01
    elif kind == "zero draft probability":
        draft = draft.clone()
        draft[0, 1] = 0
        draft[0, 1, (int(tokens[0, 1]) + 1) % 5] = 1
    elif kind == "two drafts":
        tokens, draft, target = valid_inputs(num_drafts=2)
    elif kind == "empty draft":
        tokens, draft, target = tokens[:, :0], draft[:, :0], target[:, :1]
    elif kind == "not an array":
        draft = draft.tolist()
    elif kind == "object array":
        target = target.numpy().astype(object)
    elif kind == "string tokens":
        tokens = tokens.numpy().astype(str)
    elif kind == "complex probs":
        draft, target = draft.to(torch.complex64), target.to(torch.complex64)
    elif kind == "empty vocabulary":
        draft, target = draft[..., :0], target[..., :0]
    return tokens, draft, target


KINDS = {
    "tokens rank": "shape \\[K, L\\]", "float tokens": "integer tensor", "token out of range": "must lie in",
    "negative token": "must lie in", "draft shape": "draft_probs: expected shape", "target length": "target_probs: expected shape",
    "vocab mismatch": "target_probs: expected shape", "dtype mismatch": "dtype mismatch", "integer probs": "float32 or float64",
    "nan": "NaN", "inf": "NaN or infinite", "negative": "negative", "not normalised": "sum to 1",
    "zero draft probability": "zero draft probability", "two drafts": "single-draft verifier given K = 2",
    "empty draft": "L >= 1", "not an array": "torch.Tensor or numpy array",
    "object array": "target_probs: expected a numeric array, got dtype object",
    "string tokens": "draft_tokens: expected a numeric array", "complex probs": "float32 or float64, got torch.complex64",
    "empty vocabulary": r"empty vocabulary \(V = 0\)",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", SINGLE)
def test_bad_input_is_a_clear_value_error(name, kind):
    with pytest.raises(ValueError, match=KINDS[kind]):
        get_verifier(name).verify(*corrupt(kind))


def test_validate_false_skips_value_passes_but_keeps_shape_checks():
    verifier = get_verifier("sd", validate=False)
    verifier.verify(*corrupt("not normalised"))  # the caller vouches for the values
    for kind in ("draft shape", "two drafts", "token out of range"):
        with pytest.raises(ValueError):
            verifier.verify(*corrupt(kind))


@pytest.mark.parametrize("name", SINGLE)
def test_verify_trusted_is_verify_without_checks_unless_validation_was_asked_for(name):
    tokens, draft, target = valid_inputs(length=4, seed=5)
    tokens = torch.as_tensor(tokens).to(torch.int64)
    draft, target = torch.as_tensor(draft), torch.as_tensor(target)
    fast = get_verifier(name, validate=False)
    for seed in range(5):  # same draws, same result as the checked call
        checked = fast.verify(tokens, draft, target, torch.Generator().manual_seed(seed))
        trusted = fast.verify_trusted(tokens, draft, target, torch.Generator().manual_seed(seed))
        assert (checked.tokens, checked.num_accepted) == (trusted.tokens, trusted.num_accepted)
    bad = [torch.as_tensor(a) for a in corrupt("not normalised")]
    with pytest.raises(ValueError):  # validate=True: the value checks still run
        get_verifier(name).verify_trusted(bad[0].to(torch.int64), bad[1], bad[2], torch.Generator())


def test_result_is_frozen_and_package_exports_contract():
    result = get_verifier("sd").verify(*valid_inputs())
    with pytest.raises(Exception):
        result.num_accepted = 3
    assert draftverify.VerifyResult is type(result)
    assert np.all(np.array(result.tokens) >= 0)


@pytest.mark.parametrize("name", SINGLE)
def test_seeded_calls_are_bit_identical(name):
    tokens, draft, target = valid_inputs(length=4, seed=3)
    verifier = get_verifier(name)
    runs = [[verifier.verify(tokens, draft, target, generator=torch.Generator().manual_seed(7)) for _ in range(5)] for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("bad", [42, np.random.default_rng(0)], ids=["int", "numpy"])
@pytest.mark.parametrize("name", [info.name for info in verifiers()])
def test_a_generator_that_is_not_a_torch_generator_is_a_value_error(name, bad):
    verifier = registered_verifier(name)
    num_drafts = 2 if verifier.multi_draft else 1
    with pytest.raises(ValueError, match="generator: expected a torch.Generator"):
        verifier.verify(*valid_inputs(num_drafts=num_drafts, dtype=torch.float64), generator=bad)


def test_probabilities_that_require_grad_are_read_without_their_graph():
    tokens, draft, target = valid_inputs(num_drafts=2, dtype=torch.float64)
    for name in ("kseq", "ot"):  # both hand the rows to numpy
        plain = get_verifier(name).verify(tokens, draft.detach(), target, generator=torch.Generator().manual_seed(0))
        graph = get_verifier(name).verify(tokens, draft.detach().requires_grad_(), target,
                                          generator=torch.Generator().manual_seed(0))
        assert graph == plain  # the same draws from the same values


@pytest.mark.parametrize(
    "name,options,message",
    [
        (None, {}, "verifier name: expected a str"),
        ("submaximal", {"fraction": None}, "option fraction expects a float, got None"),
        ("submaximal", {"fraction": "0.5"}, "option fraction expects a float, got '0.5'"),
        ("sd", {"validate": "no"}, "option validate expects a bool"),
        ("ot", {"solver": ["gr"]}, "option solver expects a str"),
        ("ot", {"tol": True}, "option tol expects a float"),
    ],
)
def test_option_of_the_wrong_type_is_a_value_error(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_verifier(name, **options)

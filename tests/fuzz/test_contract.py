"""Fuzzing the public boundaries (hypothesis): every registered verifier's ``verify``, ``ot.solve``
and ``TransportPlan.conditional`` are fed valid inputs with one thing broken (a shape, a dtype, a
value, an argument's type) and must raise a ``ValueError`` whose message names that problem; any
other exception fails the test.

Each strategy returns ``(call arguments, the expected message as a regex)``. Only the validation
runs (no solver, no sampling), so a few hundred examples take seconds.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftverify import ot, verifiers
from tests.factories import random_distributions, random_verify_inputs, registered_verifier

# draws take milliseconds of CPU; the health check times them by the wall clock, which a busy
# machine stretches (the test then fails for nothing)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VERIFIERS = {info.name: info.multi_draft for info in verifiers()}
NOT_ARRAYS = st.sampled_from([None, 3, 0.5, "probs", [0.5, 0.5], {"p": 1.0}])
NON_NUMERIC = st.sampled_from([object, str])  # numpy arrays torch cannot hold
BAD_FLOAT_DTYPES = st.sampled_from([torch.int64, torch.int32, torch.bool, torch.float16, torch.bfloat16, torch.complex64])
BAD_TOKEN_DTYPES = st.sampled_from([torch.float32, torch.float64, torch.bool, torch.complex64])
NOT_GENERATORS = st.sampled_from([0, 42, "seed", 1.5, np.random.default_rng(0), [torch.Generator()]])


# -- the verifier contract: draft_tokens [K, L], draft_probs [K, L, V], target_probs [K, L + 1, V] --


@st.composite
def contract_inputs(draw):
    name = draw(st.sampled_from(sorted(VERIFIERS)))
    num_drafts = draw(st.integers(1, 3)) if VERIFIERS[name] else 1
    length, vocab = draw(st.integers(1, 3)), draw(st.integers(2, 6))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    tokens, draft, target = random_verify_inputs(draw(st.integers(0, 2**16)), num_drafts, length, vocab, dtype)
    return name, [tokens, draft, target]


def _position(draw, array: torch.Tensor) -> tuple[int, ...]:
    return tuple(draw(st.integers(0, size - 1)) for size in array.shape)


@st.composite
def broken_structure(draw):
    """A shape, dtype or type problem: caught with ``validate=False`` too."""
    name, arrays = draw(contract_inputs())
    tokens, draft, target = arrays
    which = draw(st.integers(0, 2))
    label = ["draft_tokens", "draft_probs", "target_probs"][which]
    kind = draw(st.sampled_from(["rank", "length", "vocab", "empty", "dtype", "non-numeric", "not an array", "generator"]))
    keywords = {}
    if kind == "rank":  # one axis too many or too few
        arrays[which] = arrays[which][None] if draw(st.booleans()) else arrays[which][0]
        expected = rf"{label}: expected shape" if which else r"draft_tokens: expected shape \[K, L\]"
    elif kind == "length":  # L (or L + 1) off by one on one of the arrays
        arrays[which] = torch.cat([arrays[which], arrays[which][:, :1]], dim=1)
        expected = "draft_probs: expected shape" if which < 2 else "target_probs: expected shape"
    elif kind == "vocab":  # V differs between draft and target
        arrays[2] = torch.cat([target, target[..., :1]], dim=-1)
        expected = r"target_probs: expected shape .*\(V from draft_probs\)"
    elif kind == "empty":  # K = 0, L = 0 or V = 0
        axis = draw(st.sampled_from(["K", "L", "V"]))
        if axis == "V":
            arrays[1], arrays[2] = draft[..., :0], target[..., :0]
            expected = r"empty vocabulary \(V = 0\)"
        elif axis == "K":
            arrays = [a[:0] for a in arrays]
            expected = "need K >= 1 and L >= 1"
        else:
            arrays = [tokens[:, :0], draft[:, :0], target[:, :1]]
            expected = "need K >= 1 and L >= 1"
    elif kind == "dtype":
        if which == 0:
            arrays[0] = tokens.to(draw(BAD_TOKEN_DTYPES))
            expected = "draft_tokens: expected an integer tensor"
        elif draw(st.booleans()):
            arrays[which] = arrays[which].to(draw(BAD_FLOAT_DTYPES))
            expected = f"{label}: dtype must be float32 or float64"
        else:  # float32 against float64
            other = torch.float64 if arrays[which].dtype == torch.float32 else torch.float32
            arrays[which] = arrays[which].to(other)
            expected = "dtype mismatch: draft_probs is"
    elif kind == "non-numeric":
        arrays[which] = arrays[which].numpy().astype(draw(NON_NUMERIC))
        expected = f"{label}: expected a numeric array, got dtype"
    elif kind == "not an array":
        arrays[which] = draw(NOT_ARRAYS)
        expected = f"{label}: expected a torch.Tensor or numpy array"
    else:
        keywords["generator"] = draw(NOT_GENERATORS)
        expected = "generator: expected a torch.Generator"
    if draw(st.booleans()):  # numpy arrays take the same path
        arrays = [a.numpy() if isinstance(a, torch.Tensor) and a.dtype != torch.bfloat16 else a for a in arrays]
    return name, arrays, keywords, expected


@st.composite
def broken_values(draw):
    """A value problem: caught when ``validate`` is on (the default)."""
    name, arrays = draw(contract_inputs())
    tokens, draft, target = arrays
    kind = draw(st.sampled_from(["token range", "nan", "negative", "sum", "zero draft probability"]))
    which = draw(st.integers(1, 2))
    label = ["draft_tokens", "draft_probs", "target_probs"][which]
    probs = arrays[which] = arrays[which].clone()
    at = _position(draw, probs)
    if kind == "token range":
        vocab = draft.shape[-1]
        bad = draw(st.one_of(st.integers(-(2**62), -1), st.integers(vocab, 2**62)))
        arrays[0] = tokens.clone()
        arrays[0][_position(draw, tokens)] = bad
        expected = rf"draft_tokens: token ids must lie in \[0, V={vocab}\)"
    elif kind == "nan":
        probs[at] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
        expected = f"{label}: contains NaN or infinite entries"
    elif kind == "negative":  # moved mass: the row still sums to one
        shift = float(probs[at]) + draw(st.floats(1e-3, 1.0))
        probs[at] -= shift
        probs[(*at[:-1], (at[-1] + 1) % probs.shape[-1])] += shift
        expected = f"{label}: contains negative entries"
    elif kind == "sum":
        factor = draw(st.one_of(st.floats(0.0, 0.99), st.floats(1.01, 100.0)))
        probs[at[:-1]] *= factor
        expected = f"{label}: rows must sum to 1"
    else:  # the drafted token made impossible, its mass moved to another token
        arrays[1] = probs = draft.clone()
        k, i = _position(draw, tokens)
        token = int(tokens[k, i])
        probs[k, i, (token + 1) % probs.shape[-1]] += probs[k, i, token]
        probs[k, i, token] = 0.0
        expected = rf"draft_tokens\[{k}, {i}\] = {token} has zero draft probability"
    return name, arrays, expected


@FUZZ
@given(broken_structure(), st.booleans())
def test_verifiers_refuse_broken_structure_with_a_value_error(case, validate):
    name, arrays, keywords, expected = case
    with pytest.raises(ValueError, match=expected):
        registered_verifier(name, validate=validate).verify(*arrays, **keywords)


@FUZZ
@given(broken_values())
def test_verifiers_refuse_broken_values_with_a_value_error(case):
    name, arrays, expected = case
    with pytest.raises(ValueError, match=expected):
        registered_verifier(name).verify(*arrays)


def test_a_single_draft_verifier_refuses_several_drafts():
    for name, multi_draft in VERIFIERS.items():
        if not multi_draft:
            with pytest.raises(ValueError, match="single-draft verifier given K = 2 drafts"):
                registered_verifier(name).verify(*random_verify_inputs(0, num_drafts=2))


# -- ot.solve(target_probs [V], draft_probs [V], num_drafts, method, tol, **limits) -----------------


@st.composite
def broken_solve(draw):
    vocab = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**16))
    target, draft = random_distributions(seed, 2, vocab)
    args = [target, draft, draw(st.integers(1, 3))]
    keywords = {"method": draw(st.sampled_from(sorted(ot.METHODS)))}
    which = draw(st.integers(0, 1))
    label = ["target_probs", "draft_probs"][which]
    kind = draw(st.sampled_from(["rank", "empty", "vocab", "dtype", "non-numeric", "nan", "negative", "sum",
                                 "num_drafts", "too many drafts", "method", "tol", "limit", "unknown limit"]))
    if kind == "rank":
        args[which] = args[which][None] if draw(st.booleans()) else np.float64(1.0)
        expected = rf"{label}: expected shape \[V\]"
    elif kind == "empty":
        args[which] = args[which][:0]
        expected = f"{label}: empty tensor"
    elif kind == "vocab":
        args[1] = np.append(draft, 0.0)
        expected = f"target_probs has V = {vocab} but draft_probs has V = {vocab + 1}"
    elif kind == "dtype":
        args[which] = args[which].astype(draw(st.sampled_from([np.int64, np.bool_, np.float16, np.complex128])))
        expected = f"{label}: dtype must be float32 or float64"
    elif kind == "non-numeric":
        args[which] = draw(st.one_of(st.none(), st.text(max_size=3), NON_NUMERIC.map(args[which].astype)))
        expected = f"{label}: expected a numeric array"
    elif kind == "nan":
        args[which] = args[which].copy()
        args[which][draw(st.integers(0, vocab - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        expected = f"{label}: contains NaN or infinite entries"
    elif kind == "negative":
        args[which] = np.append(args[which], 0.0)
        args[which][-2:] += [1.0, -1.0]  # the sum is kept
        args[1 - which] = np.append(args[1 - which], 0.0)
        expected = f"{label}: contains negative entries"
    elif kind == "sum":
        args[which] = args[which] * draw(st.one_of(st.floats(0.0, 0.99), st.floats(1.01, 100.0)))
        expected = f"{label}: rows must sum to 1"
    elif kind == "num_drafts":
        args[2] = draw(st.one_of(st.integers(-5, 0), st.sampled_from([2.0, True, "2", None, np.array(2)])))
        expected = "num_drafts must be an integer >= 1"
    elif kind == "too many drafts":
        args[2] = draw(st.integers(ot.MAX_DRAFTS + 1, 2**70))
        expected = "above ot.solve's limit of 170"
    elif kind == "method":
        keywords["method"] = draw(st.one_of(st.text(max_size=8).filter(lambda m: m not in ot.METHODS), st.none()))
        expected = "unknown OT method"
    elif kind == "tol":
        keywords["tol"] = draw(st.one_of(st.floats(allow_nan=True).filter(lambda t: not 0 < t < 1),
                                         st.sampled_from(["1e-4", True, None])))
        expected = r"tol must be in \(0, 1\)"
    elif kind == "limit":
        key = draw(st.sampled_from(["max_iter", "max_arcs"]))
        keywords[key] = draw(st.sampled_from([0, -3, 1.5, float("nan"), float("inf"), "10", None, True]))
        expected = f"{key} must be an integer >= 1"
    else:
        keywords[draw(st.sampled_from(["budget", "maxiter", "timeout"]))] = 1
        expected = "unknown limit"
    return args, keywords, expected


@FUZZ
@given(broken_solve())
def test_ot_solve_refuses_broken_input_with_a_value_error(case):
    args, keywords, expected = case
    with pytest.raises(ValueError, match=expected):
        ot.solve(*args, **keywords)


PLAN_TARGET, PLAN_DRAFT = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.2, 0.7, 0.0])


@st.composite
def broken_drafts(draw):
    """A drafted tuple for a plan of n = 2 drafts over V = 4 (token 3 has zero draft probability)."""
    kind = draw(st.sampled_from(["length", "type", "range", "impossible"]))
    if kind == "length":
        return draw(st.lists(st.integers(0, 2), max_size=5).filter(lambda d: len(d) != 2)), "expected 2 integer token ids"
    if kind == "type":
        bad = draw(st.sampled_from([[0.0, 1.0], [True, False], ["a", "b"], None, [[0, 1]], np.array([0, 1], dtype=object)]))
        return bad, "expected 2 integer token ids"
    if kind == "range":
        bad = draw(st.one_of(st.integers(-(2**40), -1), st.integers(4, 2**40)))
        return [0, bad], r"token ids must lie in \[0, V=4\)"
    return [draw(st.integers(0, 2)), 3], "token 3 has zero draft probability"


@functools.cache
def plan_of_two_drafts() -> ot.TransportPlan:  # solved once: hypothesis runs the test body many times
    return ot.solve(PLAN_TARGET, PLAN_DRAFT, 2, method="maxflow-cs")


@settings(FUZZ, max_examples=60)
@given(broken_drafts())
def test_plan_conditional_refuses_broken_drafts_with_a_value_error(case):
    drafts, expected = case
    with pytest.raises(ValueError, match=f"drafts: {expected}"):
        plan_of_two_drafts().conditional(drafts)

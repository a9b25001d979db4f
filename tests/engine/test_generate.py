"""engine/generate: the public entry points refuse bad arguments with a ValueError naming them."""

from __future__ import annotations

import pytest
import torch

from draftverify.engine import DecodeConfig
from draftverify.engine.generate import generate, generate_batch, stream
from draftverify.testing import random_pair
from tests.factories import toy_models

PAIR = random_pair(vocab_size=5)
TARGET, DRAFT = toy_models(PAIR)


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        (dict(prompt_ids="text"), "prompt_ids"),
        (dict(prompt_ids=5), "prompt_ids"),
        (dict(prompt_ids=[1, "a"]), "prompt_ids"),
        (dict(prompt_ids=[1, 2.5]), "prompt_ids"),
        (dict(prompt_ids=torch.tensor(3)), "prompt_ids"),
        (dict(prompt_ids=[1], seed="abc"), "seed"),
        (dict(prompt_ids=[1], seed=2**64), "seed"),
        (dict(prompt_ids=[1], seed=-1), "seed"),
        (dict(prompt_ids=[1], eos_token_id=99999), "eos_token_id"),
        (dict(prompt_ids=[1], eos_token_id=-1), "eos_token_id"),
        (dict(prompt_ids=[1], method="greedy", temperature=1), "temperature"),
    ],
)
def test_generate_refuses_bad_arguments_naming_them(kwargs, argument):
    kwargs = {"method": "sd", "max_new_tokens": 2, **kwargs}
    with pytest.raises(ValueError, match=argument):
        generate(TARGET, DRAFT, **kwargs)
    with pytest.raises(ValueError, match=argument):
        list(stream(TARGET, DRAFT, **kwargs))


def test_generate_batch_refuses_a_text_for_the_prompts():
    with pytest.raises(ValueError, match="prompts"):
        generate_batch(TARGET, DRAFT, "text")


def test_greedy_decodes_at_temperature_0_when_none_is_given():
    assert DecodeConfig("greedy").temperature == 0.0 and DecodeConfig("sd").temperature == 1.0
    assert DecodeConfig("greedy", temperature=0).temperature == 0
    result = generate(TARGET, DRAFT, [1, 2], method="greedy", max_new_tokens=3)
    assert len(result.tokens) == 3
    assert generate(TARGET, DRAFT, torch.tensor([1, 2]), method="greedy", max_new_tokens=3).tokens == result.tokens

"""The lean Llama forward's rotary table (:class:`draftverify.models.llama.RotaryTable`): the
module's own cosines and sines, bit for bit, at any positions, as the table grows."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from draftverify.models.llama import RotaryTable, rotary_table


def rotary(**rope: object) -> LlamaRotaryEmbedding:
    config = LlamaConfig(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0, **rope})
    return LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (3, 7), (1, 130)])
def test_the_table_gives_the_modules_angles_bit_for_bit(shape):
    module = rotary()
    table = rotary_table(module)
    assert isinstance(table, RotaryTable)
    x = torch.zeros(2)
    gen = torch.Generator().manual_seed(shape[1])
    for top in (40, 300, 5000):  # the first call sizes the table, the later ones grow it
        positions = torch.randint(0, top, shape, generator=gen)
        positions[0, 0] = top - 1  # past what the table held before
        cos, sin = table(x, positions)
        expected_cos, expected_sin = module(x, positions)
        assert cos.shape == expected_cos.shape == (*shape, 64)
        assert torch.equal(cos, expected_cos) and torch.equal(sin, expected_sin)
        assert len(table.cos) >= top


def test_a_rope_whose_angles_follow_the_call_keeps_its_module():
    module = rotary(rope_type="dynamic", factor=2.0)
    assert rotary_table(module) is module


def test_a_negative_position_is_a_value_error_naming_positions():
    with pytest.raises(ValueError, match="positions"):
        RotaryTable(rotary())(torch.zeros(2), torch.tensor([[0, -1]]))

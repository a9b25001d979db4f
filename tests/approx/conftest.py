"""The tiny random pair the SPRINTER tests read hidden states and ratios from."""

from __future__ import annotations

import pytest
import torch

from draftverify.models.hf import TransformersModel
from tests.factories import tiny_lms


@pytest.fixture(scope="module")
def tiny():
    """A tiny GPT-2 target and draft (V = 30) whose embeddings are scaled up: peaked laws that
    differ, so ratios D(x) / T(x) spread far from 1. Scaled before they are wrapped: the lean
    forward packs the weights it is given."""
    target, draft = tiny_lms(30, seeds=(1, 2), dtype=torch.float32)
    with torch.no_grad():
        target.transformer.wte.weight.mul_(30)
        draft.transformer.wte.weight.mul_(30)
    return TransformersModel(target), TransformersModel(draft)

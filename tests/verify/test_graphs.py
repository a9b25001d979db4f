"""The batched kernels captured in CUDA graphs (:mod:`draftverify.verify.graphs`)."""

from __future__ import annotations

import pytest
import torch

from draftverify import get_verifier
from draftverify.verify.batched import draw_uniforms
from draftverify.verify.graphs import GraphedKernel
from tests.verify.test_batched import METHODS, flat, random_rows

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
LENGTHS = [1, 4, 2, 8, 3, 0] * 6  # a ragged batch (L_b = 0: a bonus token only)


def batch(seed: int):
    """The flattened layout of LENGTHS over V = 300 with its uniforms (CPU)."""
    tokens, draft, target, cu = flat(random_rows(LENGTHS, 300, torch.float32, seed=seed))
    return tokens, draft, target, cu, draw_uniforms(tokens.shape[0], cu.shape[0], torch.Generator().manual_seed(seed))


def test_capture_refuses_cpu_arrays_and_a_verifier_without_kernel():
    arrays = batch(0)
    with pytest.raises(ValueError, match="captures CUDA tensors"):
        GraphedKernel(get_verifier("sd"), *arrays, max_draft_len=8)
    with pytest.raises(ValueError, match="'gbv' has no batched kernel"):
        GraphedKernel(get_verifier("gbv"), *arrays, max_draft_len=8)


@CUDA
@pytest.mark.parametrize("name,options", METHODS)
def test_replays_equal_the_kernel_on_new_values(name, options):
    verifier = get_verifier(name, **options)
    graphed = GraphedKernel(verifier, *(a.cuda() for a in batch(1)), max_draft_len=8)
    for seed in (2, 3, 1):  # new values, then the captured ones again: the graph is reused
        arrays = batch(seed)
        expected = verifier.kernel(*arrays, 8)
        result = graphed(*(a.cuda() for a in arrays))
        assert torch.equal(result.output_tokens.cpu(), expected.output_tokens)
        assert torch.equal(result.num_accepted.cpu(), expected.num_accepted)


@CUDA
def test_replay_refuses_other_shapes():
    graphed = GraphedKernel(get_verifier("sd"), *(a.cuda() for a in batch(1)), max_draft_len=8)
    tokens, draft, target, cu, uniforms = (a.cuda() for a in batch(2))
    with pytest.raises(ValueError, match="target_probs: captured as"):
        graphed(tokens, draft, target.double(), cu, uniforms)
    with pytest.raises(ValueError, match="uniforms: captured with it"):
        graphed(tokens, draft, target, cu, None)

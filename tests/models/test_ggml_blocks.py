"""The GGUF block product: weights found exactly as GGML Q4_1 / Q8_0 blocks (a target's never
quantized; a feature draft's rounded to Q8_0 blocks once, ``quantize_q8_0``), and
the block kernel's products bit-identical to the float32 panel product over the same weights, for
every row count and every shape the models use; a Llama target run on its blocks decodes exactly
what it decodes on float32 weights. The blocks times 8-bit activations (llama.cpp's arithmetic, a
model of its own): the rounding, its formula against float64, the VNNI kernel against the formula,
row by row the same bits whatever the other rows. Weights here are dequantized from random codes as ggml
dequantizes them (``d q + m`` in float32)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from draftverify.models import gpt2 as gpt2_module
from draftverify.models.ggml_blocks import (BLOCK, BlockLinear, dequantize, find_q4_1, find_q8_0, int8_activation_product,
                                            int8_activations_compiled, int8_activations_isa, quantize_q8_0, random_q4_1, round_activations)
from draftverify.models.gpt2 import Linear, q8_compiled
from draftverify.models.hf import TransformersModel
from draftverify.models.panel_mm import PanelLinear, kernel
from draftverify.models.toy import tiny_causal_lm
from tests.factories import block_llama, q4_1_weight, q8_0_weight

needs_avx512 = pytest.mark.skipif("avx512" not in kernel().isas, reason="the block product runs on AVX-512 CPUs only")
needs_vnni = pytest.mark.skipif(not int8_activations_compiled(),
                                reason="the 8-bit activation product runs compiled on AVX2 with F16C or AVX-512 VNNI only")
SHAPES = [(576, 576), (576, 960), (1536, 576), (64, 5), (32, 17)]  # [in, out]: SmolLM2's products, odd ones
WIDE = [(576, 3072), (576, 49152)]  # its gate and up, its output layer: fewer row counts (time)


def weight_and_bias(shape: tuple[int, int], fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A [K, N] weight of random blocks in ``fmt`` and a bias [N]."""
    weight = q4_1_weight(shape, 2) if fmt == "Q4_1" else q8_0_weight(shape, 2)[0]
    return weight, torch.randn(shape[1], generator=torch.Generator().manual_seed(3))


def test_dequantize_is_ggml_formula_and_random_blocks_are_found():
    q, d, m = torch.tensor([[0], [15]] * 16, dtype=torch.uint8), torch.tensor([[0.5]]).half(), torch.tensor([[-1.0]]).half()
    assert dequantize(q, d, m)[:2, 0].tolist() == [-1.0, 6.5] and dequantize(q, d)[:2, 0].tolist() == [0.0, 7.5]
    weight = random_q4_1((96, 20), torch.Generator().manual_seed(0))
    assert find_q4_1(weight) is not None and 0.5 < weight.std() * 96 ** 0.5 < 2
    with pytest.raises(ValueError, match="multiple of 32"):
        random_q4_1((40, 8), torch.Generator())
    with pytest.raises(ValueError, match="scales"):
        dequantize(q, torch.ones(2, 1).half())


def test_q4_1_blocks_are_found_exactly_and_nothing_else_is():
    weight = q4_1_weight((128, 40), 0)
    found_q, found_d, found_m = find_q4_1(weight)
    rebuilt = found_q.float() * found_d.float().repeat_interleave(BLOCK, 0) + found_m.float().repeat_interleave(BLOCK, 0)
    assert torch.equal(rebuilt, weight)  # every weight, bit for bit
    nudged = weight.clone()
    nudged[5, 3] = torch.nextafter(nudged[5, 3], torch.tensor(1.0))  # one weight one ulp off
    assert find_q4_1(nudged) is None
    assert find_q4_1(torch.randn(64, 16)) is None  # a float32 weight is not a block format
    assert find_q4_1(q8_0_weight((64, 16), 1)[0]) is None  # 255 levels do not fit 16


def test_q8_0_blocks_are_found_exactly_and_nothing_else_is():
    weight, q, d = q8_0_weight((96, 33), 0)
    found_q, found_d = find_q8_0(weight)
    assert torch.equal(found_q, q) and torch.equal(found_d, d)
    nudged = weight.clone()
    nudged[40, 7] = torch.nextafter(nudged[40, 7], torch.tensor(1.0))
    assert find_q8_0(nudged) is None
    assert find_q8_0(torch.randn(64, 16)) is None


def test_a_weight_rounded_to_q8_0_blocks_is_found_exactly_within_a_step_and_a_sixteenth():
    weight = torch.randn(96, 40, generator=torch.Generator().manual_seed(5)) * 0.05
    weight[32:64, 3] = 0  # a block of zeros stays zeros
    rounded = quantize_q8_0(weight)
    q, d = find_q8_0(rounded)
    assert torch.equal(q.float() * d.float().repeat_interleave(BLOCK, 0), rounded)
    step = d.float().repeat_interleave(BLOCK, 0)  # each weight's block scale (its float16 value)
    # ggml rounds q with the float32 scale and stores it in float16 (relative error <= 2^-11), so
    # |w - d q| <= d / 2 + 127 |d - d16| <= (1/2 + 127 / 2048) d, with a little for the float32 arithmetic
    assert bool(((rounded - weight).abs() <= step * (0.5 + 127 / 2048) * (1 + 1e-3)).all())
    assert not torch.equal(rounded, weight)
    assert bool((rounded[32:64, 3] == 0).all())
    assert torch.equal(quantize_q8_0(rounded), rounded)  # blocks already: unchanged
    blocks, _, _ = q8_0_weight((64, 9), 1)
    assert torch.equal(quantize_q8_0(blocks), blocks)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q8_0(torch.randn(40, 8))
    with pytest.raises(ValueError, match="overflows float16"):
        quantize_q8_0(torch.full((32, 2), 1e8))


@pytest.mark.parametrize("scale", [0.05, 1e-4, 1e-5, 1e-7, 1e-9])
def test_rounding_to_q8_0_blocks_is_ggmls_bit_for_bit(scale):
    """The reference quantizer of the ``gguf`` package (ggml's ``quantize_row_q8_0_ref``) gives the
    same codes and scales, weights whose float16 scale is a subnormal (1e-4, 1e-5, refused before
    2026-11-27) and weights below its smallest scale (zeros) included."""
    from gguf import GGMLQuantizationType, quants

    weight = torch.randn(64, 24, generator=torch.Generator().manual_seed(8)) * scale
    weight[:, 0] = torch.tensor([0.5, -0.5, 1.5, 2.5] * 16) * weight[:, 0].abs().max() / 63.5  # ties (x / d = k + 1/2)
    rounded = quantize_q8_0(weight)
    packed = quants.quantize(weight.T.contiguous().numpy(), GGMLQuantizationType.Q8_0)  # rows along K, as ggml's
    expected = quants.dequantize(packed, GGMLQuantizationType.Q8_0).T
    assert torch.equal(rounded, torch.from_numpy(np.ascontiguousarray(expected)))
    found = find_q8_0(rounded)
    assert found is not None and torch.equal(found[0].float() * found[1].float().repeat_interleave(BLOCK, 0), rounded)


def test_q8_products_are_the_rounded_blocks_times_8_bit_activations():
    weight = torch.randn(64, 24, generator=torch.Generator().manual_seed(6))
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(7))
    product = Linear.of(weight, None, "q8", "eager")
    assert isinstance(product, BlockLinear) and product.activations == "int8" and product.format == "Q8_0"
    torch.testing.assert_close(product(x), BlockLinear(quantize_q8_0(weight), None, "int8", compiled=False)(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="panel-avx2"):
        Linear.of(weight, None, "q8", "panel-avx2")
    for quantize in ("q8", "gguf-q8"):  # a kernel that names nothing is refused here as for float32 weights
        with pytest.raises(ValueError, match="kernel must be"):
            Linear.of(weight, None, quantize, "panel-sse")
    assert not q8_compiled("eager") and not q8_compiled("panel-avx2")
    assert q8_compiled() == q8_compiled("panel") == int8_activations_compiled()


def test_weights_that_cannot_be_blocks_are_refused_by_name():
    with pytest.raises(ValueError, match="multiple of 32"):
        find_q4_1(torch.randn(48, 16))
    with pytest.raises(ValueError, match="float32"):
        find_q8_0(torch.randn(64, 16, dtype=torch.float64))


@needs_avx512
@pytest.mark.parametrize("shape", SHAPES + WIDE)
@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0"])
def test_the_block_product_is_bit_identical_to_the_float32_panel_product(shape, fmt):
    weight, bias = weight_and_bias(shape, fmt)
    blocks, panels = BlockLinear(weight, bias), PanelLinear(weight, bias, isa="avx512")
    assert blocks.format == fmt
    x = torch.randn(49, shape[0], generator=torch.Generator().manual_seed(4))
    counts = [*range(1, 34), 48, 49] if shape in SHAPES else [1, 2, 3, 5, 9, 17, 24, 25]
    for rows in counts:  # every accumulator layout, then several passes of 24 rows
        assert torch.equal(blocks(x[:rows]), panels(x[:rows])), rows
    torch.testing.assert_close(blocks(x), x @ weight + bias, rtol=1e-5, atol=1e-4)
    ratio = (5 if fmt == "Q4_1" else 8.5) / 32
    assert blocks.nbytes <= ratio * panels.nbytes * 1.01 + 64 * shape[1]  # 16-column padding aside


@needs_avx512
def test_the_block_product_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="not exactly GGML Q4_1 or Q8_0"):
        BlockLinear(torch.randn(64, 16), None)
    blocks = BlockLinear(q4_1_weight((64, 16), 0), None)
    with pytest.raises(RuntimeError, match="float32"):
        blocks(torch.ones(2, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="conflicts"):
        Linear.of(q4_1_weight((64, 16), 0), None, "gguf", "eager")


def test_without_avx512_a_gguf_target_runs_its_float32_weights_with_a_warning(monkeypatch):
    from draftverify.models import panel_mm

    monkeypatch.setattr(gpt2_module, "panel_kernel", lambda: panel_mm.KernelStatus(isas=("avx2",)) if kernel().compiled
                        else panel_mm.KernelStatus(reason="test"))
    gpt2_module._gguf_fallback.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        product = Linear.of(q4_1_weight((64, 16), 0), None, "gguf")
    assert not isinstance(product, BlockLinear)
    assert any("needs AVX-512" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="AVX-512"):
        Linear.of(q4_1_weight((64, 16), 0), None, "gguf", "panel")


@needs_avx512
def test_a_llama_target_on_its_blocks_scores_and_decodes_exactly_as_on_float32_weights():
    from draftverify.engine import generate

    model = block_llama()
    float32, blocks = TransformersModel(model, kernel="panel-avx512"), TransformersModel(model, quantize="gguf")
    assert blocks.product_bytes < 0.3 * float32.product_bytes
    tokens = torch.randint(0, 50, (3, 11), generator=torch.Generator().manual_seed(0))
    logits = [target.forward(target.new_cache(3), tokens, num_logits=11) for target in (float32, blocks)]
    assert torch.equal(*logits)  # [B, S, V], bit for bit
    draft = TransformersModel(tiny_causal_lm(50, width=32, dtype=torch.float32, seed=1))
    runs = [generate(target, draft, [1, 2, 3], "bv", max_new_tokens=24, draft_length=3, seed=7) for target in (float32, blocks)]
    assert runs[0].tokens == runs[1].tokens and len(runs[0].tokens) == 24


def test_a_target_whose_weights_are_not_blocks_is_refused_at_load():
    if "avx512" not in kernel().isas:
        pytest.skip("without AVX-512 a gguf target falls back to float32 (previous test)")
    with pytest.raises(ValueError, match="GGML"):
        TransformersModel(tiny_causal_lm(50, arch="llama", width=64, dtype=torch.float32), quantize="gguf")


def test_a_target_whose_weights_are_not_blocks_is_refused_for_8_bit_activations_on_any_cpu():
    with pytest.raises(ValueError, match="GGML"):  # the eager path checks the weights as the kernel's does
        TransformersModel(tiny_causal_lm(50, arch="llama", width=64, dtype=torch.float32), quantize="gguf-q8", kernel="eager")


def test_activations_are_rounded_to_8_bits_per_block_of_32():
    x = torch.zeros(2, 64)
    x[0, :4] = torch.tensor([63.5, 0.75, 0.25, -1.25])  # max |x| = 63.5: d = 0.5, q = x / 0.5 to nearest even
    q, d = round_activations(x)
    assert d.tolist() == [[0.5, 0.0], [0.0, 0.0]]  # a block of zeros: d = 0, q = 0
    assert q[0, 0, :4].tolist() == [127.0, 2.0, 0.0, -2.0] and q[1].abs().sum() == 0
    with pytest.raises(ValueError, match="multiple of 32"):
        round_activations(torch.ones(1, 40))


@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0"])
def test_the_int8_activation_formula_is_the_blocks_times_the_rounded_activations(fmt):
    weight = q4_1_weight((96, 40), 1) if fmt == "Q4_1" else q8_0_weight((96, 40), 1)[0]
    found = find_q4_1(weight) if fmt == "Q4_1" else (*find_q8_0(weight), None)
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(2))
    q, d = round_activations(x)
    rounded = (q * d[..., None]).view(5, 96).double()  # each activation as d_x q_x
    expected = rounded @ weight.double()
    torch.testing.assert_close(int8_activation_product(x, *found).double(), expected, rtol=1e-5, atol=1e-5)
    assert (rounded - x).abs().max() <= d.max() / 2 + 1e-7  # the rounding moves an activation at most half a step


@needs_vnni
@pytest.mark.parametrize("shape", SHAPES + WIDE)
@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0"])
def test_the_vnni_product_computes_the_formula_and_each_row_alone(shape, fmt):
    """The compiled 8-bit activation product (VNNI where the CPU has it, else AVX2): each row's bits
    its own, the formula up to float32 rounding order, and on a VNNI CPU the AVX2 path's bits the
    VNNI path's (the same integer sums, the same float32 arithmetic after them)."""
    weight, bias = weight_and_bias(shape, fmt)
    compiled, eager = BlockLinear(weight, bias, "int8"), BlockLinear(weight, bias, "int8", compiled=False)
    assert compiled.format == fmt and compiled.compiled and not eager.compiled
    x = torch.randn(19, shape[0], generator=torch.Generator().manual_seed(4))
    x[3, : shape[0] // 2] = 0  # blocks of zeros
    alone = torch.cat([compiled(x[i: i + 1]) for i in range(len(x))])
    counts = [*range(1, 20)] if shape in SHAPES else [1, 2, 5, 9, 17]
    for rows in counts:  # every row-block size: a row's bits do not depend on the others
        assert torch.equal(compiled(x[:rows]), alone[:rows]), rows
    scale = (x.abs().amax() * weight.abs().amax(0).sum()).item()  # a bound on |out|
    torch.testing.assert_close(alone, eager(x), rtol=1e-5, atol=2e-7 * scale)  # float32 rounding order only
    if "avx512" in kernel().isas:  # the float32-activation blocks run there only
        assert compiled.nbytes == BlockLinear(weight, bias).nbytes  # the same bytes streamed as they stream
    if torch.ops.draftverify.block_q8_vnni():
        avx2 = torch.ops.draftverify.block_q8_mm(x, compiled.codes, compiled.scales, compiled.offsets, compiled.bias,
                                                 compiled.out_features, "avx2")
        assert torch.equal(avx2, alone)


@needs_avx512
@pytest.mark.parametrize("activations", ["float32", "int8"])
@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0"])
def test_few_rows_read_block_panels_side_by_side_with_the_bits_of_one_panel_at_a_time(fmt, activations):
    """As the float32 panels (test_panel_mm): rows read 2 to 4 block panels side by side and run the
    panels left over alone; each 16 columns' bits are those of a product over those columns alone,
    for both activation kinds (576 x 200: 13 panels, some left over at every stream count)."""
    if activations == "int8" and not int8_activations_compiled():
        pytest.skip("the 8-bit activation product runs on AVX-512 VNNI only")
    weight, bias = weight_and_bias((576, 200), fmt)
    linear = BlockLinear(weight, bias, activations)
    x = torch.randn(6, 576, generator=torch.Generator().manual_seed(12))
    for rows in range(1, 7):
        together = linear(x[:rows])
        for col in range(0, 200, 16):
            alone = BlockLinear(weight[:, col:col + 16], bias[col:col + 16], activations)
            assert torch.equal(together[:, col:col + 16], alone(x[:rows])), (rows, col)


@needs_vnni
def test_the_vnni_product_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="activations must be"):
        BlockLinear(q4_1_weight((64, 16), 0), None, "int4")
    with pytest.raises(ValueError, match="conflicts"):
        Linear.of(q4_1_weight((64, 16), 0), None, "gguf-q8", "panel-avx2")
    blocks = BlockLinear(q4_1_weight((64, 16), 0), None, "int8")
    with pytest.raises(RuntimeError, match="multiple of 32"):
        torch.ops.draftverify.block_q8_mm(torch.ones(1, 48), blocks.codes, blocks.scales, blocks.offsets, None, 16)
    with pytest.raises(RuntimeError, match="codes must be"):  # the float32-activation layout is not this one
        torch.ops.draftverify.block_q8_mm(torch.ones(1, 64), blocks.codes[:, :16], blocks.scales, blocks.offsets, None, 16)
    with pytest.raises(RuntimeError, match="isa must be"):
        torch.ops.draftverify.block_q8_mm(torch.ones(1, 64), blocks.codes, blocks.scales, blocks.offsets, None, 16, "sse")
    if not torch.ops.draftverify.block_q8_vnni():
        with pytest.raises(RuntimeError, match="VNNI"):
            torch.ops.draftverify.block_q8_mm(torch.ones(1, 64), blocks.codes, blocks.scales, blocks.offsets, None, 16, "avx512")


def test_the_8_bit_product_names_the_instruction_set_it_runs_and_none_where_it_runs_eagerly(monkeypatch):
    from draftverify.models import ggml_blocks

    if int8_activations_compiled():
        assert int8_activations_isa() == ("avx512" if torch.ops.draftverify.block_q8_vnni() else "avx2")
    monkeypatch.setattr(ggml_blocks, "int8_activations_compiled", lambda: False)
    with pytest.raises(ValueError, match="does not run compiled"):
        ggml_blocks.int8_activations_isa()


def test_without_vnni_the_int8_activation_product_runs_eagerly_with_a_warning(monkeypatch):
    from draftverify.models import ggml_blocks

    monkeypatch.setattr(ggml_blocks, "int8_activations_compiled", lambda: False)
    ggml_blocks._eager_int8_warning.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        product = Linear.of(q4_1_weight((64, 16), 0), None, "gguf-q8")
    assert isinstance(product, BlockLinear) and not product.compiled
    assert any("runs eagerly" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="VNNI"):
        Linear.of(q4_1_weight((64, 16), 0), None, "gguf-q8", "panel")


def test_a_llama_target_on_blocks_times_8_bit_activations_decodes_as_its_eager_twin():
    from draftverify.engine import generate

    model = block_llama()
    eager = TransformersModel(model, quantize="gguf-q8", kernel="eager")
    float32 = TransformersModel(model, kernel="eager")
    tokens = torch.randint(0, 50, (3, 11), generator=torch.Generator().manual_seed(0))
    logits = {name: target.forward(target.new_cache(3), tokens, num_logits=11) for name, target in
              (("eager", eager), ("float32", float32))}
    assert 0 < (logits["eager"] - logits["float32"]).abs().max() < 0.05  # a model of its own, near the float32 one
    assert eager.weight_format == "gguf-q8"
    if not int8_activations_compiled():
        return
    compiled = TransformersModel(model, quantize="gguf-q8")
    gap = (compiled.forward(compiled.new_cache(3), tokens, num_logits=11) - logits["eager"]).abs().amax(-1)  # [3, 11]
    # the same arithmetic in another order: each position agrees to float32 rounding unless an activation's 8-bit
    # rounding flipped on it (an input a last bit either side of a rounding boundary: 1 of these 33 positions on an
    # Intel Xeon, 0.0105 apart, none on an AMD EPYC); a wrong product or layer moves every position
    assert (gap < 1e-4).float().mean() >= 0.9 and gap.max() < 0.05, gap
    draft = TransformersModel(tiny_causal_lm(50, width=32, dtype=torch.float32, seed=1))
    runs = [generate(target, draft, [1, 2, 3], "bv", max_new_tokens=24, draft_length=3, seed=7) for target in (compiled, eager)]
    assert runs[0].tokens == runs[1].tokens and len(runs[0].tokens) == 24  # logits a rounding apart: the same tokens here

"""The panel kernel against torch.mm on every product shape the models use (the real SmolLM2-135M
target's, the embedded GPT-2 target's, odd sizes), for 1 to 32 rows, in each instruction set this
CPU runs (AVX2 everywhere, AVX-512 where the CPU has it; a CPU without it skips those cases); its
int8 form against the dequantized float32 product; the eager fallback and its warning.

Tolerances: weights scaled by K^-1/2 and standard normal inputs give outputs of order 1; two float32
sums of K products in different orders then differ by a few units of 1e-6 (K <= 1536), so
``rtol = atol = 1e-5`` (torch's float32 default is rtol 1.3e-6, atol 1e-5)."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

from draftverify.models import panel_mm
from draftverify.models.gpt2 import Linear
from draftverify.models.panel_mm import ISAS, PANEL_WIDTHS, PanelLinear, kernel, pack, quantize_int8

TOL = dict(rtol=1e-5, atol=1e-5)
SMOLLM2 = [(576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152)]  # [in, out]; vocabulary 49152
EMBEDDED = [(256, 768), (256, 256), (256, 1024), (1024, 256), (256, 8192)]  # 6 x 256 GPT-2, vocabulary 8192
ODD = [(577, 17), (33, 5), (1, 16), (7, 31), (15, 1)]  # N not a multiple of 16, K odd

needs_panel = pytest.mark.skipif(not kernel().compiled, reason=f"panel kernel unavailable: {kernel().reason}")
each_isa = pytest.mark.parametrize("isa", [
    pytest.param(isa, marks=pytest.mark.skipif(isa not in kernel().isas, reason=f"this CPU does not run {isa}"))
    for isa in ISAS
])


def weights(shape: tuple[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen) * shape[0] ** -0.5, torch.randn(shape[1], generator=gen)  # [K, N], [N]


def test_the_kernel_builds_on_an_avx2_cpu_unless_eager_is_asked_for():
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("no AVX2 here: the eager fallback is the expected path")
    status = kernel()
    assert status.compiled or status.reason == f"{panel_mm.ENV}=eager", status.reason


def test_a_builder_killed_mid_build_does_not_block_the_next_load(tmp_path):
    (tmp_path / "lock").touch()  # cpp_extension's baton, left behind by a killed builder
    with panel_mm._build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def test_a_live_builder_is_waited_for(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def build():
        with panel_mm._build_lock(tmp_path):
            (tmp_path / "lock").touch()  # its baton, in use
            entered.set()
            release.wait(5)
            (tmp_path / "lock").unlink()

    builder = threading.Thread(target=build)
    builder.start()
    entered.wait(5)
    def load():
        with panel_mm._build_lock(tmp_path):
            pass

    waiting = threading.Thread(target=load)
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and (tmp_path / "lock").exists()  # waits, and leaves the live baton alone
    release.set()
    builder.join(5)
    waiting.join(5)
    assert not waiting.is_alive()


def test_threads_asking_for_the_kernel_at_once_share_one_build(monkeypatch):
    builds, started = [], threading.Event()

    def slow_compile(highest):
        builds.append(highest)
        started.set()
        threading.Event().wait(0.3)  # a compiler at work
        return panel_mm.KernelStatus(isas=("avx2",), built=True)

    monkeypatch.setattr(panel_mm, "_compile", slow_compile)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.delenv(panel_mm.ENV, raising=False)
    panel_mm._kernel.cache_clear()
    try:
        results = []
        background = threading.Thread(target=lambda: results.append(kernel()))  # as load_pair starts it
        background.start()
        started.wait(5)
        results.append(kernel())  # waits for that build instead of starting its own
        background.join(5)
        assert builds == ["avx512"] and results[0] is results[1] and results[0].built
    finally:
        panel_mm._kernel.cache_clear()  # the next caller loads the real kernel again


@needs_panel
@each_isa
@pytest.mark.parametrize("shape", SMOLLM2 + EMBEDDED + ODD)
def test_the_product_agrees_with_torch_mm_for_1_to_32_rows(shape, isa):
    weight, bias = weights(shape, 0)
    plain, biased = PanelLinear(weight, None, isa=isa), PanelLinear(weight, bias, isa=isa)
    x = torch.randn(32, shape[0], generator=torch.Generator().manual_seed(1))  # [32, K]
    product = torch.mm(x, weight)  # [32, N]: row i of x[:rows] @ weight is row i of x @ weight
    for rows in range(1, 33):
        torch.testing.assert_close(plain(x[:rows]), product[:rows], **TOL)
        torch.testing.assert_close(biased(x[:rows]), product[:rows] + bias, **TOL)


@needs_panel
@each_isa
def test_many_rows_and_strided_inputs_agree_too(isa):
    weight, bias = weights((577, 33), 2)
    x = torch.randn(150, 1154, generator=torch.Generator().manual_seed(3))[:, ::2]  # [150, 577], strided
    torch.testing.assert_close(PanelLinear(weight, bias, isa=isa)(x), torch.addmm(bias, x, weight), **TOL)


@needs_panel
@each_isa
@pytest.mark.parametrize("shape", [(576, 1536), (1536, 576), (256, 8192)] + ODD)
def test_the_int8_product_agrees_with_the_dequantized_float32_product(shape, isa):
    weight, bias = weights(shape, 4)
    q, scale = quantize_int8(weight)
    dequantized = q.float() * scale  # [K, N]
    linear = PanelLinear(weight, bias, "int8", isa)
    x = torch.randn(32, shape[0], generator=torch.Generator().manual_seed(5))
    product = torch.addmm(bias, x, dequantized)  # [32, N]
    for rows in (1, 2, 5, 6, 7, 9, 17, 24, 25, 32):
        torch.testing.assert_close(linear(x[:rows]), product[:rows], **TOL)
    eager = Linear.of(weight, bias, "int8", "eager")  # the fallback computes the same int8 model
    torch.testing.assert_close(eager(x), linear(x), **TOL)
    if shape[0] > 1:  # the int8 model is not the float32 one (K = 1: each weight is its column's max, exact)
        assert not torch.allclose(linear(x), torch.addmm(bias, x, weight), **TOL)


def test_int8_quantization_is_per_column_and_rounds_to_nearest():
    weight = torch.tensor([[1.0, 0.0, -0.5], [-2.0, 0.0, 0.25], [0.5, 0.0, 0.125]])  # [K=3, N=3]
    q, scale = quantize_int8(weight)
    torch.testing.assert_close(scale, torch.tensor([2 / 127, 1.0, 0.5 / 127]))  # a zero column keeps scale 1
    assert q.dtype == torch.int8 and q[:, 0].tolist() == [64, -127, 32] and q[:, 1].tolist() == [0, 0, 0]
    assert (q.float() * scale - weight).abs().le(scale / 2 + 1e-7).all()


def test_packing_puts_width_columns_per_panel_and_zero_pads_the_last():
    weight = torch.arange(3 * 40, dtype=torch.float32).view(3, 40)  # [K=3, N=40]
    panels = pack(weight, 32)  # [2, 3, 32]
    assert panels.shape == (2, 3, 32) and panels.is_contiguous()
    torch.testing.assert_close(panels[0], weight[:, :32])
    torch.testing.assert_close(panels[1, :, :8], weight[:, 32:])
    assert panels[1, :, 8:].eq(0).all()
    assert pack(weight, 16).shape == (3, 3, 16) and torch.equal(pack(weight, 8)[4], weight[:, 32:])  # no padding
    linear = torch.randn(40, 3)  # an nn.Linear's [out, in]: its transpose is not contiguous
    assert torch.equal(pack(linear.t(), 32), pack(linear.t().contiguous(), 32))
    assert pack(weight.to(torch.int8), 32).dtype == torch.int8
    for weight_, width in ((torch.ones(3), 16), (weight, 0)):
        with pytest.raises(ValueError, match="width"):
            pack(weight_, width)


@needs_panel
@each_isa
def test_panels_of_another_width_are_refused(isa):
    weight, x = torch.ones(4, 40), torch.ones(1, 4)
    with pytest.raises(RuntimeError, match="panels must be contiguous"):
        torch.ops.draftverify.panel_mm(x, pack(weight, 32), None, None, 40, isa)
    q, scale = quantize_int8(weight)
    with pytest.raises(RuntimeError, match="panels must be contiguous"):
        torch.ops.draftverify.panel_mm(x, pack(q, 32), torch.ones(64), None, 40, isa)


@needs_panel
@pytest.mark.skipif("avx512" not in kernel().isas, reason="the AVX-512 path needs a CPU with AVX-512F")
@pytest.mark.parametrize("shape", [(576, 1536), (577, 17), (64, 40)])
def test_more_than_14_rows_run_as_blocks_of_at_most_14_each_as_if_alone(shape):
    """AVX-512: a pass over a pair of float32 panels updates at most 14 rows; 28 rows are two passes
    of 14, each row's bits those of its block run alone (the twin that tells: a block of 7 rows sums
    in two accumulator sets, so its bits differ)."""
    weight, bias = weights(shape, 6)
    linear = PanelLinear(weight, bias, isa="avx512")
    x = torch.randn(28, shape[0], generator=torch.Generator().manual_seed(7))
    both = linear(x)
    assert torch.equal(both[:14], linear(x[:14])) and torch.equal(both[14:], linear(x[14:]))
    if shape[0] > 64:
        assert not torch.equal(linear(x[:7]), both[:7])


@needs_panel
@pytest.mark.skipif("avx512" not in kernel().isas, reason="the AVX-512 path needs a CPU with AVX-512F")
def test_21_rows_run_as_a_full_block_of_14_then_the_7_left():
    """The first pass over a panel takes as many rows as a pass holds (it streams the panel from
    memory; the rest reads it from L2): 21 rows are 14 + 7, each block's bits those of its rows run
    alone. The twin that tells: near-equal blocks (11 + 10) would put rows 14-20 in a block of 10, one
    accumulator set, where a block of 7 sums in two: other bits (the last assertion)."""
    weight, bias = weights((576, 1536), 8)
    linear = PanelLinear(weight, bias, isa="avx512")
    x = torch.randn(21, 576, generator=torch.Generator().manual_seed(9))
    rows = linear(x)
    assert torch.equal(rows[:14], linear(x[:14])) and torch.equal(rows[14:], linear(x[14:]))
    assert not torch.equal(linear(x[11:])[3:], rows[14:])


@needs_panel
@each_isa
@pytest.mark.parametrize("quantize", [None, "int8"])
@pytest.mark.parametrize("shape", [(576, 1536), (576, 200), (64, 40)])
def test_panels_read_side_by_side_or_in_pairs_give_the_bits_of_one_panel_at_a_time(shape, quantize, isa):
    """Few rows (AVX-512: up to 6; AVX2: every count, four panels up to 12 rows and two beyond)
    read 2 to 4 panels side by side, each part of the weights its own stream, and run the panels
    left over one at a time; more float32 rows on AVX-512 read two neighbouring panels a pass, the
    last alone where the count is odd. A row's bits do not depend on which: the product equals the
    same rows times each panel's columns alone (a pass of its own), for panel counts that divide
    among the streams and counts that leave some over (576 x 200: 13 AVX-512 panels, 25 AVX2 ones;
    64 x 40: 3 and 5)."""
    weight, bias = weights(shape, 10)
    linear = PanelLinear(weight, bias, quantize, isa)
    width = PANEL_WIDTHS[isa]
    x = torch.randn(21, shape[0], generator=torch.Generator().manual_seed(11))
    for rows in (*range(1, 10), 13, 14, 21):
        together = linear(x[:rows])
        for col in range(0, shape[1], width):
            alone = PanelLinear(weight[:, col:col + width], bias[col:col + width], quantize, isa)  # int8: same column scales
            assert torch.equal(together[:, col:col + width], alone(x[:rows])), (rows, col)


@needs_panel
@pytest.mark.parametrize("quantize", [None, "int8"])
def test_avx2_rows_of_two_or_more_have_the_bits_of_any_other_cut_and_one_row_its_own(quantize):
    """AVX2: up to 12 rows run in blocks of 3 over four panels, more in blocks of 6 over two, the
    blocks taking turns over chunks of k, and no block of one row beside others (7 rows: 3 + 2 + 2;
    13: 6 + 5 + 2). So in any product of two rows or more a row sums its k in one accumulator set,
    and has the same bits however the rows are cut; a product of one row sums in two sets. The twin
    that tells: a block of one row (13 = 6 + 6 + 1, or 4 = 3 + 1) would give its row the bits of that
    row alone, which differ (the last assertion)."""
    weight, bias = weights((576, 1536), 12)
    linear = PanelLinear(weight, bias, quantize, isa="avx2")
    x = torch.randn(17, 576, generator=torch.Generator().manual_seed(13))
    rows = linear(x)  # 6 + 6 + 5
    for cut in ([2] * 8 + [1], [4, 13], [7, 10], [9, 8], [12, 5], [13, 4], [3, 14]):
        start, parts = 0, []
        for size in cut:
            parts.append(linear(x[start:start + size]))
            start += size
        same = torch.equal(torch.cat(parts), rows)
        assert same == (cut[-1] != 1), cut
    assert not torch.equal(linear(x[16:]), rows[16:])


@needs_panel
def test_avx2_many_rows_run_in_groups_with_the_bits_of_any_other_cut():
    """AVX2: a product of more than 48 rows (a prompt's forward) runs its blocks of 6 rows in groups
    of 48 rows, each group over every panel (and the panel left over beside the four parts: 25
    panels of 8 columns). The product is torch's to float32 tolerance, and a row's bits are those of
    any cut into products of two rows or more, the groups falling elsewhere in each."""
    weight, bias = weights((576, 200), 14)
    linear = PanelLinear(weight, bias, isa="avx2")
    x = torch.randn(110, 576, generator=torch.Generator().manual_seed(15))
    rows = linear(x)  # 18 blocks of 6 and one of 2: groups of 8, 8 and 3 blocks
    torch.testing.assert_close(rows, torch.addmm(bias, x, weight), **TOL)
    for cut in ([48, 62], [50, 60], [13, 97], [2] * 55):
        assert torch.equal(torch.cat([linear(part) for part in x.split(cut)]), rows), cut


def test_the_eager_fallback_warns_once_in_one_line_and_eager_on_request_does_not(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    with pytest.warns(UserWarning, match=r"^panel matrix kernel unavailable \(this CPU has no AVX2/FMA") as record:
        status = panel_mm._kernel.__wrapped__()
    assert not status.compiled and "\n" not in str(record[0].message)
    monkeypatch.setenv(panel_mm.ENV, "eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert panel_mm._kernel.__wrapped__().reason == f"{panel_mm.ENV}=eager"
    monkeypatch.setenv(panel_mm.ENV, "fast")
    with pytest.raises(ValueError, match=panel_mm.ENV):
        panel_mm._kernel.__wrapped__()


@needs_panel
def test_panel_avx2_on_request_leaves_avx512_out_and_an_isa_the_cpu_lacks_is_an_error(monkeypatch):
    monkeypatch.setenv(panel_mm.ENV, "panel-avx2")
    status = panel_mm._kernel.__wrapped__()
    assert status.isas == ("avx2",) and status.name == "panel-avx2"
    assert kernel().name == f"panel-{kernel().isas[-1]}" and kernel().isas[0] == "avx2"
    weight = torch.ones(4, 16)
    with pytest.raises(ValueError, match="isa"):
        PanelLinear(weight, None, isa="sse2")
    with pytest.raises(ValueError, match="kernel"):
        Linear.of(weight, None, kernel="panel-sse2")
    if "avx512" not in kernel().isas:
        with pytest.raises(ValueError, match="isa"):
            Linear.of(weight, None, kernel="panel-avx512")
    with pytest.raises(RuntimeError, match="isa"):  # the op itself checks too
        torch.ops.draftverify.panel_mm(torch.ones(1, 4), panel_mm.pack(weight, 16), None, None, 16, "sse2")


def test_linear_of_picks_the_kernel_and_rejects_conflicting_options():
    weight, bias = weights((8, 4), 6)
    assert isinstance(Linear.of(weight, bias, kernel="eager"), Linear)
    if kernel().compiled:
        assert isinstance(Linear.of(weight, bias), PanelLinear)
    with pytest.raises(ValueError, match="quantize"):
        Linear.of(weight, bias, "int4")
    with pytest.raises(ValueError, match="kernel"):
        Linear.of(weight, bias, kernel="fast")
    with pytest.raises(ValueError, match="float32"):
        Linear.of(weight.double(), bias, "int8")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_an_int8_target_is_one_model_on_both_kernels_and_streams_a_quarter_of_the_bytes(arch):
    from draftverify.models.hf import TransformersModel
    from draftverify.models.toy import tiny_causal_lm

    raw = tiny_causal_lm(50, arch=arch, width=32, layers=2, seed=5, dtype=torch.float32)
    tokens = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(6))
    float32 = TransformersModel(raw, kernel="eager")
    kernels = ["eager", "panel"] if kernel().compiled else ["eager"]
    int8 = {k: TransformersModel(raw, quantize="int8", kernel=k) for k in kernels}
    logits = {k: m.forward(m.new_cache(2), tokens, None, 7) for k, m in int8.items()}  # [B, 7, V]
    torch.testing.assert_close(logits[kernels[-1]], logits["eager"], **TOL)
    assert not torch.allclose(logits["eager"], float32.forward(float32.new_cache(2), tokens, None, 7), **TOL)
    if "panel" in int8:  # int8 weights, padding and scales (the eager fallback streams float32)
        assert float32.product_bytes / 4 <= int8["panel"].product_bytes <= 1.5 * float32.product_bytes / 4
    with pytest.raises(ValueError, match="lean"):
        TransformersModel(tiny_causal_lm(50, arch="qwen2", seed=5, dtype=torch.float32), quantize="int8")

"""A GGUF model's weights streamed as the blocks they were stored in (issue 27): the same model,
bit for bit, at 5 bits a weight instead of 32.

A target converted from a GGUF file (:mod:`.gguf`) holds float32 weights dequantized from GGML's
block formats; SmolLM2-135M-Instruct's are Q4_1 in every linear layer and Q8_0 in the tied
embedding and output layer. Along the input dimension, 32 weights of one output column form a block
with a float16 scale d (and, for Q4_1, a float16 offset m): Q4_1 ``w = d q + m`` with q in 0..15,
Q8_0 ``w = d q`` with q an int8 (ggml's ``dequantize_row_q4_1`` / ``_q8_0``). Since q d is exact in
float32, the dequantized weight is the float32 rounding of ``d q + m``.

:func:`find_q4_1` and :func:`find_q8_0` recover (q, d, m) from the float32 weights and accept them
only if every block rebuilds every weight bit for bit; nothing is quantized, and a weight that is
not such a block is refused. :class:`BlockLinear` runs the panel kernel's block product
(``csrc/panel_mm.cpp``, AVX-512), which rebuilds each weight in registers and accumulates it exactly
as the float32 panel product does: same results, 6.4x fewer bytes per call than float32 (Q4_1 with
its scales and offsets: 5 bits a weight).

The same blocks can multiply activations rounded to 8 bits (``BlockLinear(..., activations="int8")``,
``quantize="gguf-q8"``), which is how llama.cpp runs a Q4_1 / Q8_0 file: per row and block of 32
inputs, ``d_x = max |x| / 127`` and ``q_x = round(x / d_x)`` (:func:`round_activations`), so a block's
dot product is one exact integer sum scaled once. On AVX-512 VNNI (``vpdpbusd``: 64 byte products
an instruction against the float32 FMA's 16), and on AVX2 CPUs without it (``vpmaddubsw`` then
``vpmaddwd``: 32 byte products in two instructions, the same integer sums and float32 arithmetic, so
the same bits), the product is no longer bound by multiplications
(``bench panel-mm``: 576 x 1536 out of cache, one thread, 27 us for one row against 50 for the
float32-activation blocks, 41 against 108 for five). It is a different model from the float32 one
(held-out loss +0.004 nats a token on SmolLM2, as weight-only int8; ``docs/results/heldout_loss.py``)
whose law the verifiers keep exactly like any other target's; a row's result does not depend on the
other rows of the call.

A feature draft's float32 weights are rounded to Q8_0 blocks once (:func:`quantize_q8_0`, ggml's
``quantize_row_q8_0``; ``Linear.of(..., quantize="q8")``) and run on the same 8-bit activation
product: the one place weights are quantized here, for a draft whose law is whatever it runs.
"""

from __future__ import annotations

import warnings
from functools import cache

import torch

from .panel_mm import kernel, pack

__all__ = ["ACTIVATIONS", "BLOCK", "BlockLinear", "NotBlocks", "dequantize", "find_q4_1", "find_q8_0", "int8_activation_product",
           "int8_activations_compiled", "quantize_q8_0", "random_q4_1", "round_activations"]

BLOCK = 32  # weights per block, along the input dimension
PANEL = 16  # output columns per panel of blocks: one AVX-512 register
ACTIVATIONS = ("float32", "int8")  # what the blocks multiply: the float32 activations, or them rounded to 8 bits


class NotBlocks(ValueError):
    """A weight that is not exactly GGML Q4_1 or Q8_0 blocks."""


def _blocks(weight: torch.Tensor) -> torch.Tensor:
    """weight [K, N] -> [K / 32, 32, N] (blocks along K); ``ValueError`` unless K is a multiple of 32."""
    if weight.dim() != 2 or weight.dtype != torch.float32 or weight.shape[0] % BLOCK:
        raise ValueError(f"weight must be float32 [K, N] with K a multiple of {BLOCK}, got {tuple(weight.shape)} {weight.dtype}")
    return weight.view(weight.shape[0] // BLOCK, BLOCK, weight.shape[1])


def dequantize(codes: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """The float32 weight [K, N] of codes [K, N] (Q4_1: uint8 0..15, Q8_0: int8), scales [K / 32, N]
    and (Q4_1) offsets [K / 32, N] float16: ``d q + m`` in float32, as ggml dequantizes."""
    blocks = (codes.shape[0] // BLOCK, *codes.shape[1:])
    if codes.dim() != 2 or codes.shape[0] % BLOCK:
        raise ValueError(f"codes must be [K, N] with K a multiple of {BLOCK}, got {tuple(codes.shape)}")
    for name, values in (("scales", scales), ("offsets", offsets)):
        if values is not None and tuple(values.shape) != blocks:
            raise ValueError(f"{name} must be [K / {BLOCK}, N] = {blocks} for codes {tuple(codes.shape)}, got {tuple(values.shape)}")
    weight = codes.float() * scales.float().repeat_interleave(BLOCK, 0)
    return weight if offsets is None else weight + offsets.float().repeat_interleave(BLOCK, 0)


def random_q4_1(shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """A float32 weight [K, N] dequantized from random Q4_1 blocks as ggml's quantizer leaves them
    (each block holds a code 0 and a code 15), of standard deviation about K^-1/2: benchmarks' and
    tests' weights."""
    k, n = shape
    if k % BLOCK or k < 1 or n < 1:
        raise ValueError(f"shape: K must be a positive multiple of {BLOCK} and N positive, got {shape}")
    codes = torch.randint(0, 16, (k, n), generator=generator, dtype=torch.uint8)
    codes[::BLOCK], codes[1::BLOCK] = 0, 15
    scales = ((torch.rand(k // BLOCK, n, generator=generator) + 0.5) * 0.4 * k ** -0.5).half()
    return dequantize(codes, scales, (-7.5 * scales.float()).half())


def _half_exact(values: torch.Tensor) -> bool:
    return bool(torch.equal(values.half().float(), values))


def find_q4_1(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(q [K, N] uint8 in 0..15, d [K / 32, N] float16, m [K / 32, N] float16) with
    ``fl32(d q + m) == weight`` at every element, or None where no Q4_1 block does that. m is the
    block's minimum (q = 0 there, as ggml's quantizer sets it); d is searched among the float16
    values next to (max - min) / 15 (ggml stores its float32 d rounded to float16), each further
    candidate tried on the blocks still unmatched."""
    if not _half_exact(_blocks(weight).amin(1)):
        return None
    blocks = _blocks(weight).permute(0, 2, 1).reshape(-1, BLOCK)  # [B N, 32]: one block a row
    low, high = blocks.amin(1), blocks.amax(1)  # [B N]
    estimate = ((high - low) / 15).half().view(torch.int16)
    codes, scales = torch.empty_like(blocks, dtype=torch.uint8), torch.empty_like(estimate)
    left = torch.arange(len(blocks))  # blocks without a match yet
    for step in (0, -1, 1, -2, 2):  # float16 neighbours of the estimate, as bit patterns (d >= 0)
        scale = (estimate[left] + step).clamp_(0, 0x7BFF)
        d = scale.view(torch.float16).float()[:, None]  # [n, 1]
        part, base = blocks[left], low[left, None]
        q = torch.where(d > 0, (part - base) / torch.where(d > 0, d, 1), 0).round_()
        fits = ((q >= 0) & (q <= 15) & (q * d + base == part)).all(1)  # [n]
        codes[left[fits]], scales[left[fits]] = q[fits].to(torch.uint8), scale[fits]
        left = left[~fits]
        if not len(left):
            break
    if len(left):
        return None
    count, n = weight.shape[0] // BLOCK, weight.shape[1]
    codes = codes.view(count, n, BLOCK).permute(0, 2, 1).reshape(weight.shape)
    return codes, scales.view(torch.float16).view(count, n), low.half().view(count, n)


def find_q8_0(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(q [K, N] int8, d [K / 32, N] float16) with ``d q == weight`` at every element, or None where
    no Q8_0 block does that: d = max |w| / 127 (ggml's scale; its largest weight has |q| = 127)."""
    blocks = _blocks(weight)
    d = blocks.abs().amax(1) / 127  # [B, N]
    if not _half_exact(d):
        return None
    q = (blocks / torch.where(d > 0, d, 1)[:, None]).round_()
    if not bool(((q.abs() <= 127) & (q * d[:, None] == blocks)).all()):
        return None
    return q.to(torch.int8).view_as(weight), d.half()


def quantize_q8_0(weight: torch.Tensor) -> torch.Tensor:
    """The float32 weight [K, N] rounded to Q8_0 blocks along K bit for bit as ggml quantizes a row
    (``quantize_row_q8_0_ref``): per block of 32, ``d = max |w| / 127`` in float32, ``q = w (1 / d)``
    rounded half away from zero (C's ``roundf``), so the largest |q| is 127, and d stored in
    float16; returns ``d q`` in float32 with that stored d, which :func:`find_q8_0` recovers exactly
    (its d = max |d q| / 127). Each weight moves by about d / 2 at most, more where the stored d is a
    float16 subnormal (a block of weights below about 4e-3: the scale keeps fewer bits), and a block
    below float16's smallest scale becomes zeros, as in ggml. (Before 2026-11-27 q was rounded with
    the stored d: where that subnormal d was rounded up no |q| reached 127 and such blocks, weights
    near 1e-4, were refused.) ``ValueError`` unless K is a multiple of 32, or where a block's scale
    overflows float16."""
    blocks = _blocks(weight)
    d = blocks.abs().amax(1) / 127  # [B, N]
    inverse = torch.where(d > 0, 1 / torch.where(d > 0, d, 1), 0)[:, None]
    scaled = (blocks * inverse).abs()
    whole = scaled.floor()
    q = (blocks.sign() * (whole + (2 * (scaled - whole)).floor_()))  # roundf, half away from zero (exact: no x + 0.5)
    rounded = (q * d.half().float()[:, None]).view_as(weight)
    if find_q8_0(rounded) is None:
        raise ValueError("weight: a block's scale max |w| / 127 overflows float16; it cannot be Q8_0 blocks")
    return rounded


def round_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] rounded to 8 bits per block of 32 along K, as llama.cpp rounds the activations it
    multiplies with GGML blocks (its Q8_0 / Q8_1 rows): codes q [M, K / 32, 32] (float32 holding
    integers in -127..127) and scales d [M, K / 32] with ``x ~= d q``: ``d = max |x| / 127``,
    ``q = round(x 127 / max |x|)`` to nearest even (0 for a block of zeros)."""
    if x.dim() != 2 or x.shape[1] % BLOCK:
        raise ValueError(f"x must be [M, K] with K a multiple of {BLOCK}, got {tuple(x.shape)}")
    blocks = x.float().view(x.shape[0], -1, BLOCK)
    amax = blocks.abs().amax(-1)  # [M, K / 32]
    inverse = torch.where(amax > 0, 127 / torch.where(amax > 0, amax, 1), 0)
    return torch.round(blocks * inverse[..., None]), amax / 127


def int8_activation_product(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor,
                            offsets: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] @ the blocks' weight [K, N] with x rounded by :func:`round_activations`: per block,
    ``d_w d_x sum(q_w q_x)`` (+ ``m_w d_x sum(q_x)`` for Q4_1), summed over blocks: the arithmetic of
    the compiled ``block_q8_mm`` (``csrc/panel_mm.cpp``), up to float32 rounding order; the eager
    path where that product cannot run, and its reference in tests."""
    q, d = round_activations(x)  # [M, B, 32], [M, B]
    count, n = codes.shape[0] // BLOCK, codes.shape[1]
    sums = torch.einsum("mbk,bkn->mbn", q, codes.float().view(count, BLOCK, n))  # integers, exact in float32
    out = (sums * (scales.float()[None] * d[..., None])).sum(1)  # [M, N]
    if offsets is not None:
        out = out + (d * q.sum(-1)) @ offsets.float()
    return out


def _dot_layout(codes: torch.Tensor, nibbles: bool) -> torch.Tensor:
    """Codes [K, N] (uint8) in the panels ``block_q8_mm`` reads: per panel of 16 columns and block
    of 32 k, groups of 4 consecutive k side by side per column ([groups, 16, 4] bytes), the 8 groups
    of a Q4_1 block as 4 bytes of two nibbles (group g low, g + 4 high)."""
    k, n = codes.shape
    count = -(-n // PANEL)
    padded = codes.new_zeros(k, count * PANEL)
    padded[:, :n] = codes
    groups = padded.view(k // BLOCK, 8, 4, count, PANEL)  # [B, g, t, P, c]
    if nibbles:
        groups = groups[:, :4] | (groups[:, 4:] << 4)
    return groups.permute(3, 0, 1, 4, 2).reshape(count, -1, PANEL).contiguous()  # [P, B g c t / 16, 16]


@cache
def _eager_int8_warning(reason: str) -> None:
    warnings.warn(f"the 8-bit activation block product runs eagerly ({reason}): the same model, slower", stacklevel=4)


def int8_activations_compiled() -> bool:
    """Whether ``block_q8_mm`` runs here: on AVX-512 VNNI, else on AVX2 with F16C (the same bits)."""
    return kernel().compiled and bool(torch.ops.draftverify.block_q8_ready())


def int8_activations_isa() -> str:
    """The instruction set ``block_q8_mm`` runs here: "avx512" (VNNI) or "avx2"; ValueError where it
    does not run compiled (:func:`int8_activations_compiled`)."""
    if not int8_activations_compiled():
        raise ValueError("the 8-bit activation product does not run compiled here")
    return "avx512" if torch.ops.draftverify.block_q8_vnni() else "avx2"


class BlockLinear:
    """``x @ weight + bias`` for x [M, in] over weight [in, out] held as Q4_1 blocks, else Q8_0
    blocks (module doc), packed at construction; :class:`NotBlocks` if it is neither exactly.

    ``activations="float32"``: the block product bit-identical to the float32 one (``ValueError`` if
    the CPU has no AVX-512). ``activations="int8"``: x rounded to 8 bits per block of 32 as llama.cpp
    does (:func:`round_activations`; a different model from the float32 one, at 8-bit activation
    precision), its integer block sums on AVX-512 VNNI or AVX2 (``block_q8_mm``); ``compiled=False``, or
    a CPU without either (with a warning), computes the same in torch (:func:`int8_activation_product`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activations: str = "float32",
                 compiled: bool | None = None):
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
        if activations == "float32" and "avx512" not in kernel().isas:
            raise ValueError(f"the GGUF block product needs the panel kernel's AVX-512 path; here: {kernel().isas or kernel().reason}")
        if activations == "int8":
            ready = int8_activations_compiled()
            if compiled and not ready:
                raise ValueError("compiled=True: the 8-bit activation block product needs the panel kernel on AVX2 with F16C "
                                 "or AVX-512 VNNI, not here")
            if compiled is None and not ready:
                _eager_int8_warning(kernel().reason or "neither AVX2 with F16C nor AVX-512 VNNI")
            compiled = ready if compiled is None else compiled
        self.activations, self.compiled = activations, activations == "float32" or bool(compiled)
        with torch.no_grad():
            self.out_features = weight.shape[1]
            found = find_q4_1(weight)
            if found is not None:
                q, d, m = found
                self.format = "Q4_1"
            else:
                found = find_q8_0(weight)
                if found is None:
                    raise NotBlocks(f"weight {tuple(weight.shape)} is not exactly GGML Q4_1 or Q8_0 blocks "
                                     "(quantize='gguf' and 'gguf-q8' take a model converted from a GGUF file)")
                (q, d), m = found, None
                self.format = "Q8_0"
            if not self.compiled:  # eager: the blocks as they are
                self.codes, self.scales, self.offsets = q, d, m
            elif activations == "int8":
                unsigned = q if m is not None else (q.to(torch.int16) + 128).to(torch.uint8)
                self.codes = _dot_layout(unsigned, nibbles=m is not None)
                self.scales, self.offsets = pack(d, PANEL), None if m is None else pack(m, PANEL)
            else:
                if m is not None:
                    pairs = q.view(-1, 2, q.shape[1])  # [K / 2, 2, N]: rows 2j and 2j + 1
                    q = pairs[:, 0] | (pairs[:, 1] << 4)
                self.codes, self.scales, self.offsets = pack(q, PANEL), pack(d, PANEL), None if m is None else pack(m, PANEL)
            self.bias = None if bias is None else bias.detach().float().contiguous()

    @property
    def nbytes(self) -> int:
        """Bytes of codes, scales and offsets a product streams."""
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.offsets) if t is not None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [M, in] -> [M, out]
        if not self.compiled:
            out = int8_activation_product(x, self.codes, self.scales, self.offsets)
            return out if self.bias is None else out + self.bias
        product = torch.ops.draftverify.block_q8_mm if self.activations == "int8" else torch.ops.draftverify.block_mm
        return product(x, self.codes, self.scales, self.offsets, self.bias, self.out_features)

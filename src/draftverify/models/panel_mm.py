"""A compiled small-row matrix product for the lean forwards: ``x [M, K] @ W [K, N] + bias`` over
weights packed once in panels of 8 (AVX2) or 16 (AVX-512) columns, float32 or weight-only int8
(issue 27).

A target call of L + 1 tokens streams the same weights as a one-token call; on a CPU both are bound
by that stream, so their cost ratio r should stay near 1. torch's float32 kernels (MKL, oneDNN) do
not get there for 2-32 rows; ``csrc/panel_mm.cpp`` does, in two instruction sets: AVX2/FMA (a
register a row and 8-column panel, 12 accumulators a pass: up to 12 rows read four panels side by
side in blocks of 3 rows that take turns over chunks of k, more rows two panels in blocks of 6) and,
where the CPU has it, AVX-512F (a register a row and panel; float32: up to 14 rows per pass over two
neighbouring panels; int8: up to 24 rows per pass over one). Few rows read two to four panels side
by side (AVX-512: up to six rows, float32 four; AVX2: every count), each from its own part of the
weights, as one core streams several sequential reads faster than one (on an Intel Xeon the
one-token call of SmolLM2-135M 20% faster, and with five rows on four panels the five-token call 10%
faster again; on an AMD EPYC without AVX-512, 8-column panels read three to twelve rows on four
streams where 16-column ones read one: docs/results/model_cost.md).
``draftverify bench panel-mm`` and docs/results/model_cost.md compare them with torch and numpy.

One kernel for every row count: measured per M in {1, 2, 3, 5, 8, 9, 12, 16, 17, 24, 32} on the
real target's five shapes (one thread, CPU clock, AMD Zen 4 under load; model_cost.md), the AVX-512
panel product was the fastest float32 product at every M on 576x576, 576x192 and 1536x576, and on
576x1536 at every M but one row, where OpenBLAS's GEMV tied it (163 against 185 us in one run, 162
against 167 in another); oneDNN's prepacked kernel, the best of torch's from 3 rows, trailed it by
10-35% (576x1536: 231 against 201 us at 5 rows, 309 against 227 at 9, 442 against 386 at 17, 547
against 470 at 24). On the output layer (576x49152) oneDNN tied it from 17 rows (12.1 against 12.4 ms)
and OpenBLAS was faster at one row (4.6 against 5.5 ms). The AVX2 path against oneDNN (which itself
runs AVX-512 here): faster or even at every M but 16-17 rows of 576x1536 and 1536x576, where oneDNN
was 5-7% faster. No crossover pays for a second packed
copy of the weights, so :class:`PanelLinear` runs the panel kernel for every M.

The C++ sources (``csrc/``: these products, the Llama layer loop of :mod:`.llama`, a feature
draft's block of :mod:`.feature_draft`) are compiled by ``torch.utils.cpp_extension`` at first use (``-O3 -mavx2 -mfma``;
the AVX-512 functions by a ``#pragma GCC target``; under a minute on an idle core) and cached in ``$TORCH_EXTENSIONS_DIR`` when set, else in
``$XDG_CACHE_HOME/draftverify`` (``~/.cache/draftverify``). Where it cannot run (a CPU without
AVX2/FMA, no compiler) the lean forwards keep torch's kernels and a one-line warning says so; the
environment variable ``DRAFTVERIFY_KERNEL=eager`` picks them on purpose (no warning), and
``DRAFTVERIFY_KERNEL=panel-avx2`` keeps the panel kernel to AVX2 on an AVX-512 CPU (as a CPU without
AVX-512 runs it).

Weight-only int8 (per output column: ``scale = max_k |W[k, n]| / 127``, ``q = round(W / scale)``):
the kernel converts each weight to float32 and accumulates in float32, then multiplies a column by
its scale, so it computes ``(x @ q) * scale``, the dequantized product ``x @ (q * scale)`` up to
float32 rounding; the eager fallback computes the latter. An int8 target's law is the int8
model's; the verifiers are exact for whichever target runs.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

__all__ = ["ENV", "ISAS", "PANEL_WIDTHS", "KernelStatus", "PanelLinear", "fma_peak", "kernel", "pack", "quantize_int8"]

PANEL_WIDTHS = {"avx2": 8, "avx512": 16}  # output columns of a panel by instruction set: a ymm, a zmm (csrc/panel_mm.cpp)
ENV = "DRAFTVERIFY_KERNEL"  # "eager": torch's kernels; unset or "panel": the compiled kernel where it runs
ISAS = ("avx2", "avx512")  # the kernel's instruction sets, each a superset of the one before
SOURCES = [Path(__file__).resolve().parent / "csrc" / name
           for name in ("panel_mm.cpp", "llama_layers.cpp", "feature_draft.cpp")]
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]


@dataclass(frozen=True)
class KernelStatus:
    """Which product the lean forwards run: ``isas`` the panel kernel's instruction sets this CPU runs
    (of :data:`ISAS`; the last by default, empty: eager); ``reason`` why eager ("" otherwise);
    ``load_seconds`` to build (``built``) or load the cached library."""

    isas: tuple[str, ...] = ()
    reason: str = ""
    load_seconds: float = 0.0
    built: bool = False

    @property
    def compiled(self) -> bool:
        return bool(self.isas)

    @property
    def isa(self) -> str:
        """The instruction set a product runs by default: the best of ``isas``."""
        if not self.isas:
            raise ValueError(f"the panel kernel cannot run here: {self.reason}")
        return self.isas[-1]

    @property
    def name(self) -> str:
        """"panel-avx512", "panel-avx2" or "eager"."""
        return f"panel-{self.isa}" if self.compiled else "eager"


def _build_directory() -> Path:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "draftverify"
    tag = f"panel_mm-torch{torch.__version__.split('+')[0]}-py{sys.version_info[0]}{sys.version_info[1]}"
    return Path(root) / tag


@contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    """Hold ``directory/build.flock`` while building or loading. ``cpp_extension`` guards a build with a
    ``lock`` file that its builder deletes when done; a builder killed mid-build (Ctrl-C, a timeout)
    leaves it behind and every later load waits on it forever. The operating system releases an
    ``flock`` when its process dies, so a ``lock`` file found while holding it is such a leftover."""
    with open(directory / "build.flock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        (directory / "lock").unlink(missing_ok=True)
        yield  # closing the file releases the lock


def _compile(highest: str) -> KernelStatus:
    from torch.utils import cpp_extension

    ninja = Path(sys.executable).parent / "ninja"
    if not cpp_extension.is_ninja_available() and ninja.exists():  # a venv not on PATH (make test)
        os.environ["PATH"] = f"{ninja.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    directory = _build_directory()
    directory.mkdir(parents=True, exist_ok=True)
    built = not any(directory.glob("*.so"))
    start = time.perf_counter()
    with _build_lock(directory):
        cpp_extension.load("draftverify_panel_mm", [str(source) for source in SOURCES], extra_cflags=_FLAGS,
                           extra_ldflags=["-fopenmp"], build_directory=str(directory), is_python_module=False)
    seconds = time.perf_counter() - start
    isas = tuple(isa for isa in torch.ops.draftverify.panel_mm_isas() if ISAS.index(isa) <= ISAS.index(highest))
    return KernelStatus(isas, load_seconds=seconds, built=built)


_KERNEL_LOCK = threading.Lock()


def kernel() -> KernelStatus:
    """Compile or load the panel kernel once per process (module doc); eager with the reason where
    it cannot run, with a one-line warning unless ``DRAFTVERIFY_KERNEL=eager`` asked for it;
    ``DRAFTVERIFY_KERNEL=panel-avx2`` leaves AVX-512 out of ``isas``. Thread-safe: a caller waits for
    a build another thread started (:func:`.pair.load_pair` starts one beside a GGUF's conversion)."""
    with _KERNEL_LOCK:
        return _kernel()


@cache
def _kernel() -> KernelStatus:
    choice = os.environ.get(ENV, "panel")
    if choice not in ("panel", "panel-avx2", "eager"):
        raise ValueError(f"{ENV} must be 'panel', 'panel-avx2' or 'eager', got {choice!r}")
    if choice == "eager":
        return KernelStatus(reason=f"{ENV}=eager")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        reason = f"this CPU has no AVX2/FMA ({torch.backends.cpu.get_cpu_capability()})"
    else:
        try:
            return _compile("avx2" if choice == "panel-avx2" else ISAS[-1])
        except Exception as error:  # no compiler, no headers, a failed build: fall back, and say why
            lines = str(error).strip().splitlines()
            reason = f"build failed: {lines[-1] if lines else type(error).__name__}"
    warnings.warn(f"panel matrix kernel unavailable ({reason}); linear layers run torch's kernels", stacklevel=2)
    return KernelStatus(reason=reason)


def fma_peak(isa: str | None = None, rounds: int = 3) -> float:
    """Float32 FLOP/s (two a multiply-add) one thread sustains in registers, twelve independent FMA
    chains in instruction set ``isa`` (default the best this CPU runs), the best of ``rounds`` of
    about 20 ms: the arithmetic ceiling of any float32 product on this core (``bench model-cost``'s
    floor of r). ValueError where the panel kernel does not run or ``isa`` is not one it runs here."""
    status = kernel()
    if not status.compiled:
        raise ValueError(f"fma_peak needs the panel kernel: {status.reason}")
    isa = status.isa if isa is None else isa
    if isa not in status.isas:
        raise ValueError(f"isa must be one of {status.isas} here, got {isa!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    return max(torch.ops.draftverify.fma_peak(isa, 5_000_000) for _ in range(rounds))


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight-only int8 of weight [K, N] (in, out) per output column: q [K, N] int8 and scale [N]
    float32 with ``weight ~= q * scale`` (symmetric, ``scale = max |column| / 127``; 1 for a zero
    column)."""
    weight = weight.float()
    scale = weight.abs().amax(0) / 127  # [N]
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(weight / scale).clamp_(-127, 127).to(torch.int8), scale


def pack(weight: torch.Tensor, width: int) -> torch.Tensor:
    """weight [K, N] -> panels [ceil(N / width), K, width] (the last zero-padded), contiguous."""
    if weight.dim() != 2 or width < 1:
        raise ValueError(f"weight must be a matrix [K, N] and width >= 1, got shape {tuple(weight.shape)} and width {width}")
    k, n = weight.shape
    count, full = -(-n // width), n // width
    panels = weight.new_empty(count, k, width)  # one copy into place (a padded copy, then the panels', took twice as long)
    panels[:full].copy_(weight[:, : full * width].reshape(k, full, width).transpose(0, 1))
    if full < count:
        panels[full].zero_()[:, : n - full * width] = weight[:, full * width :]
    return panels


class PanelLinear:
    """``x @ weight + bias`` for x [M, in] through the panel kernel; weight [in, out] packed at
    construction (``quantize="int8"``: its int8 form), run in instruction set ``isa`` (of
    ``kernel().isas``; default the best); wrap again if the weights change."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, quantize: str | None = None,
                 isa: str | None = None):
        self.isa = kernel().isa if isa is None else isa
        if self.isa not in kernel().isas:
            raise ValueError(f"isa must be one of {kernel().isas} here, got {isa!r}")
        with torch.no_grad():
            self.out_features, width = weight.shape[1], PANEL_WIDTHS[self.isa]
            if quantize == "int8":
                q, scale = quantize_int8(weight)
                self.panels = pack(q, width)
                self.scales = torch.ones(self.panels.shape[0] * width)  # padded as the panels are
                self.scales[: self.out_features] = scale
            elif quantize is None:
                self.panels, self.scales = pack(weight.float(), width), None
            else:
                raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
            self.bias = None if bias is None else bias.detach().float().contiguous()

    @property
    def nbytes(self) -> int:
        """Bytes of weights (and int8 scales) a product streams."""
        scales = 0 if self.scales is None else self.scales.numel() * 4
        return self.panels.numel() * self.panels.element_size() + scales

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [M, in] -> [M, out]
        return torch.ops.draftverify.panel_mm(x, self.panels, self.scales, self.bias, self.out_features, self.isa)

"""Instruments for ``draftverify bench decode``: heap peak, OT fallback counter, one-step deviation.

- :class:`HeapPeak` samples the bytes the C heap has in use (glibc ``mallinfo2``: small blocks plus
  mmapped blocks, which is where torch's CPU tensors live) from a background thread while a run
  decodes; the peak over the bytes in use at entry is the run's dynamic memory (caches, activations,
  the K-fold copies of multi-draft). Model weights are counted separately (:func:`weight_bytes`).
  Sampling misses peaks shorter than its period, so it is a lower bound.
- :func:`count_ot_fallbacks` counts the OT plans that fell back to an exact solver (seed 001's
  fallback rate for Global Resolution) by wrapping ``draftverify.ot.solve`` while a run decodes.
- :func:`first_token_deviation` estimates the TV distance between the law of the first committed
  token and the target's conditional at the prompt, from many independent one-token decodings.
"""

from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch

from ..models.base import LanguageModel
from ..probs import warp

__all__ = ["HeapPeak", "weight_bytes", "count_ot_fallbacks", "first_token_deviation", "REFERENCE_DRAWS"]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _heap_reader():
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):  # not glibc >= 2.33: no heap statistics
        return None
    mallinfo2.restype = _MallInfo2

    def in_use() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return in_use


_IN_USE = _heap_reader()


class HeapPeak:
    """Context manager: ``peak`` = max heap bytes in use while inside minus the bytes at entry
    (None where the C library gives no heap statistics)."""

    def __init__(self, period: float = 0.002):
        self.period = period
        self.peak: int | None = None
        self._stop = threading.Event()

    def __enter__(self) -> HeapPeak:
        if _IN_USE is None:
            return self
        self._base = self._max = _IN_USE()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.period):
            self._max = max(self._max, _IN_USE())

    def __exit__(self, *exc: Any) -> None:
        if _IN_USE is None:
            return
        self._stop.set()
        self._thread.join()
        self.peak = max(self._max, _IN_USE()) - self._base


def weight_bytes(model: LanguageModel | None) -> int:
    """Bytes of a model's parameters and buffers (0 for no model, and for models that are not
    ``torch`` modules, such as the n-gram drafter, whose tables are not counted)."""
    module = getattr(model, "model", None)
    if not isinstance(module, torch.nn.Module):
        return 0
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


@contextmanager
def count_ot_fallbacks() -> Iterator[dict[str, int]]:
    """Count ``draftverify.ot.solve`` calls and the plans that used the exact fallback solver.
    Plans solve lazily, so each is inspected when the next solve starts and at exit."""
    from .. import ot

    counts = {"solves": 0, "fallbacks": 0}
    solve = ot.solve
    last: list[Any] = []

    def settle() -> None:
        if last:
            counts["fallbacks"] += last.pop().fallback is not None

    def counting_solve(*args: Any, **kwargs: Any):
        settle()
        plan = solve(*args, **kwargs)
        counts["solves"] += 1
        last.append(plan)
        return plan

    ot.solve = counting_solve
    try:
        yield counts
    finally:
        ot.solve = solve
        settle()


REFERENCE_DRAWS = 400  # exact draw sets behind first_token_deviation's floor and p-value


def first_token_deviation(target: LanguageModel, draft: LanguageModel | None, prompt_ids: list[int], *,
                          samples: int, seed: int, reference_draws: int = REFERENCE_DRAWS, **settings: Any) -> dict[str, float]:
    """TV between the empirical law of the first committed token over ``samples`` independent
    one-token decodings (one batch) and the warped target conditional at the prompt; ``noise``
    is the mean TV of ``reference_draws`` sets of as many exact draws from that conditional (the
    estimator's floor) and ``p_value`` the share of those at or above the measured TV (with the
    usual +1 in numerator and denominator): a small p-value is evidence of a deviation, a TV above
    the mean floor alone is not (at 128 samples one exact set in a hundred lies 60% above it).
    ``settings``: method, K, L, temperature, top_k."""
    from ..engine import generate_batch

    results = generate_batch(target, draft, [prompt_ids] * samples, max_new_tokens=1, seed=seed,
                             ignore_eos=True, **settings)
    first = np.array([r.tokens[0] for r in results])
    with torch.inference_mode():
        logits = target.forward(target.new_cache(1), torch.tensor([prompt_ids]), None, 1)[0, 0]  # [V]
    law = warp(logits.double(), settings.get("temperature", 1.0), settings.get("top_k")).numpy()  # [V]
    tv = float(0.5 * np.abs(np.bincount(first, minlength=law.size) / samples - law).sum())
    draws = np.random.default_rng(seed).multinomial(samples, law / law.sum(), size=reference_draws) / samples  # [R, V]
    reference = 0.5 * np.abs(draws - law).sum(1)  # [R]
    return {"tv": tv, "noise": float(reference.mean()),
            "p_value": float((1 + np.count_nonzero(reference >= tv)) / (1 + reference_draws)), "samples": samples}

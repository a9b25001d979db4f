"""Probability vectors: validation, warping (temperature, top-k, top-p) and the correction
distribution's fallback.

Validation never renormalises or clips: a distribution that is wrong is an error, reported with
what is wrong and where.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

__all__ = [
    "as_tensor",
    "check_distributions",
    "check_warping",
    "sum_tolerance",
    "warp",
]

_FLOAT_DTYPES = (torch.float32, torch.float64)
_NUMPY_FLOAT_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


def sum_tolerance(dtype: torch.dtype) -> float:
    """Largest |sum - 1| accepted for a row of this dtype."""
    return 1e-4 if dtype == torch.float32 else 1e-6


def as_tensor(x, name: str) -> torch.Tensor:
    """A torch tensor view of ``x``, detached from any autograd graph (the math here is no part of
    one). A numpy array is viewed, copied only where torch cannot view it (negative strides, a
    non-native byte order); one of a non-numeric dtype (object, str, ...) raises ``ValueError``."""
    if isinstance(x, torch.Tensor):
        return x.detach() if x.requires_grad else x
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name}: expected a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.dtype.kind not in "biufc":
        raise ValueError(f"{name}: expected a numeric array, got dtype {x.dtype}")
    if not x.dtype.isnative or min(x.strides, default=0) < 0:
        x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    return torch.from_numpy(x)


def check_distributions(probs: torch.Tensor | np.ndarray, name: str) -> None:
    """Raise ``ValueError`` unless every row along the last axis is a probability vector:
    float32/float64, finite, non-negative, summing to one within :func:`sum_tolerance`.

    A tensor or a numpy array, each checked by its own library (no conversion). One pass for the
    row sums and one for the minimum, read back together (NaN and inf propagate into the sums); the
    detailed message is built only on failure.
    """
    array = isinstance(probs, np.ndarray)
    dtype = _NUMPY_FLOAT_DTYPES.get(probs.dtype) if array else probs.dtype
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name}: dtype must be float32 or float64, got {probs.dtype}")
    if probs.size == 0 if array else probs.numel() == 0:
        raise ValueError(f"{name}: empty tensor of shape {tuple(probs.shape)}")
    sums = probs.sum(axis=-1) if array else probs.sum(dim=-1)
    if array:
        low_sum, high_sum, low = float(sums.min()), float(sums.max()), float(probs.min())
    else:
        low_sum, high_sum, low = torch.stack([sums.amin(), sums.amax(), probs.amin()]).tolist()
    tolerance = sum_tolerance(dtype)
    if not (math.isfinite(low_sum) and math.isfinite(high_sum)):
        raise ValueError(f"{name}: contains NaN or infinite entries")
    if low < 0:
        raise ValueError(f"{name}: contains negative entries")
    if 1 - low_sum > tolerance or high_sum - 1 > tolerance:
        error = abs(sums - 1)
        index = tuple(int(i) for i in np.unravel_index(int(error.argmax()), tuple(sums.shape)))
        raise ValueError(
            f"{name}: rows must sum to 1 (row {index} sums to {float(sums[index]):.8g}; "
            f"tolerance {tolerance:g}); nothing is renormalised for you"
        )


def warp(
    logits: torch.Tensor | np.ndarray,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """Logits ``[..., V]`` (a tensor or a numeric numpy array, as the verifiers take) ->
    probabilities (a tensor) after temperature, top-k then top-p (nucleus).

    ``temperature == 0`` gives the one-hot argmax (ties to the lowest index, as ``torch.argmax``).
    The same warping must be applied to draft and target: verifiers are exact for the warped target.
    Raises ``ValueError`` naming the argument for a setting of the wrong type or range, a 0-d or
    empty ``logits``, and a row of ``logits`` with a NaN, a +inf, or no finite entry (its
    probabilities would be NaN); -inf entries beside finite ones are masked tokens.
    """
    check_warping(temperature, top_k, top_p)
    logits = as_tensor(logits, "logits")
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits: expected shape [..., V] with V >= 1, got {tuple(logits.shape)}")
    logits = logits.to(torch.float32) if logits.dtype not in _FLOAT_DTYPES else logits
    if temperature == 0:
        row_max = logits.amax(dim=-1)  # NaN if the row has one, -inf if it has no finite entry, +inf for a +inf
        if not bool(torch.isfinite(row_max).all()):
            raise _no_distribution()
        index = logits.argmax(dim=-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, index, 1.0)
    scores = logits / temperature if temperature != 1 else logits  # x / 1 == x: skip the pass over V
    if top_k is not None and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]  # [..., 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    # A row with a NaN (its sum of exponentials is NaN), a +inf (inf - inf) or no finite entry
    # (-inf - -inf) comes out NaN everywhere, any other row nowhere: its first column tells, a check
    # of [...] entries where the row maxima were a further pass over V (0.2-0.4 ms a target call).
    if bool(probs[..., 0].isnan().any()):
        raise _no_distribution()
    if top_p is not None and top_p < 1:
        probs = probs.masked_fill(_nucleus_drop(probs, top_p), 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def _no_distribution() -> ValueError:
    return ValueError("logits: a row has a NaN, a +inf, or no finite entry (all -inf); its probabilities would be NaN")


_NUCLEUS_CANDIDATES = 64  # the first candidates _nucleus_drop sorts; 8 times more each time they do not decide


def _nucleus_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The tokens top-p sampling drops from ``probs`` [..., V] (Holtzman et al. 2020, section 3.1:
    the smallest prefix of the tokens in descending order of probability whose mass reaches
    ``top_p`` is kept), as a bool mask [..., V]: a token whose mass before it reaches ``top_p``,
    ties ordered by the lower token id first.

    Sorted over the most probable candidates only (``_NUCLEUS_CANDIDATES``, eight times more until
    they decide, at most all V): a token outside them has at least their whole mass before it, and
    they decide when every kept token is more probable than the last candidate (all its ties are
    then candidates too). The same drops as a stable sort of all V tokens, bit for bit on the CPU
    (the mass before a token is the same sequential prefix sum); on SmolLM2's 49,152 tokens a row costs a partial
    selection instead of a full sort (docs/results/speed_smollm2.md)."""
    size = probs.shape[-1]
    count = min(size, _NUCLEUS_CANDIDATES)
    while True:
        if count == size:
            values, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        else:
            values, order = torch.topk(probs, count, dim=-1)
            order, by_id = torch.sort(order, dim=-1)  # ties in the lower id first, then by probability:
            values, by_value = torch.sort(values.gather(-1, by_id), dim=-1, descending=True, stable=True)
            order = order.gather(-1, by_value)
        kept = torch.cumsum(values, dim=-1) - values < top_p  # the mass before each token
        if count == size or bool((~kept | (values > values[..., -1:])).all()):
            return torch.ones_like(probs, dtype=torch.bool).scatter_(-1, order, ~kept)
        count = min(size, 8 * count)


def check_warping(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """``ValueError`` naming the setting unless :func:`warp` takes it: ``temperature`` a finite
    number >= 0, ``top_k`` None or an int >= 1, ``top_p`` None or a number in (0, 1]."""
    if not _is_real(temperature) or not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    if top_p is not None and (not _is_real(top_p) or not (0 < top_p <= 1)):
        raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)

"""Input checks shared by the theory functions: every bad input is a ``ValueError`` naming what is
wrong; nothing is clipped or renormalised (the project's rule, see :mod:`draftverify.probs`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..probs import check_distributions


def as_float_array(value, name: str) -> np.ndarray:
    """``value`` as a float64 array; ``ValueError`` if it is not numeric or not finite."""
    try:
        array = np.array(value, dtype=np.float64)  # a copy: callers may pass read-only views
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: expected numbers, got {value!r}") from error
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return array


def as_floats(values, name: str) -> list[float]:
    """``values`` as a list of Python floats (for a few numbers, where numpy's per-call cost would
    dominate); ``ValueError`` if it is not a 1-D sequence of finite numbers."""
    try:
        floats = [float(v) for v in values]
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: expected a 1-D sequence of numbers, got {values!r}") from error
    if not all(math.isfinite(v) for v in floats):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return floats


def rate(value, name: str, *, low: float = 0.0, high: float = 1.0, open_high: bool = False) -> np.ndarray:
    """A number (or array) in [low, high] (or [low, high) with ``open_high``)."""
    array = as_float_array(value, name)
    bad = (array < low) | ((array >= high) if open_high else (array > high))
    if np.any(bad):
        interval = f"[{low:g}, {high:g})" if open_high else f"[{low:g}, {high:g}]"
        raise ValueError(f"{name}: must lie in {interval}, got {value!r}")
    return array


def count(value, name: str, *, low: int = 0) -> np.ndarray:
    """A non-negative (>= ``low``) integer, or an integer array."""
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        as_float = as_float_array(value, name)
        if np.any(as_float != np.round(as_float)):
            raise ValueError(f"{name}: must be an integer, got {value!r}")
        array = as_float.astype(np.int64)
    if np.any(array < low):
        raise ValueError(f"{name}: must be >= {low}, got {value!r}")
    return array.astype(np.int64)


def distribution(value, name: str) -> np.ndarray:
    """Probability vectors along the last axis (shape ``[..., V]``), float64."""
    array = as_float_array(value, name)
    if array.ndim == 0:
        raise ValueError(f"{name}: expected a probability vector [..., V], got a scalar")
    check_distributions(torch.from_numpy(array), name)
    return array


def distribution_pair(target, draft) -> tuple[np.ndarray, np.ndarray]:
    """Target and draft distributions of the same shape ``[..., V]``."""
    target = distribution(target, "target_probs")
    draft = distribution(draft, "draft_probs")
    if target.shape != draft.shape:
        raise ValueError(f"target_probs {target.shape} and draft_probs {draft.shape} must have the same shape")
    return target, draft


def tables(value: Sequence, name: str) -> list[np.ndarray]:
    """Conditional tables of an autoregressive model over a block of L tokens.

    ``value[i]`` has shape ``[V] * (i + 1)``: ``value[i][x_1, ..., x_i, :]`` is the conditional of
    token i + 1 given the block's first i tokens x^i (``value[0]`` is the first token's
    distribution). Every row is a distribution, reachable or not.
    """
    if isinstance(value, np.ndarray | torch.Tensor) or len(value) == 0:
        raise ValueError(f"{name}: expected a non-empty list of conditional tables [V]*(i+1), i = 0..L-1")
    out = []
    for i, table in enumerate(value):
        table = distribution(table, f"{name}[{i}]")
        vocab = table.shape[-1]
        if table.shape != (vocab,) * (i + 1):
            raise ValueError(f"{name}[{i}]: expected shape [V]*{i + 1}, got {table.shape}")
        if out and vocab != out[0].shape[0]:
            raise ValueError(f"{name}[{i}]: vocabulary {vocab} differs from {name}[0]'s {out[0].shape[0]}")
        out.append(table)
    return out


def table_pair(target, draft) -> tuple[list[np.ndarray], list[np.ndarray]]:
    target = tables(target, "target_tables")
    draft = tables(draft, "draft_tables")
    if len(target) != len(draft) or target[0].shape != draft[0].shape:
        raise ValueError(
            f"target_tables (L={len(target)}, V={target[0].shape[0]}) and draft_tables "
            f"(L={len(draft)}, V={draft[0].shape[0]}) must have the same block length and vocabulary"
        )
    return target, draft


def joint_laws(tables: list[np.ndarray]) -> list[np.ndarray]:
    """Joint laws of the first i + 1 tokens (``[V] * (i + 1)``) from conditional tables."""
    joints = [tables[0]]
    for table in tables[1:]:
        joints.append(joints[-1][..., None] * table)  # [V]*(i+1)
    return joints

"""Batched verification: one call verifies the drafts of a whole batch of requests, on the flattened
ragged layout of serving engines (see :mod:`.batched_kernels` for the layout and docs/serving.md
for how it maps onto vLLM v1's rejection sampler).

:func:`verify_batch` is the public boundary: it validates the arrays once (shapes, dtypes, devices,
offsets, and with ``validate=True`` the values), draws the uniforms from the caller's generator in
one call, and runs a kernel that trusts its inputs. Row b of a call commits exactly what today's
per-row ``verify`` of the same name commits when it draws from the same uniforms; with a CPU
``torch.Generator`` that means: the same generator passed to the per-row verifiers called in row
order (rows with L_b >= 1) leaves the same tokens and the same generator state.

Batched here: ``sd``, ``submaximal``, ``greedy``, ``bv``. Not batched: ``gbv`` (its target
modification stack is per-row state that changes every later call's target rows; it stays a per-row
verifier) and the multi-draft verifiers (``multidraft-bv``, ``kseq``, ...).
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch

from ..probs import as_tensor, check_distributions
from ..rng import check_generator
from .batched_kernels import (
    PAD_TOKEN_ID,
    BatchedVerifyResult,
    bv_kernel,
    greedy_kernel,
    sd_kernel,
    submaximal_kernel,
)

__all__ = ["PAD_TOKEN_ID", "BatchedVerifyResult", "BATCHED_KERNELS", "draw_uniforms", "verify_batch"]

Kernel = Callable[..., BatchedVerifyResult]

# name -> kernel (same names as the per-row verifiers); not the verifier registry
BATCHED_KERNELS: dict[str, Kernel] = {
    "sd": sd_kernel,
    "submaximal": submaximal_kernel,
    "greedy": greedy_kernel,
    "bv": bv_kernel,
}
_DETERMINISTIC = frozenset({"greedy"})  # draw no uniforms, as the per-row verifier draws none


def draw_uniforms(
    num_tokens: int, batch_size: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The uniforms of one batched call, drawn in one call: [num_tokens + B] float64 in [0, 1).

    Float64 because a float32 uniform can be exactly 0 and accept a zero-probability event. On a
    CPU generator one draw of n values equals consecutive draws of their parts, so this is the
    stream the per-row verifiers would consume row after row.
    """
    check_generator(generator, branching=False)
    return torch.rand(num_tokens + batch_size, generator=generator, dtype=torch.float64, device=device)


def verify_batch(
    method: str,
    draft_token_ids,  # [num_tokens] int
    draft_probs,  # [num_tokens, V] float32/float64 (None for greedy)
    target_probs,  # [num_tokens + B, V] same dtype
    cu_num_draft_tokens,  # [B] int, cumulative draft lengths
    *,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,  # [num_tokens + B] float64; drawn from generator if None
    max_draft_len: int | None = None,
    fraction: float | None = None,
    validate: bool = True,
) -> BatchedVerifyResult:
    """Verify a batch of drafts with the batched kernel ``method`` (``sd``, ``submaximal``,
    ``greedy`` or ``bv``); ``fraction`` is ``submaximal``'s lambda (default 0.5).

    Checks the layout always (host-side shapes, plus one read of the [B] offsets); with
    ``validate`` also every value: token ids in [0, V), probability rows (finite, non-negative,
    summing to one), positive draft probability of each drafted token, uniforms in [0, 1).
    ``max_draft_len`` (the serving engine knows it) saves the one host read of the offsets' maximum.
    Raises ``ValueError`` with what is wrong.
    """
    if not isinstance(method, str) or method not in BATCHED_KERNELS:
        raise ValueError(f"unknown batched method {method!r}; known: {', '.join(sorted(BATCHED_KERNELS))}")
    kernel = BATCHED_KERNELS[method]
    if method == "submaximal":
        lam = 0.5 if fraction is None else float(fraction)
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"submaximal: fraction must lie in [0, 1], got {fraction}")
        kernel = partial(kernel, fraction=lam)
    elif fraction is not None:
        raise ValueError(f"{method}: takes no fraction (only submaximal does)")
    tokens, draft, target, cu = _check_layout(method, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens)
    num_tokens, batch = tokens.shape[0], cu.shape[0]
    lengths = torch.diff(cu, prepend=cu.new_zeros(1))  # [B]
    low_length, high_length, first, last = torch.stack([lengths.amin(), lengths.amax(), cu[0], cu[-1]]).tolist()
    if low_length < 0 or first < 0 or last != num_tokens:
        raise ValueError(
            f"cu_num_draft_tokens: must be non-decreasing from >= 0 and end at num_tokens = {num_tokens}, "
            f"got {cu.tolist() if batch <= 16 else f'{first}..{last}'}"
        )
    if max_draft_len is None:
        max_draft_len = high_length
    elif max_draft_len < high_length:
        raise ValueError(f"max_draft_len = {max_draft_len} is below the longest draft ({high_length})")
    if method in _DETERMINISTIC:
        uniforms = None
    elif uniforms is None:
        uniforms = draw_uniforms(num_tokens, batch, generator, target.device)
    else:
        uniforms = _check_uniforms(uniforms, num_tokens + batch, target.device, validate)
    if validate:
        _check_values(tokens, draft, target)
    return kernel(tokens, draft, target, cu, uniforms, max_draft_len)


def _check_layout(method, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens):
    tokens = as_tensor(draft_token_ids, "draft_token_ids")
    cu = as_tensor(cu_num_draft_tokens, "cu_num_draft_tokens")
    target = as_tensor(target_probs, "target_probs")
    for array, label in ((tokens, "draft_token_ids"), (cu, "cu_num_draft_tokens")):
        if array.dtype.is_floating_point or array.dtype.is_complex or array.dtype == torch.bool or array.dim() != 1:
            raise ValueError(f"{label}: expected a 1-D integer tensor, got {array.dtype} of shape {tuple(array.shape)}")
    if cu.shape[0] < 1:
        raise ValueError("cu_num_draft_tokens: need at least one row")
    num_tokens, batch = tokens.shape[0], cu.shape[0]
    if target.dim() != 2 or target.shape[0] != num_tokens + batch or target.shape[1] < 1:
        raise ValueError(
            f"target_probs: expected shape [num_tokens + B = {num_tokens + batch}, V], got {tuple(target.shape)}"
        )
    if target.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"target_probs: dtype must be float32 or float64, got {target.dtype}")
    if draft_probs is None:
        if method not in _DETERMINISTIC:
            raise ValueError(f"{method}: draft_probs is required (only greedy verifies without it)")
        draft = None
    else:
        draft = as_tensor(draft_probs, "draft_probs")
        if tuple(draft.shape) != (num_tokens, target.shape[1]):
            raise ValueError(
                f"draft_probs: expected shape [num_tokens = {num_tokens}, V = {target.shape[1]}] "
                f"(V from target_probs), got {tuple(draft.shape)}"
            )
        if draft.dtype != target.dtype:
            raise ValueError(f"dtype mismatch: draft_probs is {draft.dtype}, target_probs is {target.dtype}")
    devices = {t.device for t in (tokens, cu, draft, target) if t is not None}
    if len(devices) > 1:
        raise ValueError(f"all arrays must be on one device, got {sorted(map(str, devices))}")
    return tokens.to(torch.int64), draft, target, cu.to(torch.int64)


def _check_uniforms(uniforms, size: int, device: torch.device, validate: bool) -> torch.Tensor:
    uniforms = as_tensor(uniforms, "uniforms")
    if uniforms.dtype != torch.float64 or tuple(uniforms.shape) != (size,):
        raise ValueError(f"uniforms: expected float64 of shape [num_tokens + B = {size}], got {uniforms.dtype} {tuple(uniforms.shape)}")
    if uniforms.device != device:
        raise ValueError(f"uniforms: on {uniforms.device}, the probabilities on {device}")
    if validate and size:
        low, high = torch.aminmax(uniforms)
        if not (float(low) >= 0 and float(high) < 1):
            raise ValueError(f"uniforms: must lie in [0, 1), got {float(low)}..{float(high)}")
    return uniforms


def _check_values(tokens: torch.Tensor, draft: torch.Tensor | None, target: torch.Tensor) -> None:
    """The value checks of the per-row contract (:func:`.base.check_inputs`), over the flat arrays."""
    vocab = target.shape[1]
    check_distributions(target, "target_probs")
    if tokens.numel() == 0:
        return
    low_token, high_token = (int(v) for v in torch.aminmax(tokens))
    if low_token < 0 or high_token >= vocab:
        raise ValueError(f"draft_token_ids: token ids must lie in [0, V={vocab}), got {low_token}..{high_token}")
    if draft is None:  # greedy without draft_probs
        return
    check_distributions(draft, "draft_probs")
    drafted = draft.gather(1, tokens[:, None]).squeeze(1)  # [num_tokens]
    if float(drafted.amin()) <= 0:
        t = int(torch.nonzero(drafted <= 0)[0])
        raise ValueError(
            f"draft_token_ids[{t}] = {int(tokens[t])} has zero draft probability: it cannot have been sampled from draft_probs"
        )

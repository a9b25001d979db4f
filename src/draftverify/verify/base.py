"""The verifier contract, its input validation, and the registry of verifiers by name.

Terms used by every verifier (defined once here):

- *draft tokens*: ``draft_tokens[k, i]`` is token i + 1 of draft k, sampled from
  ``draft_probs[k, i]`` = D(. | prefix, draft_tokens[k, :i]).
- *target conditionals*: ``target_probs[k, i]`` = T(. | prefix, draft_tokens[k, :i]) for
  i = 0..L: row L is the target's conditional after the whole draft.
- *accepted tokens*: the draft prefix the verifier keeps.
- *correction token*: drawn from a residual distribution after a rejection.
- *bonus token*: drawn from ``target_probs[k, L]`` when the whole draft is accepted.

A call returns the accepted tokens followed by exactly one correction or bonus token, so every call
commits at least one token. An exact verifier leaves the law of the decoded sequence equal to the
target's, across calls of the ordinary decoding loop (passing ``state`` along).
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..probs import as_tensor, check_distributions
from ..rng import BranchingSource, check_generator
from .batched import BatchedVerifyResult, draw_uniforms

__all__ = [
    "VerifyResult",
    "VerifierInfo",
    "Verifier",
    "register",
    "get_verifier",
    "verifiers",
    "check_inputs",
    "STRATEGIES",
]


@dataclass(frozen=True)
class VerifyResult:
    """What one verification call commits.

    ``tokens`` = accepted draft prefix + one correction or bonus token; ``num_accepted`` = length of
    that prefix; ``draft_index`` = the draft row the prefix came from; ``state`` = what the next call
    of the same decoding must receive (None for stateless verifiers).
    """

    tokens: list[int]
    num_accepted: int
    draft_index: int
    state: Any = None


@dataclass(frozen=True)
class VerifierInfo:
    name: str
    description: str
    exact: bool
    multi_draft: bool
    options: tuple[str, ...]
    batched: bool = False  # has a batched kernel (Verifier.verify_batch)
    prefix_draft_only: bool = False  # exact only with a draft whose law depends on the prefix alone


@dataclass(frozen=True, kw_only=True)
class Verifier(ABC):
    """Base class: subclasses are frozen dataclasses whose fields are the verifier's options.

    ``verify`` validates the inputs (see :func:`check_inputs`) and the generator
    (:func:`draftverify.rng.check_generator`) and calls ``_verify`` with tensors of shapes
    ``[K, L]``, ``[K, L, V]`` and ``[K, L + 1, V]``. The option ``validate`` (default True)
    can be turned off by a caller whose inputs are valid by construction: shapes, dtypes and token
    ranges are still checked, the passes over the values (finite, non-negative, rows summing to
    one, drafted tokens with positive draft probability) are skipped. ``multidraft-bv`` turns it
    off for its inner ``bv`` call; the decoding engine turns it off too (its distributions come from
    ``probs.warp``) unless the method asks for it (``"sd(validate=true)"``). Both call
    :meth:`verify_trusted`, which also skips the layout checks of arrays they built themselves.

    ``strategy`` tells the decoding engine how to run one step for this verifier (one of
    :data:`STRATEGIES`): ``"parallel"`` drafts K x L tokens, scores them all in one target forward
    (a tree of the K drafts) and calls :meth:`verify_rows`; ``"gated"`` drafts one token at a time
    while the verifier's ``yes_probability`` says "yes" and calls the target once, on the run.

    A verifier with a batched kernel (``sd``, ``submaximal``, ``greedy``, ``bv``) implements
    :meth:`kernel` on the flattened ragged layout of :mod:`.batched`; :meth:`verify_batch` is its
    public form. Its per-row ``_verify`` is either that kernel on one row (``greedy``, which draws
    nothing) or the paper's algorithm box drawing through :mod:`draftverify.rng`, which exact
    enumeration replays branch by branch; the two are tested against each other, bit for bit on the
    same uniforms (tests/verify/test_batched.py).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    exact: ClassVar[bool]
    multi_draft: ClassVar[bool] = False
    strategy: ClassVar[str] = "parallel"
    deterministic: ClassVar[bool] = False  # draws nothing: a batched call takes no uniforms, draft_probs may be None
    # its state makes the next call read the draft's law at a prefix as this call's draft would have
    # had it (gbv's target modification): exact only for a draft whose law is a function of the
    # prefix, not of the depth within a call (a feature draft's is); the engine refuses the pair
    prefix_draft_only: ClassVar[bool] = False
    validate: bool = True

    def verify(
        self,
        draft_tokens,
        draft_probs,
        target_probs,
        generator: torch.Generator | BranchingSource | None = None,
        state: Any = None,
    ) -> VerifyResult:
        tokens, draft, target = check_inputs(
            draft_tokens, draft_probs, target_probs, multi_draft=self.multi_draft, check_values=self.validate
        )
        check_generator(generator)
        return self._verify(tokens, draft, target, generator, state)

    def verify_trusted(
        self,
        draft_tokens: torch.Tensor,  # [K, L] int64
        draft_probs: torch.Tensor,  # [K, L, V]
        target_probs: torch.Tensor,  # [K, L + 1, V], the dtype of draft_probs
        generator: torch.Generator | BranchingSource | None,
        state: Any = None,
    ) -> VerifyResult:
        """``verify`` for a caller that built the arrays to the contract itself (the decoding
        engine: tensors of the shapes above, tokens sampled from ``draft_probs``, a valid
        generator): no layout checks. With ``validate`` set it is ``verify`` itself, so a user who
        asked for the value checks still gets them. In the decoding loop each skipped check is a
        few tensor ops that start cold after the target's forward (about 15 us each here)."""
        if self.validate:
            return self.verify(draft_tokens, draft_probs, target_probs, generator, state)
        return self._verify(draft_tokens, draft_probs, target_probs, generator, state)

    def verify_rows(
        self,
        draft_tokens: torch.Tensor,  # [R K, L] int64: K drafts of each of R prompts, prompt by prompt
        draft_probs: torch.Tensor,  # [R K, L, V]
        target_probs: torch.Tensor,  # [R K, L + 1, V], the dtype of draft_probs
        generator: torch.Generator | None,
        states: list[Any],  # [R]: each prompt's state from its previous call
        lengths: list[int] | None = None,  # [R]: prompt r verifies its first lengths[r] <= L drafted tokens
    ) -> list[VerifyResult]:
        """The decoding engine's call: each prompt's K drafts verified, arrays built to the contract
        (as for :meth:`verify_trusted`); with ``lengths`` (a draft-length policy's ragged L) prompt r
        verifies only its first ``lengths[r]`` drafted tokens. With a batched kernel, one draft and
        several prompts, all rows go through ONE kernel call on the flattened ragged layout, which
        commits what the per-row calls would (same uniforms, same float operations); otherwise prompt
        by prompt. Raises ``ValueError`` when a verifier returns accepted tokens that are not a prefix
        of the draft it names."""
        rows = len(states)
        k, length = draft_tokens.shape[0] // rows, draft_tokens.shape[1]
        lengths = [length] * rows if lengths is None else lengths
        if self.batched and k == 1 and rows > 1:
            if min(lengths) < length:  # [sum L_r], [sum L_r, V], [sum (L_r + 1), V]
                ragged = [(draft_tokens[r, :n], draft_probs[r, :n], target_probs[r, : n + 1]) for r, n in enumerate(lengths)]
                draft_tokens, draft_probs, target_probs = (torch.cat(parts) for parts in zip(*ragged))
            vocab = target_probs.shape[-1]
            out = self.verify_batch(
                draft_tokens.reshape(-1), draft_probs.reshape(-1, vocab), target_probs.reshape(-1, vocab),
                torch.tensor(lengths).cumsum(0), generator=generator, max_draft_len=length,
            )  # [R] accepted counts, [R, L + 1] tokens
            return [VerifyResult(tokens[: n + 1], n, 0)
                    for tokens, n in zip(out.output_tokens.tolist(), out.num_accepted.tolist())]
        drafted, results = draft_tokens.tolist(), []  # [R K][L]
        arrays = (draft_tokens, draft_probs, target_probs)
        for r, state in enumerate(states):
            # one prompt: the arrays are its own, no slicing (each view is a tensor op in the loop)
            own = arrays if rows == 1 else [a[r * k : (r + 1) * k] for a in arrays]
            if lengths[r] < length:
                n, (tokens, draft, target) = lengths[r], own
                own = (tokens[:, :n], draft[:, :n], target[:, : n + 1])
            result = self.verify_trusted(*own, generator, state)
            if result.tokens[: result.num_accepted] != drafted[r * k + result.draft_index][: result.num_accepted]:
                raise ValueError(f"{self.name}: accepted tokens are not a prefix of draft {result.draft_index}")
            results.append(result)
        return results

    @property
    def batched(self) -> bool:
        """Whether this verifier has a batched kernel (:meth:`verify_batch`)."""
        return type(self).kernel is not Verifier.kernel

    def verify_batch(
        self,
        draft_token_ids,  # [num_tokens] int
        draft_probs,  # [num_tokens, V] float32/float64 (may be None for a deterministic verifier)
        target_probs,  # [num_tokens + B, V] same dtype
        cu_num_draft_tokens,  # [B] int, cumulative draft lengths
        *,
        generator: torch.Generator | None = None,
        uniforms: torch.Tensor | None = None,  # [num_tokens + B] float64; drawn from generator if None
        max_draft_len: int | None = None,
    ) -> BatchedVerifyResult:
        """Verify a batch of drafts on the flattened ragged layout of :mod:`.batched` in one call.

        Checks the layout always (host-side shapes, plus one read of the [B] offsets); with
        ``validate`` also every value: token ids in [0, V), probability rows (finite, non-negative,
        summing to one), positive draft probability of each drafted token, uniforms in [0, 1).
        ``max_draft_len`` (the serving engine knows it) saves the one host read of the offsets'
        maximum. Raises ``ValueError`` with what is wrong, and for a verifier without a kernel.
        """
        if not self.batched:
            raise ValueError(f"verifier {self.name!r} has no batched kernel; verify it row by row with verify()")
        tokens, draft, target, cu = _check_layout(
            draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, self.deterministic
        )
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
        if self.deterministic:
            uniforms = None
        elif uniforms is None:
            uniforms = draw_uniforms(num_tokens, batch, generator, target.device)
        else:
            uniforms = _check_uniforms(uniforms, num_tokens + batch, target.device, self.validate)
        if self.validate:
            if num_tokens:
                _check_token_range(tokens, target.shape[-1], "draft_token_ids")
            _check_values(tokens, draft, target, "draft_token_ids")
        return self.kernel(tokens, draft, target, cu, uniforms, max_draft_len)

    @abstractmethod
    def _verify(
        self,
        draft_tokens: torch.Tensor,  # [K, L] int64
        draft_probs: torch.Tensor,  # [K, L, V]
        target_probs: torch.Tensor,  # [K, L + 1, V]
        generator: torch.Generator | BranchingSource | None,
        state: Any,
    ) -> VerifyResult: ...

    def kernel(
        self,
        draft_token_ids: torch.Tensor,  # [num_tokens] int64
        draft_probs: torch.Tensor | None,  # [num_tokens, V]
        target_probs: torch.Tensor,  # [num_tokens + B, V]
        cu_num_draft_tokens: torch.Tensor,  # [B] int64
        uniforms: torch.Tensor | None,  # [num_tokens + B] float64 (None when deterministic)
        max_draft_len: int,
    ) -> BatchedVerifyResult:
        """The batched kernel on the layout of :mod:`.batched`, trusting its inputs (int64 ids and
        offsets, probabilities of one dtype, uniforms drawn by :func:`.batched.draw_uniforms`): no
        checks and no host synchronisation, for a serving engine's hot path. None by default."""
        raise NotImplementedError(f"verifier {self.name!r} has no batched kernel")


STRATEGIES = ("parallel", "gated")

_REGISTRY: dict[str, type[Verifier]] = {}


def register(cls: type[Verifier]) -> type[Verifier]:
    """Class decorator: make ``cls`` available to :func:`get_verifier` under ``cls.name``."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"verifier {cls.__name__} must be a dataclass (its fields are its options)")
    if cls.strategy not in STRATEGIES:
        raise ValueError(f"verifier {cls.name!r}: strategy must be one of {', '.join(STRATEGIES)}, got {cls.strategy!r}")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"verifier name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _ensure_loaded() -> None:
    # importing the families registers them
    from . import block, multidraft, multidraft_bv, spectr_gbv, sprinter, token  # noqa: F401


def get_verifier(name: str, **options: Any) -> Verifier:
    """The verifier registered as ``name``, configured with ``options``.

    ``name`` may carry its options in the method grammar of :mod:`.spec`, e.g.
    ``get_verifier("ot(solver=gr,tol=1e-4)")``. Unknown names and options raise ``ValueError``
    listing what exists; so does an option value of the wrong type, and an option written in ``name``
    and passed as a keyword with another value.
    """
    from .spec import check_option_values, parse_method  # spec imports this module

    if not isinstance(name, str):
        raise ValueError(f"verifier name: expected a str such as 'bv', got {type(name).__name__}")
    if "(" in name or "@" in name:
        spec = parse_method(name)
        if spec.draft is not None or spec.num_drafts is not None or spec.draft_length is not None:
            raise ValueError(f"{name!r}: K, L and @draft are decoding settings; get_verifier takes the verifier alone")
        clash = sorted(k for k in set(spec.options) & set(options) if spec.options[k] != options[k])
        if clash:
            raise ValueError(f"{name!r} and the keyword options disagree on {', '.join(clash)}")
        name, options = spec.name, {**spec.options, **options}
    _ensure_loaded()
    if name not in _REGISTRY:
        raise ValueError(f"unknown verifier {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    cls = _REGISTRY[name]
    allowed = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(options) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) or "no options"
        raise ValueError(f"verifier {name!r} does not take option(s) {', '.join(unknown)}; it takes {takes}")
    check_option_values(name, options)
    return cls(**_loaded(cls, options))


def _loaded(cls: type[Verifier], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each option the verifier class lists in ``loaders`` (``{"classifier":
    "module:function"}``) turned from a name, a path or None into its object by that function.
    The loader lives in the layer that owns such objects (SPRINTER's trained classifier in
    ``draftverify.approx``) and is imported only here, by name, when a verifier is built from
    text; the verifier itself keeps taking the object."""
    loaders = getattr(cls, "loaders", {})
    if not loaders:
        return options
    import importlib

    options = dict(options)
    for option, where in loaders.items():
        value = options.get(option)
        if value is None or isinstance(value, (str, os.PathLike)):
            module, _, function = where.partition(":")
            options[option] = getattr(importlib.import_module(module), function)(value)
    return options


def verifiers() -> list[VerifierInfo]:
    """Every registered verifier: name, one-line description, exactness, multi-draft, options."""
    _ensure_loaded()
    return [
        VerifierInfo(
            name=cls.name,
            description=cls.description,
            exact=cls.exact,
            multi_draft=cls.multi_draft,
            prefix_draft_only=cls.prefix_draft_only,
            options=tuple(f.name for f in dataclasses.fields(cls) if f.init),
            batched=cls.kernel is not Verifier.kernel,
        )
        for cls in sorted(_REGISTRY.values(), key=lambda c: c.name)
    ]


def check_inputs(
    draft_tokens, draft_probs, target_probs, *, multi_draft: bool, check_values: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate the per-row contract's arrays; return them as tensors (tokens as int64).

    Raises ``ValueError`` for: arrays that are not tensors or numeric numpy arrays, wrong rank or
    shape, V = 0, V mismatch, non-integer tokens, float dtype mismatch, K > 1 for a single-draft
    verifier, tokens outside [0, V), and, with ``check_values``: NaN/inf/negative entries, rows not
    summing to one, a drafted token with zero draft probability.
    """
    tokens = as_tensor(draft_tokens, "draft_tokens")
    draft = as_tensor(draft_probs, "draft_probs")
    target = as_tensor(target_probs, "target_probs")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"draft_tokens: expected an integer tensor, got {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"draft_tokens: expected shape [K, L], got {tuple(tokens.shape)}")
    num_drafts, length = tokens.shape
    if num_drafts < 1 or length < 1:
        raise ValueError(f"draft_tokens: need K >= 1 and L >= 1, got shape {tuple(tokens.shape)}")
    if not multi_draft and num_drafts != 1:
        raise ValueError(f"single-draft verifier given K = {num_drafts} drafts; use a multi-draft verifier")
    if draft.dim() != 3 or tuple(draft.shape[:2]) != (num_drafts, length):
        raise ValueError(f"draft_probs: expected shape [K={num_drafts}, L={length}, V], got {tuple(draft.shape)}")
    vocab = draft.shape[2]
    if vocab < 1:
        raise ValueError(f"draft_probs: empty vocabulary (V = 0) in shape {tuple(draft.shape)}")
    if tuple(target.shape) != (num_drafts, length + 1, vocab):
        raise ValueError(
            f"target_probs: expected shape [K={num_drafts}, L+1={length + 1}, V={vocab}] "
            f"(V from draft_probs), got {tuple(target.shape)}"
        )
    _check_dtypes(draft, target)
    tokens = tokens.to(torch.int64)
    _check_token_range(tokens, vocab, "draft_tokens")
    if check_values:
        _check_values(tokens, draft, target, "draft_tokens")
    return tokens, draft, target


def _check_layout(draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, deterministic: bool):
    """The flattened ragged layout's shapes, dtypes and device (see :mod:`.batched`)."""
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
    if draft_probs is None:
        if not deterministic:
            raise ValueError("draft_probs is required (only a deterministic verifier such as greedy verifies without it)")
        _check_dtypes(None, target)
        draft = None
    else:
        draft = as_tensor(draft_probs, "draft_probs")
        if tuple(draft.shape) != (num_tokens, target.shape[1]):
            raise ValueError(
                f"draft_probs: expected shape [num_tokens = {num_tokens}, V = {target.shape[1]}] "
                f"(V from target_probs), got {tuple(draft.shape)}"
            )
        _check_dtypes(draft, target)
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


def _check_dtypes(draft: torch.Tensor | None, target: torch.Tensor) -> None:
    for array, label in ((draft, "draft_probs"), (target, "target_probs")):
        if array is not None and array.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{label}: dtype must be float32 or float64, got {array.dtype}")
    if draft is not None and draft.dtype != target.dtype:
        raise ValueError(f"dtype mismatch: draft_probs is {draft.dtype}, target_probs is {target.dtype}")


def _check_token_range(tokens: torch.Tensor, vocab: int, label: str) -> None:
    low_token, high_token = (int(v) for v in torch.aminmax(tokens))
    if low_token < 0 or high_token >= vocab:
        raise ValueError(f"{label}: token ids must lie in [0, V={vocab}), got {low_token}..{high_token}")


def _check_values(tokens: torch.Tensor, draft: torch.Tensor | None, target: torch.Tensor, label: str) -> None:
    """Probability rows (finite, non-negative, summing to one) and a positive draft probability
    of every drafted token; ``tokens`` [...] index the last axis of ``draft`` [..., V]."""
    check_distributions(target, "target_probs")
    if draft is None or tokens.numel() == 0:
        return
    check_distributions(draft, "draft_probs")
    drafted = draft.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [...]
    if float(drafted.amin()) <= 0:
        where = [int(v) for v in torch.nonzero(drafted <= 0)[0]]
        raise ValueError(
            f"{label}[{', '.join(map(str, where))}] = {int(tokens[tuple(where)])} has zero draft probability: "
            "it cannot have been sampled from draft_probs"
        )

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
    (a tree of the K drafts) and calls ``verify``; ``"gated"`` drafts one token at a time while the
    verifier's ``yes_probability`` says "yes" and calls the target once, on the run.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    exact: ClassVar[bool]
    multi_draft: ClassVar[bool] = False
    strategy: ClassVar[str] = "parallel"
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

    @abstractmethod
    def _verify(
        self,
        draft_tokens: torch.Tensor,  # [K, L] int64
        draft_probs: torch.Tensor,  # [K, L, V]
        target_probs: torch.Tensor,  # [K, L + 1, V]
        generator: torch.Generator | BranchingSource | None,
        state: Any,
    ) -> VerifyResult: ...


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
            options=tuple(f.name for f in dataclasses.fields(cls) if f.init),
        )
        for cls in sorted(_REGISTRY.values(), key=lambda c: c.name)
    ]


def check_inputs(
    draft_tokens, draft_probs, target_probs, *, multi_draft: bool, check_values: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate the contract's arrays; return them as tensors (tokens as int64).

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
    for array, label in ((draft, "draft_probs"), (target, "target_probs")):
        if array.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{label}: dtype must be float32 or float64, got {array.dtype}")
    if draft.dtype != target.dtype:
        raise ValueError(f"dtype mismatch: draft_probs is {draft.dtype}, target_probs is {target.dtype}")
    tokens = tokens.to(torch.int64)
    low_token, high_token = (int(v) for v in torch.aminmax(tokens))
    if low_token < 0 or high_token >= vocab:
        raise ValueError(f"draft_tokens: token ids must lie in [0, V={vocab}), got {low_token}..{high_token}")
    if not check_values:
        return tokens, draft, target
    check_distributions(draft, "draft_probs")
    check_distributions(target, "target_probs")
    drafted = draft.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [K, L]
    if float(drafted.amin()) <= 0:
        k, i = (int(v) for v in torch.nonzero(drafted <= 0)[0])
        raise ValueError(
            f"draft_tokens[{k}, {i}] = {int(tokens[k, i])} has zero draft probability: "
            "it cannot have been sampled from draft_probs"
        )
    return tokens, draft, target


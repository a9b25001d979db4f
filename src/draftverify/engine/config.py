"""The decoding configuration: a frozen, validated dataclass."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

from ..probs import check_warping
from ..verify import MethodSpec, Verifier, get_verifier, parse_method
from .draft_length import DraftLengthPolicy, draft_length_policy

__all__ = ["DecodeConfig", "AR", "GREEDY", "PREFIX_DRAFT_ONLY", "SEED_RANGE", "refuses_draft"]

AR = "ar"  # plain autoregressive sampling from the target: the baseline every method is compared with
GREEDY = "greedy"  # the verifier of temperature-0 decoding: it keeps the target's argmax
SEED_RANGE = (0, 2**64 - 1)  # what torch.Generator.manual_seed and numpy's default_rng both take
PREFIX_DRAFT_ONLY = ("exact only with a draft whose law depends on the prefix alone; this draft's law depends on "
                     "its depth within a step (a feature draft)")  # why refuses_draft refuses


def refuses_draft(verifier: Verifier, draft: Any) -> bool:
    """True when ``verifier`` is exact only with a draft whose law is a function of the prefix
    (``Verifier.prefix_draft_only``: ``gbv``'s target modification) and ``draft``'s law depends on
    its depth within a step (``LanguageModel.depth_dependent``); the engine, ``bench decode`` and
    ``tune`` refuse such a pair."""
    return verifier.prefix_draft_only and draft is not None and draft.depth_dependent


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode. ``method`` is ``"ar"`` or a registered verifier in the method grammar of
    :mod:`draftverify.verify.spec` (``"bv"``, ``"ot(solver=gr)"``, ``"kseq(K=4)"``; ``options`` are
    more of its options, and after construction ``method`` is the bare name with every option in
    ``options``); ``num_drafts`` (K) and ``draft_length`` (L) default to 1 and 4 for verifiers and must
    stay None for ``ar``. The same warping (temperature, top-k, top-p) is applied to draft and
    target: verifiers are exact for the warped target. ``temperature`` unset is 1, and 0 for
    ``greedy``, which decodes at temperature 0 only (it keeps the target's argmax; at any other
    temperature its output would still be the argmax, not the target's law), so ``greedy`` with a
    temperature other than 0 is an error. ``draft_length`` may also be ``"auto"``,
    ``"heuristic"`` or a policy of :mod:`.draft_length` (each step's L chosen from the past). ``method`` may also be a
    :class:`~draftverify.verify.MethodSpec` a caller parsed already (the CLI: the method is parsed
    once, at the boundary) or a ``Verifier`` instance (e.g. an unregistered one under test). ``ignore_eos`` decodes through EOS (as vLLM's
    option of that name), so benchmarks generate exactly ``max_new_tokens``."""

    method: str | MethodSpec | Verifier = "sd"
    num_drafts: int | None = None
    draft_length: int | str | DraftLengthPolicy | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int = 0
    ignore_eos: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.method, Verifier):
            self._read_method(self.method if isinstance(self.method, MethodSpec) else parse_method(self.method))
        self._resolve_temperature()
        if not isinstance(self.seed, numbers.Integral) or isinstance(self.seed, bool) \
                or not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            raise ValueError(f"seed must be an int in [{SEED_RANGE[0]}, 2**64 - 1], got {self.seed!r}")
        check_warping(self.temperature, self.top_k, self.top_p)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")
        if self.method == AR:
            given = [n for n in ("num_drafts", "draft_length") if getattr(self, n) is not None]
            if given or self.options:
                raise ValueError(f"method 'ar' takes no drafts or verifier options (got {', '.join(given + list(self.options))})")
            return
        if isinstance(self.method, Verifier) and self.options:
            raise ValueError("options go with a verifier name, not with a Verifier instance")
        verifier = self.verifier()  # unknown names and options raise here
        if self.num_drafts is not None and self.num_drafts < 1:
            raise ValueError(f"num_drafts must be >= 1, got {self.num_drafts}")
        if isinstance(self.draft_length, str):
            object.__setattr__(self, "draft_length", draft_length_policy(self.draft_length))
        if isinstance(self.draft_length, int) and self.draft_length < 1:
            raise ValueError(f"draft_length must be >= 1, got {self.draft_length}")
        if self.length_policy is not None and verifier.strategy == "gated":
            raise ValueError(f"verifier {self.name!r} decides its own draft lengths; draft_length = "
                             f"{type(self.draft_length).__name__} needs a verifier with parallel drafts")
        if self.drafts > 1 and not verifier.multi_draft:
            raise ValueError(f"verifier {self.name!r} takes one draft; num_drafts = {self.drafts} needs a multi-draft verifier")

    def _resolve_temperature(self) -> None:
        """Set an unset temperature (1; 0 for greedy) and refuse greedy at any other temperature."""
        greedy = self.name == GREEDY
        if self.temperature is None:
            object.__setattr__(self, "temperature", 0.0 if greedy else 1.0)
        elif greedy and self.temperature != 0:
            raise ValueError(f"method greedy decodes at temperature 0 (it keeps the target's argmax), got "
                             f"temperature {self.temperature!r}: leave temperature unset or 0, or sample with "
                             "another method such as sd")

    def _read_method(self, spec: MethodSpec) -> None:
        """Take name, options, K and L from a parsed method (frozen: set once here)."""
        if spec.draft is not None:
            raise ValueError(f"method {str(spec)!r}: the draft model is passed to the engine, not named with @")
        for attr in ("num_drafts", "draft_length"):
            written, given = getattr(spec, attr), getattr(self, attr)
            if written is not None and given is not None and written != given:
                raise ValueError(f"method {str(spec)!r} sets {attr} = {written} but {attr} = {given} was passed")
            if written is not None:
                object.__setattr__(self, attr, written)
        clash = sorted(k for k in set(spec.options) & set(self.options) if spec.options[k] != self.options[k])
        if clash:
            raise ValueError(f"method {str(spec)!r} and options disagree on {', '.join(clash)}")
        object.__setattr__(self, "method", spec.name)
        object.__setattr__(self, "options", {**spec.options, **self.options})

    @property
    def speculative(self) -> bool:
        return self.method != AR

    @property
    def name(self) -> str:
        return self.method.name if isinstance(self.method, Verifier) else self.method

    @property
    def drafts(self) -> int:
        """K (1 when unset)."""
        return 1 if self.num_drafts is None else self.num_drafts

    @property
    def length(self) -> int:
        """L (4 when unset; a policy's upper bound)."""
        if self.length_policy is not None:
            return self.length_policy.max_length
        return 4 if self.draft_length is None else self.draft_length

    @property
    def length_policy(self) -> DraftLengthPolicy | None:
        """The policy choosing each step's L, or None for a fixed L."""
        return None if self.draft_length is None or isinstance(self.draft_length, int) else self.draft_length

    def verifier(self) -> Verifier:
        """The verifier the engine calls. A registered one runs with ``validate=False`` unless the
        method says otherwise (``"sd(validate=true)"``): the engine hands it distributions from
        :func:`~draftverify.probs.warp` and draft tokens sampled from them, which hold the contract
        by construction, so checking them again on every step would only cost time."""
        if isinstance(self.method, Verifier):
            return self.method
        return get_verifier(self.method, **{"validate": False, **self.options})

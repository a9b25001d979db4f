"""Conformance: check any engine's verifier against the exact law.

``conform(implementation)`` runs the checks of :mod:`.conform_probes` on an implementation reached
through an adapter of :mod:`.conform_adapters`:

- ``"transformers"``: the installed transformers' speculative-sampling step, as assisted generation
  calls it;
- ``"draftverify"``: ours, the reference run (``method``: a batched verifier, ``sd``, ``submaximal`` or
  ``bv``, runs on the flattened layout; any other registered verifier through its ``verify``);
- a callable with ``layout="flattened"``: ``fn(draft_token_ids, draft_probs, target_probs,
  cu_num_draft_tokens, uniforms, max_draft_len)`` -> tokens ``[B, max_draft_len + 1]`` padded with -1
  (vLLM v1's layout, docs/serving.md);
- an object with the per-row ``verify`` of :mod:`draftverify.verify.base` and ``layout="contract"``;
- ``"module:attribute"`` with either layout, imported from the current folder or ``sys.path``.

The report says, per check, pass / fail / n/a, what it proves, its power, what the implementation
did and, where it can be computed, the size of its deviation from the exact law.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from .conform_adapters import Adapter, Contract, Flattened, Transformers
from .conform_probes import FAIL, NOT_APPLICABLE, PASS, PROBES, CheckResult, ProbeSettings

__all__ = ["ConformanceReport", "DEFAULT_SAMPLES", "LAYOUTS", "conform"]

LAYOUTS = ("flattened", "contract")
DEFAULT_SAMPLES = 10000  # the law check's sequences: one implementation in well under a minute on 2 CPU cores
NAMED = ("transformers", "draftverify")


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`conform` found: one :class:`~.conform_probes.CheckResult` per check."""

    implementation: str
    layout: str
    randomness: str  # how the probes controlled the implementation's randomness
    samples: int
    seed: int
    seconds: float
    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        """Every check passed (n/a checks, which this adapter cannot express, do not count; an
        inconclusive law check is not a pass)."""
        return all(check.status in (PASS, NOT_APPLICABLE) for check in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    def table(self) -> str:
        """The report as Markdown (readable as it is in a terminal): a table of results, then what
        each check proves and its power."""
        lines = [
            f"conform {self.implementation} (layout: {self.layout}; {self.samples} samples, seed {self.seed}, "
            f"{self.seconds:.0f} s): {'PASS' if self.passed else 'FAIL'}",
            "",
            f"randomness: {self.randomness}",
            "",
            "| check | result | what it did | effect on the law |",
            "|---|---|---|---|",
        ]
        for c in self.checks:
            cells = (c.name, c.status.upper() if c.status == FAIL else c.status, c.detail, c.effect or "-")
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        lines += ["", "what each check proves (its power):", ""]
        lines += [f"- {c.name}: {c.proves} ({c.power})" for c in self.checks]
        return "\n".join(lines)


def _load(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"implementation: expected transformers, draftverify or MODULE:NAME, got {spec!r}")
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"implementation: cannot import {module_name!r} from the current folder or sys.path ({error})") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    if not hasattr(module, attribute):
        raise ValueError(f"implementation: module {module_name!r} has no attribute {attribute!r}")
    return getattr(module, attribute)


def _ours(method: str, time_limit: float) -> Adapter:
    from ..verify.base import get_verifier
    from ..verify.batched import BATCHED_KERNELS, verify_batch

    if method in BATCHED_KERNELS and method != "greedy":
        def batched(draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len):
            return verify_batch(method, draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens,
                                uniforms=uniforms, max_draft_len=max_draft_len)

        return Flattened(batched, time_limit, name=f"draftverify {method}")
    return Contract(get_verifier(method), time_limit, name=f"draftverify {method}")


def _adapter(implementation: Any, layout: str | None, method: str | None, time_limit: float) -> tuple[Adapter, str]:
    if isinstance(implementation, str) and implementation in NAMED:
        if layout is not None:
            raise ValueError(f"layout={layout!r} conflicts with implementation={implementation!r}, which has its own")
        if implementation == "transformers":
            if method is not None:
                raise ValueError(f"method={method!r} conflicts with implementation='transformers' (method picks ours)")
            return Transformers(time_limit), "assisted-generation step"
        adapter = _ours(method or "sd", time_limit)
        return adapter, "flattened" if isinstance(adapter, Flattened) else "contract"
    if method is not None:
        raise ValueError(f"method={method!r} applies to implementation='draftverify' only")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {implementation!r} needs one of {', '.join(LAYOUTS)}, got {layout!r}")
    name = implementation if isinstance(implementation, str) else getattr(implementation, "__name__", type(implementation).__name__)
    target = _load(implementation) if isinstance(implementation, str) else implementation
    if layout == "flattened":
        if not callable(target):
            raise ValueError(f"implementation: {name} is not callable (the flattened layout takes a function)")
        return Flattened(target, time_limit, name=name), layout
    if isinstance(target, type) or not callable(getattr(target, "verify", None)):
        raise ValueError(f"implementation: {name} has no verify method (the contract layout takes an object, not a class)")
    return Contract(target, time_limit, name=name), layout


def conform(
    implementation: Any,
    *,
    layout: str | None = None,
    method: str | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    time_limit: float = 10.0,
    checks: tuple[str, ...] | list[str] | None = None,
    on_check: Callable[[CheckResult], None] | None = None,
) -> ConformanceReport:
    """Check ``implementation`` against the exact law (see the module docstring for what it may be).

    ``samples``: sequences decoded for the law check (its power grows as sqrt(samples)); ``seed``
    seeds every draw; ``time_limit``: seconds one call may take before it counts as hung; ``checks``:
    the names of the checks to run (default: all of :data:`~.conform_probes.PROBES`, in its order).
    ``on_check`` is called with each result as it comes (progress). Bad arguments raise
    ``ValueError``; whatever the implementation does is reported, never raised. Torch runs on one
    thread meanwhile (the arrays are tiny; threads only contend), and the global random state is
    restored afterwards.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit}")
    unknown = sorted(set(checks or ()) - set(PROBES))
    if unknown:
        raise ValueError(f"checks: unknown {', '.join(unknown)}; known: {', '.join(PROBES)}")
    adapter, layout_name = _adapter(implementation, layout, method, time_limit)
    context = ProbeSettings(samples=samples, seed=seed)
    threads, start, results = torch.get_num_threads(), time.perf_counter(), []
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            for name, probe in PROBES.items():
                if checks is None or name in checks:
                    torch.manual_seed(seed)
                    results.append(probe(adapter, context))
                    if on_check is not None:
                        on_check(results[-1])
    finally:
        torch.set_num_threads(threads)
    return ConformanceReport(
        implementation=adapter.name, layout=layout_name, randomness=adapter.randomness, samples=samples, seed=seed,
        seconds=time.perf_counter() - start, checks=tuple(results),
    )

"""Sweeps of ``draftverify bench decode``: configurations, one measured run, a resumable loop.

A :class:`RunConfig` is one method with its K, L, temperature, top-k and draft kind; a sweep is
the grid methods x K x L x temperature x draft kind (single-draft methods at K = 1 whatever the
K values; ``ar`` once per temperature), run on every (prompt, seed) unit. Units are the outer loop and
configurations the inner one, so load drifts of the machine hit every method alike and ``ar`` is
measured in the same run on the same prompts. Each run's record is appended at once to a cache
file named by the configuration and the run context (models, prompts, token budget): an
interrupted sweep resumes where it stopped, and a finished one is not recomputed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

import torch

from ..engine import AR, PREFIX_DRAFT_ONLY, refuses_draft, stream
from ..models.base import LanguageModel
from ..verify import MethodSpec, get_verifier, parse_method, verifiers
from ..verify.token import GreedyMatch
from .probes import HeapPeak, count_ot_fallbacks, weight_bytes

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

__all__ = ["RunConfig", "Sweep", "SweepResult", "read_method", "measure", "run_sweep"]


def read_method(spec: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """``"ot(solver=gr,tol=0.001)"`` -> ("ot", (("solver", "gr"), ("tol", 0.001))), in the method
    grammar of :mod:`draftverify.verify.spec`; checked against the registry (unknown names or
    options raise ``ValueError``). K, L and the draft come from the grid, not from the spec."""
    parsed = parse_method(spec)
    if parsed.num_drafts is not None or parsed.draft_length is not None or parsed.draft is not None:
        raise ValueError(f"method {spec!r}: K, L and the draft are set by the sweep's grid (--num-drafts, --draft-lengths, --drafts)")
    name, options = parsed.name, list(parsed.options.items())
    if name == AR:
        if options:
            raise ValueError("method 'ar' takes no options")
    else:
        get_verifier(name, **dict(options))
    return name, tuple(options)


@dataclass(frozen=True)
class RunConfig:
    """One decoding configuration (``num_drafts`` = 1, ``draft_length`` = 0, ``draft`` = None for ar)."""

    method: str
    options: tuple[tuple[str, Any], ...] = ()
    num_drafts: int = 1
    draft_length: int = 0
    temperature: float = 1.0
    top_k: int | None = None
    draft: str | None = None

    @property
    def label(self) -> str:
        name = str(MethodSpec(self.method, dict(self.options)))
        if self.method == AR:
            return f"{name} T={self.temperature:g}"
        return f"{name}@{self.draft} K={self.num_drafts} L={self.draft_length} T={self.temperature:g}"

    def settings(self) -> dict[str, Any]:
        """Keyword arguments of :func:`draftverify.engine.generate_batch` for this configuration."""
        common = dict(method=self.method, temperature=self.temperature, top_k=self.top_k)
        if self.method == AR:
            return common
        return dict(common, num_drafts=self.num_drafts, draft_length=self.draft_length, options=dict(self.options))

    def key(self, context: dict[str, Any]) -> str:
        blob = json.dumps([asdict(self), context], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Sweep:
    """The grid; ``methods`` are specs as :func:`read_method` reads them. ``greedy`` runs at
    temperature 0 only: it keeps the target's argmax, which is the target's law at temperature 0
    alone (a grid that lists greedy without temperature 0 is an error)."""

    methods: tuple[str, ...] = (AR, "sd", "bv")
    num_drafts: tuple[int, ...] = (1,)
    draft_lengths: tuple[int, ...] = (4,)
    temperatures: tuple[float, ...] = (1.0,)
    drafts: tuple[str, ...] = ("draft",)
    seeds: tuple[int, ...] = (0,)
    top_k: int | None = None
    parsed: tuple[tuple[str, tuple], ...] = field(init=False)

    def __post_init__(self) -> None:
        for name, values in (("num_drafts", self.num_drafts), ("draft_lengths", self.draft_lengths)):
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be a non-empty list of integers >= 1, got {list(values)}")
        if not self.temperatures or min(self.temperatures) < 0:
            raise ValueError(f"temperatures must be a non-empty list of numbers >= 0, got {list(self.temperatures)}")
        if not self.seeds or not self.drafts or not self.methods:
            raise ValueError("methods, drafts and seeds must not be empty")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        object.__setattr__(self, "parsed", tuple(read_method(m) for m in dict.fromkeys(self.methods)))
        if any(name == GreedyMatch.name for name, _ in self.parsed) and 0.0 not in self.temperatures:
            raise ValueError(f"greedy verifies temperature-0 decoding only (it keeps the target's argmax), and the "
                             f"temperatures are {list(self.temperatures)}: add 0, or sample with sd or bv")

    def configs(self) -> list[RunConfig]:
        """Every configuration: ``ar`` first at each temperature (the baseline must exist);
        multi-draft methods at every K, single-draft methods at K = 1 only; greedy at temperature 0."""
        multi = {info.name: info.multi_draft for info in verifiers()}
        configs = []
        for temperature in self.temperatures:
            configs.append(RunConfig(AR, temperature=temperature, top_k=self.top_k))
            for name, options in self.parsed:
                if name == AR or (name == GreedyMatch.name and temperature != 0):
                    continue
                for draft in self.drafts:
                    for k in self.num_drafts if multi[name] else (1,):
                        configs.extend(RunConfig(name, options, k, length, temperature, self.top_k, draft)
                                       for length in self.draft_lengths)
        return list(dict.fromkeys(configs))  # repeated values on the command line run once


def measure(config: RunConfig, target: LanguageModel, draft: LanguageModel | None, prompt_ids: list[int], *,
            seed: int, max_new_tokens: int, ignore_eos: bool) -> dict[str, Any]:
    """Decode one prompt with ``config`` and return the raw record: generated tokens, per-step
    arrival times, committed and accepted counts, call counts and seconds, heap peak, OT plans."""
    settings = dict(config.settings(), seed=seed, max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
    tokens, arrivals, counts, steps = [], [], [], []
    plans = count_ot_fallbacks() if config.method == "ot" else nullcontext({"solves": 0, "fallbacks": 0})
    with plans as ot_counts, torch.inference_mode(), HeapPeak() as heap:
        start = time.perf_counter()
        for row in stream(target, draft, prompt_ids, **settings):
            arrivals.append(time.perf_counter() - start)
            tokens.extend(row.tokens)
            counts.append(len(row.tokens))
            steps.append(row.stats)
        seconds = time.perf_counter() - start
    return dict(
        tokens=tokens, seconds=seconds, arrivals=arrivals, counts=counts, accepted=[s.accepted for s in steps],
        target_calls=sum(s.target_calls for s in steps), draft_calls=sum(s.draft_calls for s in steps),
        target_seconds=sum(s.target_seconds for s in steps), draft_seconds=sum(s.draft_seconds for s in steps),
        verify_seconds=sum(s.verify_seconds for s in steps), heap_peak=heap.peak,
        weights=weight_bytes(target) + weight_bytes(draft), ot_solves=ot_counts["solves"],
        ot_fallbacks=ot_counts["fallbacks"],
    )


def unit_seed(seed: int, prompt: int) -> int:
    """The decoding seed of a unit: every method (``ar`` included) decodes prompt i of sweep seed s
    with the same generator seed 1000 s + i."""
    return 1000 * seed + prompt


class Progress:
    """A one-line progress bar with an ETA from the runs done in this session (cached runs free)."""

    def __init__(self, total: int, out: TextIO):
        self.total, self.done, self.out = total, 0, out
        self.start = time.perf_counter()
        self.tty = getattr(out, "isatty", lambda: False)()
        self.last = 0.0

    def update(self, label: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        now = time.perf_counter()
        if not self.tty and now - self.last < 5 and self.done < self.total:
            return
        self.last = now
        eta = elapsed / self.done * (self.total - self.done)
        width = 24
        filled = int(width * self.done / self.total)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{elapsed:.0f}s elapsed, ETA {eta:.0f}s  {label}")
        self.out.write(("\r" + line.ljust(100)) if self.tty else line + "\n")
        if self.tty and self.done == self.total:
            self.out.write("\n")
        self.out.flush()


def _advance(progress: RichProgress, total: int) -> Callable[[str], None]:
    """A bar of ``progress`` over ``total`` runs, labelled with the configuration just run."""
    task = progress.add_task("sweep", total=total)
    return lambda label: progress.update(task, advance=1, description=label)


def _load_cache(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    records = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[(record["prompt"], record["seed"])] = record
    return records


@dataclass(frozen=True)
class SweepResult:
    """The records of every run (configuration order, then seed, then prompt) and the
    configurations that raised while decoding (label -> error message; their runs are dropped)."""

    records: list[dict[str, Any]]
    failures: dict[str, str]


def run_sweep(sweep: Sweep, target: LanguageModel, drafts: dict[str, LanguageModel], prompts: list[list[int]], *,
              max_new_tokens: int, ignore_eos: bool, cache_dir: Path, context: dict[str, Any], resume: bool = True,
              decode: Any = None, out: TextIO = sys.stderr, progress: RichProgress | None = None) -> SweepResult:
    """Run every configuration on every (prompt, seed) unit. ``context`` (models, prompts,
    settings) is part of each cache key; ``decode`` turns token ids into text for the records. A
    configuration whose decoding raises is reported in ``failures`` (and on ``out``) and skipped
    from then on, so one broken method does not end a long sweep (nothing of it is cached: a rerun
    tries again). Runs are followed by a bar of ``progress`` (see :mod:`.progress`; the command
    line's) or else by a text bar on ``out``."""
    configs = sweep.configs()
    missing = sorted({c.draft for c in configs if c.draft is not None} - set(drafts))
    if missing:
        raise ValueError(f"no draft model named {', '.join(missing)} (have {', '.join(drafts) or 'none'})")
    refused = sorted({f"{c.method}@{c.draft}" for c in configs if c.method != AR and c.draft is not None
                      and refuses_draft(get_verifier(c.method, **dict(c.options)), drafts[c.draft])})
    if refused:  # the engine would refuse each of them; say so before the first run
        raise ValueError(f"methods: {', '.join(refused)}: {PREFIX_DRAFT_ONLY}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    paths = {c: cache_dir / f"{c.key(context)}.jsonl" for c in configs}
    cache = {c: _load_cache(paths[c]) if resume else {} for c in configs}
    if not resume:
        for path in paths.values():
            path.unlink(missing_ok=True)
    units = [(seed, i) for seed in sweep.seeds for i in range(len(prompts))]
    todo = [(seed, i, c) for seed, i in units for c in configs if (i, seed) not in cache[c]]
    advance = Progress(len(todo), out).update if progress is None else _advance(progress, len(todo))
    warm: set[RunConfig] = set()
    failures: dict[RunConfig, str] = {}
    for seed, i, config in todo:
        if config in failures:
            advance(config.label)
            continue
        draft = drafts[config.draft] if config.draft is not None else None
        settings = dict(seed=unit_seed(seed, i), ignore_eos=ignore_eos)
        try:
            if config not in warm:  # one-time allocations and imports are not timed
                measure(config, target, draft, prompts[i], max_new_tokens=min(4, max_new_tokens), **settings)
                warm.add(config)
            measured = measure(config, target, draft, prompts[i], max_new_tokens=max_new_tokens, **settings)
        except Exception as error:  # a bug of the method under test: report it, keep sweeping
            failures[config] = f"{type(error).__name__}: {error}"
            out.write(f"{config.label} failed on prompt {i}, seed {seed}: {failures[config]}\n")
            advance(config.label)
            continue
        record = dict(key=config.key(context), label=config.label, **asdict(config), prompt=i, seed=seed, **measured)
        record["text"] = decode(record["tokens"]) if decode is not None else None
        line = json.dumps(record)
        with paths[config].open("a") as handle:
            handle.write(line + "\n")
        cache[config][(i, seed)] = json.loads(line)  # as a resumed sweep reads it
        advance(config.label)
    if any(c.method == AR for c in failures):
        raise RuntimeError(f"the baseline failed: {'; '.join(m for c, m in failures.items() if c.method == AR)}")
    records = [cache[c][(i, seed)] for c in configs if c not in failures for seed, i in units]
    return SweepResult(records, {c.label: message for c, message in failures.items()})

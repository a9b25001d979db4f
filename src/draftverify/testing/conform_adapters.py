"""How :func:`draftverify.testing.conform` calls an implementation, and how it controls its randomness.

An adapter runs a batch of rows (one request's drafts each, see :class:`Row`) through an
implementation and returns each row's committed tokens (accepted drafts, then one correction or bonus
token), checked for form. Randomness comes two ways:

- :meth:`Adapter.stream` ``(seed)``: a run function drawing as the implementation would in
  production, from a stream opened from ``seed``; the law check and the seed probe use it;
- :meth:`Adapter.scripted` ``(rows, uniforms)``: every uniform scripted, so that a probe reaches
  values sampling almost never draws (exactly 0, the largest float below 1). How the script reaches
  the implementation is the adapter's ``randomness`` line.

Whatever the implementation does wrong surfaces as :class:`Misbehaved` (raised, hung past the time
limit, or returned something malformed), with what it did in words: never as our traceback.
"""

from __future__ import annotations

import math
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from ..verify.base import VerifyResult
from ..verify.batched import PAD_TOKEN_ID, draw_uniforms

__all__ = [
    "Adapter",
    "Contract",
    "Flattened",
    "Misbehaved",
    "Raised",
    "Row",
    "Transformers",
    "grid_digits",
]


@dataclass(frozen=True)
class Row:
    """One request's drafts: token i of the draft was drawn from ``draft_probs[i]``; ``target_probs[i]``
    is the target's conditional at the same prefix, row L the one after the whole draft."""

    draft_tokens: torch.Tensor  # [L] int64
    draft_probs: torch.Tensor  # [L, V] float64
    target_probs: torch.Tensor  # [L + 1, V] float64

    @property
    def length(self) -> int:
        return self.draft_tokens.shape[0]


class Misbehaved(Exception):
    """The implementation raised, hung or returned something malformed; the message says which.
    ``row`` is the row whose call did it, where rows are called one at a time (else None)."""

    row: int | None = None


class Raised(Misbehaved):
    """The implementation raised (a refusal, where the input was invalid)."""


class _Hung(BaseException):  # BaseException: an implementation's `except Exception` cannot swallow it
    pass


def grid_digits(dtype: torch.dtype) -> int:
    """Bits of torch's CPU uniform grid in ``dtype``: ``torch.rand`` returns k 2^-m, k < 2^m, each
    with probability 2^-m (m = 24 for float32, 53 for float64), so exactly 0 has probability 2^-m."""
    return {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}[dtype]


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_Hung` in the calling code after ``seconds`` (SIGALRM: main thread, POSIX only;
    elsewhere the call runs unbounded, so a hang blocks rather than passes)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum, frame):
        raise _Hung

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _guarded(call: Callable[[], Any], seconds: float) -> Any:
    try:
        with _time_limit(seconds):
            return call()
    except _Hung:
        raise Misbehaved(f"did not return within the time limit of {seconds:g} s") from None
    except Exception as error:  # the implementation's own error, reported in words
        raise Raised(f"raised {type(error).__name__}: {error}") from None


class _Script:
    """Scripted uniforms, handed out in order (the last one repeats once they run out), each rounded
    onto torch's grid in the dtype asked for: floor(u 2^m) 2^-m, kept positive when u is."""

    def __init__(self, values: Sequence[float]):
        self.values, self.position, self.digits = list(values), 0, 0

    def take(self, shape, dtype: torch.dtype | None) -> torch.Tensor:
        dtype = dtype or torch.get_default_dtype()
        self.digits = max(self.digits, grid_digits(dtype))
        count = math.prod(shape)
        picked = [self.values[min(self.position + i, len(self.values) - 1)] for i in range(count)]
        self.position += count
        scale = 2.0 ** grid_digits(dtype)
        on_grid = [max(math.floor(u * scale), 1 if u > 0 else 0) / scale for u in picked]
        return torch.tensor(on_grid, dtype=torch.float64).reshape(shape).to(dtype)


@contextmanager
def _scripted_torch(script: _Script, names: tuple[str, ...]) -> Iterator[None]:
    """Replace ``torch.rand`` and/or ``torch.rand_like`` by ``script`` while the block runs."""

    def rand(*size, generator=None, dtype=None, **options):
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
        return script.take(shape, dtype)

    def rand_like(like, *, dtype=None, **options):
        return script.take(tuple(like.shape), dtype or like.dtype)

    replacements = {"rand": rand, "rand_like": rand_like}
    saved = {name: getattr(torch, name) for name in names}
    for name in names:
        setattr(torch, name, replacements[name])
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(torch, name, original)


def _scripted_rows(adapter: "Adapter", rows, uniforms, names: tuple[str, ...], call: Callable[[Row], list[int]]) -> list[list[int]]:
    """Run ``rows`` one call each, with the torch functions ``names`` playing the row's uniforms."""
    out, adapter.last_draws = [], []
    for b, (row, values) in enumerate(zip(rows, uniforms)):
        script = _Script(values)
        try:
            with _scripted_torch(script, names):
                out.append(call(row))
        except Misbehaved as error:
            error.row = b
            raise
        finally:
            adapter.last_draws.append((script.digits, script.position))
    return out


def _committed(tokens: Any, row: Row, where: str) -> list[int]:
    """``tokens`` as the row's committed tokens, or :class:`Misbehaved` saying what is wrong."""
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.tolist()
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, int) for t in tokens):
        raise Misbehaved(f"{where}: returned {type(tokens).__name__} {tokens!r}, not a list of token ids")
    vocab, drafts = row.target_probs.shape[1], row.draft_tokens.tolist()
    if not 1 <= len(tokens) <= row.length + 1:
        raise Misbehaved(f"{where}: committed {len(tokens)} tokens {tokens}; a row of {row.length} drafts commits 1..{row.length + 1}")
    if any(not 0 <= t < vocab for t in tokens):
        raise Misbehaved(f"{where}: committed {tokens}, a token id outside [0, V={vocab})")
    if list(tokens[:-1]) != drafts[: len(tokens) - 1]:
        raise Misbehaved(f"{where}: committed {tokens}, whose accepted part is not a prefix of the drafts {drafts}")
    return list(tokens)


class Adapter:
    """One way of calling an implementation. ``name`` and ``randomness`` (how scripted uniforms reach
    it) go into the report; ``ragged`` says whether it takes a batch of rows in one call, rows
    without drafts included."""

    name: str
    randomness: str
    ragged: bool = False
    carries_state: bool = False  # passes a verifier's state from one call to the next (law_verifier)

    def __init__(self, time_limit: float):
        self.time_limit = time_limit
        # per row of the last scripted run: (m, uniforms drawn), m the bits of their grid (grid_digits)
        self.last_draws: list[tuple[int, int]] = []

    def stream(self, seed: int) -> Callable[[list[Row]], list[list[int]]]:
        """A run function drawing from one stream opened from ``seed``: calls go on drawing from it."""
        raise NotImplementedError

    def scripted(self, rows: list[Row], uniforms: list[Sequence[float]]) -> list[list[int]]:
        """Run ``rows`` with row b's uniforms scripted as ``uniforms[b]`` (its L_b coins, then the
        uniform of its correction or bonus token, as the flattened layout orders them)."""
        raise NotImplementedError

    def law_verifier(self, seed: int):
        """An object with the contract's ``verify`` for :func:`.checker.check_exactness`, drawing
        from the stream of ``seed`` (the generator the checker passes is not used)."""
        run = self.stream(seed)

        class _Shim:
            def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
                tokens = run([Row(draft_tokens[0], draft_probs[0], target_probs[0])])[0]
                return VerifyResult(tokens, len(tokens) - 1, 0, None)

        return _Shim()


def _flat_arrays(rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The flattened layout of docs/serving.md: draft_token_ids [num_tokens], draft_probs
    [num_tokens, V], target_probs [num_tokens + B, V], cu_num_draft_tokens [B], max_draft_len."""
    cu = torch.cumsum(torch.tensor([row.length for row in rows]), 0)  # [B]
    return (
        torch.cat([row.draft_tokens for row in rows]),
        torch.cat([row.draft_probs for row in rows]),
        torch.cat([row.target_probs for row in rows]),
        cu,
        max(row.length for row in rows),
    )


class Flattened(Adapter):
    """``fn(draft_token_ids, draft_probs, target_probs, cu_num_draft_tokens, uniforms, max_draft_len)``
    -> output tokens ``[B, max_draft_len + 1]`` padded with -1 (or an object whose ``output_tokens``
    is that tensor); uniforms ``[num_tokens + B]`` float64, drawn by ``torch.rand`` in a stream."""

    randomness = "uniforms passed in: scripted values as they are; seeded runs draw them with torch.rand (float64) from a torch.Generator"
    ragged = True

    def __init__(self, function: Callable, time_limit: float, name: str = "flattened"):
        super().__init__(time_limit)
        self.function, self.name = function, name

    def stream(self, seed):
        generator = torch.Generator().manual_seed(seed)

        def run(rows):
            num_tokens = sum(row.length for row in rows)
            return self._call(rows, draw_uniforms(num_tokens, len(rows), generator))

        return run

    def scripted(self, rows, uniforms):
        self.last_draws = [(grid_digits(torch.float64), row.length + 1) for row in rows]
        return self._call(rows, torch.cat([torch.tensor(u, dtype=torch.float64) for u in uniforms]))

    def _call(self, rows: list[Row], uniforms: torch.Tensor) -> list[list[int]]:
        tokens, draft, target, cu, max_len = _flat_arrays(rows)
        out = _guarded(lambda: self.function(tokens, draft, target, cu, uniforms, max_len), self.time_limit)
        out = getattr(out, "output_tokens", out)
        shape = (len(rows), max_len + 1)
        if not isinstance(out, torch.Tensor) or out.dtype.is_floating_point or out.dtype == torch.bool:
            raise Misbehaved(f"returned {type(out).__name__} {getattr(out, 'dtype', '')}, not an integer tensor {list(shape)}")
        if tuple(out.shape) != shape:
            raise Misbehaved(f"returned shape {list(out.shape)}, expected [B, max_draft_len + 1] = {list(shape)}")
        committed = []
        for b, (row, values) in enumerate(zip(rows, out.tolist())):
            count = next((i for i, t in enumerate(values) if t == PAD_TOKEN_ID), len(values))
            if any(t != PAD_TOKEN_ID for t in values[count:]):
                raise Misbehaved(f"row {b}: output {values} has tokens after the pad id {PAD_TOKEN_ID}")
            committed.append(_committed(values[:count], row, f"row {b}"))
        return committed


class Contract(Adapter):
    """Any object with the per-row ``verify(draft_tokens [1, L], draft_probs [1, L, V], target_probs
    [1, L + 1, V], generator, state)`` of :mod:`draftverify.verify.base`, called once per row."""

    carries_state = True
    randomness = ("torch.rand and torch.rand_like replaced by the script during each call "
                  "(draftverify's verifiers draw through them); seeded runs pass a torch.Generator")

    def __init__(self, verifier: Any, time_limit: float, name: str = "contract"):
        super().__init__(time_limit)
        self.verifier, self.name = verifier, name

    def _verify(self, row: Row, generator, state=None):
        result = _guarded(lambda: self.verifier.verify(
            row.draft_tokens[None], row.draft_probs[None], row.target_probs[None], generator=generator, state=state,
        ), self.time_limit)
        tokens = _committed(getattr(result, "tokens", result), row, "verify")
        if getattr(result, "num_accepted", len(tokens) - 1) != len(tokens) - 1:
            raise Misbehaved(f"verify: num_accepted = {result.num_accepted} but {len(tokens)} tokens committed")
        return result, tokens

    def stream(self, seed):
        generator = torch.Generator().manual_seed(seed)
        return lambda rows: [self._verify(row, generator)[1] for row in rows]

    def scripted(self, rows, uniforms):
        return _scripted_rows(self, rows, uniforms, ("rand", "rand_like"), lambda row: self._verify(row, torch.Generator())[1])

    def law_verifier(self, seed):
        own, adapter = torch.Generator().manual_seed(seed), self

        class _Guarded:  # passes the state along, as the decoding loop does (gbv needs it)
            def verify(self, draft_tokens, draft_probs, target_probs, generator=None, state=None):
                result, tokens = adapter._verify(Row(draft_tokens[0], draft_probs[0], target_probs[0]), own, state)
                return VerifyResult(tokens, len(tokens) - 1, 0, getattr(result, "state", None))

        return _Guarded()


TARGET_LOGIT_OFFSET = 1.0


class Transformers(Adapter):
    """The installed transformers' ``_speculative_sampling`` (Leviathan et al. 2023 Algorithm 1), called
    as assisted generation calls it: a one-token prompt then the drafts as ``candidate_input_ids``,
    draft logits ``[1, L, V]`` and target logits ``[1, L + 1, V]`` in float32 (logits = log of the
    probabilities: softmax gives them back), ``candidate_length`` L; it returns the committed tokens
    ``[1, n + 1]`` and n. Model logits are unnormalised: the target's are given an offset
    (:data:`TARGET_LOGIT_OFFSET`), as two models' logits always differ by one. Its coins come from ``torch.rand_like`` and its last token from
    ``torch.multinomial``, both on torch's global generator."""

    name = "transformers"
    randomness = ("torch.rand_like (its coins r_i, float32) replaced by the script; its correction or bonus "
                  "token from torch.multinomial on the global generator, seeded; seeded runs call torch.manual_seed")

    def __init__(self, time_limit: float):
        super().__init__(time_limit)
        try:
            from transformers.generation.utils import _speculative_sampling
        except ImportError as error:
            raise ValueError(f"implementation 'transformers': cannot import its _speculative_sampling ({error}); "
                             "install draftverify[models]") from None
        self.step = _speculative_sampling

    def _call(self, row: Row) -> list[int]:
        ids = torch.cat([torch.zeros(1, dtype=torch.int64), row.draft_tokens])[None]  # [1, 1 + L]
        draft_logits = row.draft_probs.log().to(torch.float32)[None]  # [1, L, V]
        target_logits = (row.target_probs.log() + TARGET_LOGIT_OFFSET).to(torch.float32)[None]  # [1, L + 1, V]
        out = _guarded(lambda: self.step(ids, draft_logits, row.length, target_logits), self.time_limit)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor) and out[0].dim() == 2):
            raise Misbehaved(f"returned {type(out).__name__}, not (valid_tokens [1, n + 1], n_matches)")
        tokens = _committed(out[0][0], row, "_speculative_sampling")
        if int(out[1]) != len(tokens) - 1:
            raise Misbehaved(f"_speculative_sampling: n_matches = {int(out[1])} but {len(tokens)} tokens returned")
        return tokens

    def stream(self, seed):
        torch.manual_seed(seed)
        return lambda rows: [self._call(row) for row in rows]

    def scripted(self, rows, uniforms):
        return _scripted_rows(self, rows, uniforms, ("rand_like",), self._call)

"""Per-step statistics and the result of a decoding.

Terms (as in :mod:`draftverify.verify.base`): per step the draft proposes K drafts of L tokens
(*drafted* = K L), the target scores K (L + 1) positions (*verified*), the verifier keeps
*accepted* draft tokens and adds one correction or bonus token; *committed* counts the tokens
appended after EOS, stop strings and the length limit are applied.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..verify.acceptance import pooled_acceptance, rejected_tests

__all__ = ["StepStats", "GenerationResult"]


@dataclass(frozen=True)
class StepStats:
    """One decoding step of one prompt. Times are those of the batched calls, shared by the rows
    of a batch."""

    drafted: int
    verified: int
    accepted: int
    committed: int
    draft_index: int
    draft_calls: int
    target_calls: int
    draft_seconds: float
    target_seconds: float
    verify_seconds: float
    draft_length: int | None = None  # L of a step with parallel drafts (0: a policy's ar step; None: ar, gated)


@dataclass(frozen=True)
class GenerationResult:
    """The generated tokens (prompt excluded) of one prompt, with what it cost."""

    prompt_ids: list[int]
    tokens: list[int]
    text: str | None  # the generated tokens decoded without special tokens (no eos text), as generate streams them
    finish_reason: str  # "eos", "stop", "length" or "context" (the context was full; see engine.decoder)
    method: str
    num_drafts: int
    draft_length: int  # 0 for ar
    steps: list[StepStats]
    seconds: float  # wall time of the whole call, prefill included

    @property
    def target_calls(self) -> int:
        return sum(s.target_calls for s in self.steps)

    @property
    def draft_calls(self) -> int:
        return sum(s.draft_calls for s in self.steps)

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def acceptance_rate(self) -> float | None:
        """Acceptance pooled over verified tokens (seed 002): accepted / (accepted + rejections),
        a step that kept fewer than L draft tokens having made exactly one rejected test; draft
        tokens after a rejection were never tested and are not counted. None for ar."""
        if not self.draft_length or not self.steps:
            return None
        return pooled_acceptance(self.accepted, self.rejections)

    @property
    def rejections(self) -> int:
        """Steps that kept fewer draft tokens than they drafted: one rejected test each (0 for ar,
        and for a draft-length policy's ar steps, which test nothing)."""
        return sum(rejected_tests([s.accepted], self._length(s)) for s in self.steps)

    def _length(self, step: StepStats) -> int:
        return self.draft_length if step.draft_length is None else step.draft_length

    @property
    def accepted_per_position(self) -> list[int]:
        """Entry i: steps that accepted draft position i + 1 (vLLM's
        ``spec_decode_num_accepted_tokens_per_pos``), i = 0..L-1 (L: the largest draft length)."""
        return [sum(s.accepted > i for s in self.steps) for i in range(self.draft_length)]

    @property
    def position_acceptance(self) -> list[float]:
        """Entry i: fraction of the steps that drafted position i + 1 that accepted it (0 where no
        step drafted it); with a fixed L, of all steps. Shows where drafts break."""
        drafted = [sum(self._length(s) > i for s in self.steps) for i in range(self.draft_length)]
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, drafted)]

    @property
    def tokens_per_target_call(self) -> float:
        return len(self.tokens) / max(self.target_calls, 1)

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("inf")

    @property
    def target_seconds(self) -> float:
        return sum(s.target_seconds for s in self.steps)

    @property
    def draft_seconds(self) -> float:
        return sum(s.draft_seconds for s in self.steps)

    @property
    def verify_seconds(self) -> float:
        return sum(s.verify_seconds for s in self.steps)

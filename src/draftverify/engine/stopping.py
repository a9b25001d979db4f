"""When a row stops: EOS, stop strings, the length limit. Tokens after the stop are not committed
(the law of the committed prefix is unchanged: cutting a sequence keeps its prefix's law)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Stopper"]


@dataclass(frozen=True)
class Stopper:
    max_new_tokens: int
    eos_token_id: int | None = None
    stop: tuple[str, ...] = ()
    tokenizer: Any = None

    def __post_init__(self) -> None:
        if self.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer to decode the generated text")

    def cut(self, generated: list[int], new: list[int]) -> tuple[list[int], str | None]:
        """The part of ``new`` to commit after ``generated``, and the finish reason (None = go on).
        EOS and the token that completes a stop string are kept, as in ``transformers``."""
        reason = None
        room = self.max_new_tokens - len(generated)
        if len(new) >= room:
            new, reason = new[:room], "length"
        if self.eos_token_id is not None and self.eos_token_id in new:
            new, reason = new[: new.index(self.eos_token_id) + 1], "eos"
        if self.stop and self._stops(generated, new):
            # the shortest prefix of the new tokens that completes a stop string
            n = next(n for n in range(1, len(new) + 1) if self._stops(generated, new[:n]))
            new, reason = new[:n], "stop"
        return new, reason

    def _stops(self, generated: list[int], new: list[int]) -> bool:
        text = self.tokenizer.decode(generated + new)
        return any(s in text for s in self.stop)

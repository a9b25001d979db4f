"""Prompts in the model's own language: an instruct model's chat template, where it has one."""

from __future__ import annotations

from typing import Any

__all__ = ["encode_prompt", "has_chat_template"]


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template (an instruct model's)."""
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompt(tokenizer: Any, text: str, chat: bool | None = None) -> list[int]:
    """Token ids of ``text``: as one user message in the chat template followed by the assistant's
    turn when ``chat`` is True (None: when the tokenizer has a template), else the plain text.
    ``ValueError`` for ``chat=True`` with a tokenizer without a template."""
    if chat is None:
        chat = has_chat_template(tokenizer)
    if not chat:
        return list(tokenizer.encode(text))
    if not has_chat_template(tokenizer):
        raise ValueError("chat: this tokenizer has no chat template; pass the prompt as plain text (chat=False, --no-chat)")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

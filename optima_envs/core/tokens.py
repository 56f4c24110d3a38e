"""Token counting for messages that arrive without the token ids that produced them."""

from __future__ import annotations

import re
from typing import Any, Callable

TokenCounter = Callable[[str], int]
"""Maps a message to its token count. Must be deterministic (it feeds infos and rewards)."""

_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def default_token_count(text: str) -> int:
    """Words and punctuation marks: a deterministic, dependency-free stand-in for a tokenizer.

    It undercounts a BPE tokenizer by roughly 20-40% on English; pass `tokenizer=` for exact costs.
    """
    return sum(1 for _ in _PIECE.finditer(text))


def make_token_counter(tokenizer: Any | None) -> TokenCounter:
    """Build a counter from None (built-in), a Hugging Face tokenizer, or a callable.

    A callable may return an int (a count) or a sequence (the tokens themselves).
    """
    if tokenizer is None:
        return default_token_count
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):
        return lambda text: len(encode(text, add_special_tokens=False))
    if callable(tokenizer):
        return lambda text: _as_count(tokenizer(text))
    raise TypeError(
        f"tokenizer must be None, a Hugging Face tokenizer (with .encode) or a callable, "
        f"got {type(tokenizer).__name__}"
    )


def _as_count(result: Any) -> int:
    if isinstance(result, bool):
        raise TypeError("a token counter returned a bool; return an int or a sequence of tokens")
    if isinstance(result, int):
        return result
    if hasattr(result, "__len__"):
        return len(result)
    raise TypeError(f"a token counter must return an int or a sequence, got {type(result).__name__}")

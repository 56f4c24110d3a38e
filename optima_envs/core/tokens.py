"""Token counting for messages that arrive without the token ids that produced them."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

import numpy as np

from optima_envs.errors import InvalidActionError

TokenCounter = Callable[[str], int]
"""Maps a message to its token count. Must be deterministic (it feeds infos and rewards)."""

#: Token ids are stored as int32 in episode buffers; larger or negative ids are no vocabulary's.
MAX_TOKEN_ID = 2**31 - 1

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


def read_token_ids(ids: Any, text: str, speaker: str) -> tuple[int, ...] | None:
    """An action's `token_ids` as a tuple of ints (None: not given, the env counts the text).

    Any iterable is read once, so an iterator costs what it yields. An empty list with a
    non-empty text is refused: it would record the message as costing exactly 0 tokens, which
    silently removes the token penalty from every reward built on it.
    """
    if ids is None:
        return None
    if isinstance(ids, (str, bytes, dict)) or not isinstance(ids, Iterable):
        raise InvalidActionError(f"{speaker!r}'s token_ids must be a list of ints (or None to have the env "
                                 f"count the text's tokens), got {type(ids).__name__}")
    values = list(ids)
    bad = [i for i in values if isinstance(i, bool) or not isinstance(i, (int, np.integer))
           or not 0 <= int(i) <= MAX_TOKEN_ID]
    if bad:
        raise InvalidActionError(f"{speaker!r}'s token_ids must be ints in [0, {MAX_TOKEN_ID}], "
                                 f"got {bad[0]!r} ({type(bad[0]).__name__})")
    if not values and text:
        raise InvalidActionError(f"{speaker!r}'s token_ids is empty but its text is not ({text[:40]!r}): pass the "
                                 "ids the text was generated as, or omit token_ids to have the env count them")
    return tuple(int(i) for i in values)

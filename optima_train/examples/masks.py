"""The loss mask of every training row: which tokens of a rendered conversation carry loss.

Built from the chat template, never from token ids. Render the conversation once; for each
assistant message `i`, the text of its span runs from the end of
`render(messages[:i], add_generation_prompt=True)` to the end of `render(messages[:i + 1])`,
with trailing whitespace removed (the newline the template writes *between* turns is not
something the model generates). That span is the reply plus the end-of-turn marker (ChatML:
`text<|im_end|>`), which the model must learn to emit to stop. A template that does not render
prefixes of a conversation as prefixes of the whole (not "prefix-preserving") raises
`TemplateMaskError` instead of guessing.

`token_mask` is the one place character spans become token loss: the full text is tokenised once
with offsets, and a token carries loss exactly when it *starts* inside a span. SFT rows mask the
assistant spans whole (`assistant_mask`); policy-gradient rows mask the replies and the end
markers the model emitted inside them (`optima_train.examples.policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from optima_envs.errors import OptimaError

__all__ = ["Span", "TemplateMaskError", "TokenMask", "assistant_mask", "assistant_spans", "span_index", "token_mask"]

#: A `[start, end)` character range of a rendered conversation.
Span = tuple[int, int]


class TemplateMaskError(OptimaError, ValueError):
    """Raised when a chat template is not prefix-preserving, so assistant spans cannot be located."""


@dataclass(frozen=True)
class TokenMask:
    """A rendered conversation's token ids, each token's character offsets, and its 0/1 loss bit."""

    input_ids: list[int]
    offsets: list[Span]
    mask: list[int]


def _render(tokenizer: Any, messages: Sequence[Mapping[str, str]], generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def assistant_spans(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> tuple[str, list[Span]]:
    """The rendered conversation and the character span of every assistant reply (see module doc).

    Raises:
        TemplateMaskError: the template is not prefix-preserving, or a reply is not inside its span.
    """
    full = _render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], generation_prompt=True) if i else ""
        upto = _render(tokenizer, messages[: i + 1])
        if not full.startswith(upto) or not upto.startswith(before):
            raise TemplateMaskError(
                f"the chat template is not prefix-preserving at message {i} (role 'assistant'): rendering the "
                f"first {i + 1} messages is not a prefix of rendering all {len(messages)}; assistant-only loss "
                "cannot be located from it. Use a prefix-preserving template (e.g. ChatML)."
            )
        start, end = len(before), len(upto)
        while end > start and upto[end - 1].isspace():
            end -= 1
        if message["content"] and message["content"] not in full[start:end]:
            raise TemplateMaskError(f"assistant message {i} is not inside its located span {full[start:end]!r}")
        spans.append((start, end))
    return full, spans


def span_index(position: int, spans: Sequence[Span]) -> int | None:
    """The index of the first span that holds character `position` (None: none does)."""
    return next((k for k, (start, end) in enumerate(spans) if start <= position < end), None)


def token_mask(tokenizer: Any, text: str, spans: Sequence[Span]) -> TokenMask:
    """Tokenise `text` once (no added special tokens: the template wrote them) and mark with 1
    each token that starts inside one of `spans`; empty tokens never carry loss."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [(int(a), int(b)) for a, b in encoded["offset_mapping"]]
    mask = [int(b > a and span_index(a, spans) is not None) for a, b in offsets]
    return TokenMask(list(encoded["input_ids"]), offsets, mask)


def assistant_mask(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids of the rendered conversation and a 0/1 mask, 1 on the assistant's reply tokens.

    Args:
        tokenizer: a fast Hugging Face tokenizer with a chat template.
        messages: chat messages (`role`, `content`).

    Returns:
        `(input_ids, mask)`, the ids of `apply_chat_template(messages)` encoded without added
        special tokens (the template writes them), and the loss mask.

    Raises:
        TemplateMaskError: the template is not prefix-preserving.
    """
    full, spans = assistant_spans(tokenizer, messages)
    tokens = token_mask(tokenizer, full, spans)
    return tokens.input_ids, tokens.mask

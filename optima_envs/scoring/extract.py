"""Answer extraction: a pipeline of tiny filters that pull the final answer out of a message.

Each filter maps the whole text to an answer string or `None`. A pipeline tries its primary
filter, then (unless `strict`) its fallbacks in order; an answer found by a fallback is marked
`fallback=True` and logged at INFO on the `optima_envs.scoring` logger, so a lenient parse is
always visible and never a silent guess. An empty or blank answer (`<A></A>`, `\\boxed{}`) is
no answer: the message answered nothing, so no earlier answer and no fallback stands in for
it. Every filter scans the text a bounded number of times with regexes free of nested
quantifiers, so a 1 MB message costs linear time, and no filter raises on any `str`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

from optima_envs.errors import ConfigError

__all__ = ["Extraction", "ExtractionMethod", "extract_boxed", "extract_tag"]

logger = logging.getLogger("optima_envs.scoring")

ExtractionMethod = Literal["tag", "boxed", "unclosed_tag", "answer_line", "none"]
"""Which filter produced the answer; "none" means no filter found one."""

_METHODS: frozenset[str] = frozenset(get_args(ExtractionMethod))


@dataclass(frozen=True)
class Extraction:
    """The answer pulled out of one message and how it was found.

    Attributes:
        answer: The answer text (stripped, never blank), or `None` when no answer was found.
        method: The filter that found it, or "none".
        fallback: True when a fallback filter (not the format the prompt asked for) found it.
    """

    answer: str | None
    method: ExtractionMethod
    fallback: bool

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise ValueError(f"Extraction.method must be one of {sorted(_METHODS)}, "
                             f"got {self.method!r}.")
        if (self.answer is None) != (self.method == "none"):
            raise ValueError(f"Extraction.answer is None exactly when method is 'none'; got "
                             f"answer={self.answer!r}, method={self.method!r}.")
        if self.answer is not None and not self.answer.strip():
            raise ValueError(f"Extraction.answer must not be blank, got {self.answer!r}; "
                             f"use answer=None, method='none' for no answer.")


NO_ANSWER = Extraction(answer=None, method="none", fallback=False)

_Filter = Callable[[str], "str | None"]


# --- tag filters --------------------------------------------------------------------------

@lru_cache(maxsize=32)
def _tag_regex(tag: str) -> re.Pattern[str]:
    if not re.fullmatch(r"[A-Za-z][\w.-]*", tag):
        raise ConfigError(f"extract_tag: `tag` must be an XML-like name such as 'A', got {tag!r}.")
    return re.compile(rf"<(/?){re.escape(tag)}>", re.IGNORECASE)


def _scan_tags(text: str, tag: str) -> tuple[tuple[int, int] | None, int | None]:
    """One pass over the tag tokens: the span of the last well-formed pair's content, and the
    end of the last opening tag left unclosed after it. Nesting is not supported: a second
    opener before a closer replaces the first (the innermost, latest answer wins)."""
    last_pair: tuple[int, int] | None = None
    open_end: int | None = None
    for match in _tag_regex(tag).finditer(text):
        if match.group(1):  # closing tag
            if open_end is not None:
                last_pair = (open_end, match.start())
                open_end = None
        else:
            open_end = match.end()
    return last_pair, open_end


def tag_filter(tag: str) -> _Filter:
    """The content of the last well-formed `<tag>...</tag>` (case-insensitive, may span lines)."""
    def apply(text: str) -> str | None:
        pair, _ = _scan_tags(text, tag)
        return None if pair is None else text[pair[0]:pair[1]].strip()
    return apply


def _drop_cut_closer(answer: str, tag: str) -> str:
    """`answer` without a closing tag cut off at its end ("Paris</A", "Paris</", "Paris<"):
    the token limit can stop a message inside the closer."""
    start = answer.rfind("<")
    if start != -1 and f"</{tag}>".startswith(answer[start:].casefold()):
        return answer[:start].rstrip()
    return answer


def unclosed_tag_filter(tag: str) -> _Filter:
    """Everything after the last `<tag>` that is never closed (a truncated message), without a
    closing tag cut off at the end."""
    closer_tag = tag.casefold()

    def apply(text: str) -> str | None:
        _, open_end = _scan_tags(text, tag)
        if open_end is None:
            return None
        return _drop_cut_closer(text[open_end:].strip(), closer_tag) or None
    return apply


# --- answer-line filter -------------------------------------------------------------------

# "Answer: X", "Final answer: X", "**Final Answer:** X", "The answer is X" (case-insensitive).
_ANSWER_LINE = re.compile(
    r"[ \t>#*_-]*(?:the\s+)?(?:final\s+)?answer"
    r"(?:[ \t*_]*[:\uff1a]|\s+is\b)[ \t*_:]*(?P<answer>.*)",
    re.IGNORECASE,
)


def answer_line_filter(text: str) -> str | None:
    """The answer on the last line that starts like `Answer: X` or `Final answer: X`."""
    for line in reversed(text.splitlines()):
        match = _ANSWER_LINE.match(line)
        if match is not None:
            answer = match.group("answer").strip().strip("*_").strip()
            if answer:
                return answer
    return None


# --- boxed filter -------------------------------------------------------------------------

_BOXED_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE = re.compile(r"\\boxed +([^\s${}]+)")
_BRACE_TOKEN = re.compile(r"\\[\s\S]|[{}]")  # an escaped char (\{, \}) is not a group brace


def boxed_filter(text: str) -> str | None:
    """The content of the last `\\boxed{...}` or `\\fbox{...}` whose braces balance.

    One forward pass matches braces with a stack (escaped `\\{` `\\}` are content, not groups),
    so nested groups such as `\\boxed{\\frac{1}{2}}` work and a truncated last box falls back
    to the previous complete one. Also accepts the brace-less `\\boxed 5`.
    """
    opens = [m.end() - 1 for m in _BOXED_OPEN.finditer(text)]
    candidates: list[tuple[int, str]] = []
    if opens:
        close_of: dict[int, int] = {}
        stack: list[int] = []
        for token in _BRACE_TOKEN.finditer(text, opens[0]):
            if token.group() == "{":
                stack.append(token.start())
            elif token.group() == "}" and stack:
                close_of[stack.pop()] = token.start()
        for brace in reversed(opens):
            if brace in close_of:
                candidates.append((brace, text[brace + 1:close_of[brace]].strip()))
                break
    bare = None
    for bare in _BOXED_BARE.finditer(text):
        pass
    if bare is not None:
        candidates.append((bare.start(), bare.group(1)))
    return max(candidates)[1] if candidates else None


# --- pipelines ----------------------------------------------------------------------------

def _run(text: str, primary: tuple[ExtractionMethod, _Filter],
         fallbacks: Sequence[tuple[ExtractionMethod, _Filter]], strict: bool) -> Extraction:
    method, apply = primary
    answer = apply(text)
    if answer is not None:
        if not answer.strip():  # the asked-for format, left empty: an answer of nothing
            return NO_ANSWER
        return Extraction(answer=answer, method=method, fallback=False)
    if strict:
        return NO_ANSWER
    for method, apply in fallbacks:
        answer = apply(text)
        if answer is not None and answer.strip():
            logger.info("no %s answer found; fallback %r extracted %r", primary[0], method,
                        answer if len(answer) <= 80 else answer[:77] + "...")
            return Extraction(answer=answer, method=method, fallback=True)
    return NO_ANSWER


def extract_tag(text: str, tag: str = "A", *, strict: bool = False) -> Extraction:
    """Extract the answer marked `<A>...</A>` (the information-asymmetric and choice tasks).

    The last well-formed pair wins, matched case-insensitively; its content is stripped and may
    span lines. If that pair is empty or blank (`<A></A>`), the message has no answer: neither
    an earlier pair nor a fallback is used (the reference Optima parser also reads `<A></A>` as
    no answer). Without a well-formed pair, and unless `strict`, two logged fallbacks are tried:
    the text after a last unclosed `<A>`, less a closing tag cut off at the end ("Paris</A" is
    "Paris"; method "unclosed_tag"), then the last `Answer: X` / `Final answer: X` line (method
    "answer_line"). A later unclosed tag does not override an earlier well-formed pair.

    Args:
        text: One message.
        tag: The tag name, e.g. "A".
        strict: Disable the fallbacks.

    Returns:
        The extraction; method "none" and answer `None` when nothing was found.

    Raises:
        ConfigError: If `tag` is not a tag name.
    """
    return _run(text, ("tag", tag_filter(tag)),
                (("unclosed_tag", unclosed_tag_filter(tag)), ("answer_line", answer_line_filter)),
                strict)


def extract_boxed(text: str, *, strict: bool = False) -> Extraction:
    """Extract the answer in the last balanced `\\boxed{...}` / `\\fbox{...}` (math tasks).

    Unless `strict`, logged fallbacks follow: a well-formed `<A>...</A>` (method "tag"), then
    the last `Answer: X` line (method "answer_line"). A last box that is empty (`\\boxed{}`)
    means no answer, as for `extract_tag`.

    Args:
        text: One message.
        strict: Disable the fallbacks.

    Returns:
        The extraction; method "none" and answer `None` when nothing was found.
    """
    return _run(text, ("boxed", boxed_filter),
                (("tag", tag_filter("A")), ("answer_line", answer_line_filter)), strict)

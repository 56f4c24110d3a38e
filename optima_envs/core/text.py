"""Text that can be stored: strings UTF-8 can encode.

A Python `str` may hold lone UTF-16 surrogates (U+D800..U+DFFF), e.g. from a JSON `"\\ud800"`
escape, a tokenizer decoding half a character, or random test input. Everything else in Python
text encodes to UTF-8; surrogates do not, so Parquet, JSON files and tokenizers reject them and
a whole buffer write fails. The env repairs messages at its boundary (`repair_text`) and flags
that, so one bad message never costs the batch it is written with.
"""

from __future__ import annotations

__all__ = ["first_unencodable", "repair_text"]


def repair_text(text: str) -> tuple[str, bool]:
    """`text` as UTF-8-encodable text, and whether it had to change.

    A surrogate pair split over two code points is joined into its character; a lone surrogate
    becomes U+FFFD (the replacement character).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"), True
    return text, False


def first_unencodable(text: str) -> int | None:
    """The position of the first code point UTF-8 cannot encode (a surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None

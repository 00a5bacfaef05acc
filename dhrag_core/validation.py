"""Checks at the public boundary: errors name the argument and say what to pass."""

from __future__ import annotations

from typing import Any

__all__ = ["check_k", "check_session_id", "check_text"]

MAX_SESSION_ID_CHARS = 256


def check_text(
    name: str, value: Any, *, max_chars: int, allow_empty: bool = False,
    fix: str = "raise it in Settings, or shorten the text",
) -> str:
    """Return ``value`` if it is a usable str, else raise ``TypeError``/``ValueError``.

    ``fix`` is what the too-long message suggests.
    """
    if value is None:
        raise TypeError(f"{name} must be a str, got None")
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{name} must be a str, got bytes; decode it first (value.decode('utf-8'))")
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty or whitespace only")
    if len(value) > max_chars:
        raise ValueError(
            f"{name} is {len(value):,} characters; the limit is {max_chars:,} ({fix})"
        )
    if "\x00" in value:
        raise ValueError(f"{name} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} is not valid Unicode text (lone surrogate at position {exc.start}); "
            "decode input bytes with errors='replace'"
        ) from None
    return value


def check_session_id(value: Any) -> str:
    """A session id is a non-empty str of at most 256 characters."""
    return check_text("session_id", value, max_chars=MAX_SESSION_ID_CHARS,
                      fix="use a shorter id, e.g. a hash of it")


def check_k(k: Any) -> int:
    """A result count: an int >= 1."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int >= 1, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return k

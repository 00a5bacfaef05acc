"""Checks at the public boundary: errors name the argument and say what to pass."""

from __future__ import annotations

import json
import math
import numbers
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal

from dhrag_core.records import Passage

__all__ = ["CLEANED_KEY", "SearchPath", "as_items", "check_found", "check_k", "check_metadata",
           "check_search", "check_session_id", "check_text", "check_texts", "clean_json",
           "clean_passage", "clean_text", "fit_answer", "fit_query", "one_line", "printable"]

CLEANED_KEY = "dhrag_cleaned"
"""Passage metadata key saying what cleaning changed (shown in traces)."""

MAX_SESSION_ID_CHARS = 256


def check_text(
    name: str, value: Any, *, max_chars: int, allow_empty: bool = False,
    fix: str = "raise it in Settings, or shorten the text",
) -> str:
    """Return ``value`` if it is a usable str, else raise ``TypeError``/``ValueError``.

    ``fix`` is what the too-long message suggests.
    """
    _check_str(name, value, allow_empty)
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
    return str(value)


def _check_str(name: str, value: Any, allow_empty: bool) -> None:
    if value is None:
        raise TypeError(f"{name} must be a str, got None")
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{name} must be a str, got bytes; decode it first (value.decode('utf-8'))")
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty or whitespace only")


def check_session_id(value: Any) -> str:
    """A session id is a non-empty str of at most 256 characters."""
    return check_text("session_id", value, max_chars=MAX_SESSION_ID_CHARS,
                      fix="use a shorter id, e.g. a hash of it")


def check_k(k: Any, name: str = "k") -> int:
    """A result count: an int >= 1."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"{name} must be an int >= 1, got {type(k).__name__}")
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    return k


SearchPath = Literal["auto", "vector", "text"]
"""How an adapter searches a framework's store: by vector where possible, or by one path."""


def check_search(search: Any) -> SearchPath:
    """An adapter's ``search`` argument: ``"auto"``, ``"vector"`` or ``"text"``."""
    if search not in ("auto", "vector", "text"):
        raise ValueError(f'search must be "auto", "vector" or "text", got {search!r}')
    mode: SearchPath = search
    return mode


def check_texts(texts: Any) -> list[str]:
    """``texts`` as a list if it is a sequence of str (one str is refused: it would be
    embedded character by character), else ``TypeError`` naming the item."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of str, not one str; wrap it: [text]")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
    return items


def as_items(found: Any) -> list[Any] | None:
    """``found`` as a list when it is a collection of results (any iterable but a string,
    bytes, a mapping or a single passage); None otherwise."""
    if isinstance(found, (str, bytes, Passage, Mapping)) or not isinstance(found, Iterable):
        return None
    return list(found)


def check_found(found: Any, call: str) -> list[Passage]:
    """What a knowledge base's ``call`` returned, as a list, if it holds ``Passage`` objects
    with str text; else ``TypeError`` saying what the knowledge base must return (a user's
    retriever that returns strings or dicts would otherwise fail later, far from the cause)."""
    need = f"the knowledge base's {call} must return a list of dhrag_core.Passage"
    items = as_items(found)
    if items is None:
        raise TypeError(f"{need}, got {type(found).__name__}")
    for i, p in enumerate(items):
        if not isinstance(p, Passage):
            raise TypeError(f"{need}; item {i} is {type(p).__name__}: wrap it, "
                            "Passage(text=..., id=...)")
        if not isinstance(p.text, str):
            raise TypeError(f"{need} with str text; item {i} has text of type "
                            f"{type(p.text).__name__}")
    return items


def check_metadata(name: str, value: Any, *, max_chars: int) -> dict[str, Any]:
    """``value`` as a dict if it is JSON data under str keys within ``max_chars`` of JSON,
    else ``TypeError``/``ValueError`` naming the offending key (what a store could not keep
    exactly: an int key would come back as a str, a lone surrogate not at all)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping of str keys to JSON values, "
                        f"got {type(value).__name__}")
    try:
        _check_json(name, value)
    except RecursionError:
        raise ValueError(f"{name} is nested too deeply") from None
    size = len(json.dumps(dict(value), ensure_ascii=False))
    if size > max_chars:
        raise ValueError(f"{name} is {size:,} characters as JSON; the limit is {max_chars:,} "
                         "(Settings.limits.max_metadata_chars): store large data elsewhere")
    return dict(value)


def _check_json(path: str, v: Any) -> None:
    if isinstance(v, Mapping):
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"{path} keys must be str, got {type(k).__name__} key {k!r}")
            _check_unicode(f"key {k!r} of {path}", k)
            _check_json(f"{path}[{k!r}]", x)
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_json(f"{path}[{i}]", x)
    elif isinstance(v, str):
        _check_unicode(path, v)
    elif isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{path} is {v!r}; JSON has no such number")
    elif not (v is None or isinstance(v, (bool, int, float))):
        raise TypeError(f"{path} must be JSON data (str, number, bool, None, list or dict), "
                        f"got {type(v).__name__}")


def _check_unicode(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text (lone surrogate at position "
                         f"{exc.start})") from None


def clean_text(value: str, max_chars: int | None = None) -> tuple[str, list[str]]:
    """``value`` made storable: NUL characters removed, lone surrogates replaced by U+FFFD,
    cut to ``max_chars``; and what was done, in words (empty when nothing)."""
    notes: list[str] = []
    if "\x00" in value:
        notes.append(f"removed {value.count(chr(0)):,} NUL characters")
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fixed = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        notes.append("replaced lone surrogates by U+FFFD")
        value = fixed
    if max_chars is not None and len(value) > max_chars:
        notes.append(f"cut from {len(value):,} to {max_chars:,} characters")
        value = value[:max_chars]
    return value, notes


def fit_query(query: Any, max_chars: int, name: str = "query", *, warn: bool = True) -> str:
    """``query`` as dhrag uses it: a str that is not blank (else ``TypeError``/``ValueError``),
    NULs removed, lone surrogates replaced, cut to ``max_chars`` at a word boundary, with one
    warning saying what was done. A chat message pasted long is a question still: refusing
    it would fail the whole turn (an agent run, a chat) for a limit the user never set."""
    _check_str(name, query, allow_empty=False)
    text, notes = clean_text(query)
    if len(text) > max_chars:
        cut = text.rfind(" ", max_chars - max_chars // 10, max_chars + 1)
        notes.append(f"cut from {len(text):,} to the first {max_chars:,} characters (the "
                     "limit is Settings.limits.max_query_chars, or `dhrag chat --max-query-chars`)")
        text = text[:cut if cut > 0 else max_chars].rstrip()
    if notes and warn:
        warnings.warn(f"{name}: {'; '.join(notes)}", UserWarning, stacklevel=3)
    if not text.strip():
        raise ValueError(f"{name} must not be empty or whitespace only")
    return text


def fit_answer(answer: Any, max_chars: int, name: str = "answer") -> tuple[str, list[str]]:
    """``answer`` made storable like a passage's text (``clean_text``), with what was done:
    an LLM's answer is never refused once it has been given (a type other than str is)."""
    _check_str(name, answer, allow_empty=True)
    return clean_text(answer, max_chars)


def clean_json(value: Any) -> tuple[dict[str, Any], list[str]]:
    """Metadata of a retrieved passage made storable: JSON data under str keys (anything
    else as its ``str``), strings cleaned like ``clean_text``."""
    notes: list[str] = []

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            text, n = clean_text(v)
            notes.extend(n)
            return text
        if isinstance(v, Mapping):
            return {walk(str(k)): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        if v is None or isinstance(v, (bool, int)) or (
                isinstance(v, float) and math.isfinite(v)):
            return v
        return walk(str(v))

    try:
        out = walk(dict(value)) if isinstance(value, Mapping) else {}
    except RecursionError:
        return {}, ["dropped metadata nested too deeply"]
    return out, sorted(set(notes))


def clean_passage(p: Passage, max_chars: int, max_metadata_chars: int | None = None) -> Passage:
    """``p`` made storable (text, title, id and metadata, like ``clean_text``; the text cut
    to ``max_chars``; with ``max_metadata_chars``, the largest metadata fields dropped until
    its JSON fits), with what changed under ``metadata["dhrag_cleaned"]``; ``p`` itself when
    nothing had to change."""
    text, notes = clean_text(p.text, max_chars)
    title, n = clean_text(p.title if isinstance(p.title, str) else str(p.title))
    notes += [f"title: {x}" for x in n]
    score = p.score
    if score is not None and (isinstance(score, bool) or not isinstance(score, numbers.Real)
                              or not math.isfinite(score)):
        notes.append(f"score: {score!r} is not a finite number, dropped")
        score = None
    elif score is not None and type(score) is not float:
        score = float(score)  # a NumPy scalar, say: what every store can write
    pid = p.id
    if pid is not None:
        pid, n = clean_text(pid if isinstance(pid, str) else str(pid))
        notes += [f"id: {x}" for x in n]
    try:
        json.dumps(dict(p.metadata), ensure_ascii=False).encode("utf-8")
        meta: dict[str, Any] = dict(p.metadata)
    except (TypeError, ValueError, RecursionError):
        meta, n = clean_json(p.metadata)
        notes += [f"metadata: {x}" for x in n] or ["metadata: made JSON-safe"]
    trimmed = False
    if max_metadata_chars is not None:
        meta, trimmed = _fit_metadata(meta, notes, max_metadata_chars)
    elif notes:
        earlier = meta.get(CLEANED_KEY)
        meta[CLEANED_KEY] = "; ".join(([earlier] if isinstance(earlier, str) else []) + notes)
    if not notes and not trimmed and score is p.score:
        return p
    return replace(p, text=text, title=title, id=pid, score=score, metadata=meta)


_NOTE_CHARS = 1_000
"""Most characters of JSON the cleaning note may take when metadata is trimmed to fit."""
_NAMES_CHARS = 300
"""Most characters of dropped field names listed in that note (the rest: "and N more")."""


def _json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def _object_len(entries: int, entry_chars: int) -> int:
    """Characters of a JSON object of ``entries`` entries taking ``entry_chars`` in all."""
    return 2 + entry_chars + 2 * max(entries - 1, 0)


def _clip_json(text: str, room: int) -> str | None:
    """``text``, cut (ending in "...") so that it takes at most ``room`` characters as a JSON
    string; None when not even that fits."""
    if _json_len(text) <= room:
        return text
    lo, hi = 0, len(text)  # binary search: a character takes 1 to 6 characters in JSON
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _json_len(text[:mid] + "...") <= room:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo] + "..."
    return cut if _json_len(cut) <= room else None


def _dropped_note(dropped: list[str], limit: int) -> str:
    """What dropping ``dropped`` says: the first names (largest fields first), "and N more"."""
    shown: list[str] = []
    used = 0
    for key in dropped:
        name = repr(key) if len(key) <= 40 else repr(key[:40]) + "..."
        if shown and used + len(name) > _NAMES_CHARS:
            break
        shown.append(name)
        used += len(name) + 2
    more = len(dropped) - len(shown)
    return (f"metadata: dropped {', '.join(shown)}{f' and {more:,} more' if more else ''} "
            f"(over {limit:,} characters)")


def _note(prior: list[str], dropped: list[str], limit: int, room: int) -> str | None:
    """The cleaning note within ``room`` characters of JSON: the earlier notes (cut if need
    be), then what was dropped; None when no note fits."""
    if not dropped:
        return _clip_json("; ".join(prior), room)
    said = _dropped_note(dropped, limit)
    if not prior:
        return _clip_json(said, room)
    head = _clip_json("; ".join(prior), max(room // 2, room - _json_len(said) - 2))
    return _clip_json(f"{head}; {said}" if head else said, room)


def _fit_metadata(meta: dict[str, Any], notes: list[str],
                  limit: int) -> tuple[dict[str, Any], bool]:
    """``meta`` with ``notes`` under ``CLEANED_KEY`` (after an earlier note), its largest
    fields dropped (and named in the note) until its JSON, note included, holds at most
    ``limit`` characters (a retriever's provenance, not a document: it is stored with every
    turn); whether anything changed. Linear in the fields: each is serialised once."""
    size = _json_len(meta)
    if not notes and size <= limit:
        return meta, False
    earlier = meta.get(CLEANED_KEY)
    prior = ([earlier] if isinstance(earlier, str) else []) + notes
    rest = {k: v for k, v in meta.items() if k != CLEANED_KEY}
    key_chars = _json_len(CLEANED_KEY) + 2  # '"dhrag_cleaned": '
    if notes:
        text = "; ".join(prior)
        size = _json_len(rest)
        if size + (2 if rest else 0) + key_chars + _json_len(text) <= limit:
            return {**rest, CLEANED_KEY: text}, True
    sizes = {k: _json_len({k: v}) - 2 for k, v in rest.items()}
    count, total = len(sizes), sum(sizes.values())
    reserve = min(limit // 2, 2 + key_chars + _NOTE_CHARS)  # ", " + the note's entry
    dropped: list[str] = []
    for key in sorted(sizes, key=lambda k: -sizes[k]):
        if _object_len(count, total) + reserve <= limit:
            break
        dropped.append(key)
        count, total = count - 1, total - sizes[key]
    note = _note(prior, dropped, limit, reserve - 2 - key_chars)
    # what the note did not take of the reserve: the smallest dropped fields back, if they fit
    spare = limit - _object_len(count, total) - (
        0 if note is None else (2 if count else 0) + key_chars + _json_len(note))
    while dropped and sizes[dropped[-1]] + 2 <= spare:
        key = dropped.pop()
        spare -= sizes[key] + 2
        count, total = count + 1, total + sizes[key]
    if note is not None:  # fewer names: a note no longer than the one measured
        note = _note(prior, dropped, limit, _json_len(note))
    gone = set(dropped)
    out = {k: v for k, v in rest.items() if k not in gone}
    if note is not None:
        out[CLEANED_KEY] = note
    if _json_len(out) > limit:  # not expected: the sizes above are exact
        out = {CLEANED_KEY: note} if note is not None else {}
        out = out if _json_len(out) <= limit else {}
    return out, True


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: control characters (ESC sequences that retitle
    the window or clear the screen, BEL, C1, bidirectional overrides) shown as ``\\xNN`` /
    ``\\uNNNN`` instead of acted on; newlines and tabs kept."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


_UNSAFE_IN_LINE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(value: object) -> str:
    """``str(value)`` safe in one log line: every control character (newlines, ESC sequences,
    BEL, C1, line separators, bidirectional overrides) shown as ``\\n`` / ``\\xNN`` /
    ``\\uNNNN``, so that a file name or an id can neither forge a line nor act on a
    terminal."""
    return _UNSAFE_IN_LINE.sub(
        lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))

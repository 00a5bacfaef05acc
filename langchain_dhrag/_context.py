"""Plumbing shared by the adapter classes: the session of a call and the caller's callbacks.

Nothing here computes anything about history: it only carries values between LangChain calls
and ``dhrag_core`` calls (the engine keeps the pending selections itself).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.runnables import RunnableConfig

from dhrag_core.records import Selection
from dhrag_core.validation import check_session_id

__all__ = [
    "caller_context",
    "child_callbacks",
    "child_config",
    "hand_on",
    "handed_selection",
    "missing_session",
    "session_from_config",
]

_CALLBACKS: ContextVar[Callbacks] = ContextVar("dhrag_callbacks", default=None)
_HANDED: ContextVar[tuple[int, Selection, int | None] | None] = ContextVar(
    "dhrag_handed_selection", default=None)


def missing_session(owner: str) -> ValueError:
    """The error for a call that names no session while ``owner`` has no default."""
    return ValueError(
        "no session id: pass config={\"configurable\": {\"session_id\": \"...\"}} (or "
        f"LangGraph's \"thread_id\"), or set {owner}(session_id=\"...\") to use one session "
        "for every call that names none"
    )


def session_from_config(
    config: Mapping[str, Any] | None, default: str | None, owner: str = "the component"
) -> str:
    """``configurable["session_id"]``, else ``configurable["thread_id"]`` (LangGraph's), else
    ``default``; with none of them, ``ValueError`` saying how to pass one (users must not
    share a history by accident)."""
    configurable = (config or {}).get("configurable") or {}
    for key in ("session_id", "thread_id"):
        value = configurable.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise TypeError(
                    f'config["configurable"]["{key}"] must be a str, got {type(value).__name__}'
                )
            return check_session_id(value)
    if default is None:
        raise missing_session(owner)
    return default


@contextmanager
def caller_context(callbacks: Callbacks = None) -> Iterator[None]:
    """Make ``callbacks`` visible to the knowledge-base and chat-model calls that the engine
    makes further down (also in its worker threads: ``asyncio.to_thread`` copies context
    variables), so they nest under the caller's run."""
    token = _CALLBACKS.set(callbacks)
    try:
        yield
    finally:
        _CALLBACKS.reset(token)


def child_callbacks() -> Callbacks:
    """The callbacks set by the innermost ``caller_context`` (for nested LangChain runs)."""
    return _CALLBACKS.get()


def child_config() -> RunnableConfig:
    """The config of a nested LangChain call: the callbacks of the innermost
    ``caller_context``."""
    return {"callbacks": child_callbacks()}


@contextmanager
def hand_on(engine: object, selection: Selection, k: int | None) -> Iterator[None]:
    """Within one chain call, give the selection already made for its question (``k``
    passages; ``None``: the engine's default) to the retriever of the same engine, so that it
    is not made twice (``with_dhrag_memory(history_key=...)``)."""
    token = _HANDED.set((id(engine), selection, k))
    try:
        yield
    finally:
        _HANDED.reset(token)


def handed_selection(engine: object, session_id: str, query: str,
                     k: int | None) -> Selection | None:
    """The selection handed on for this engine, session, question and ``k``, if any."""
    handed = _HANDED.get()
    if handed is None:
        return None
    owner, selection, made_k = handed
    if owner != id(engine) or selection.session_id != session_id or selection.query != query:
        return None
    return selection if made_k == k else None

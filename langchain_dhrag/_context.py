"""Plumbing shared by the adapter classes: session ids, pending selections, the caller's loop.

Nothing here computes anything about history: it only carries values between LangChain calls
and ``dhrag_core`` calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from langchain_core.callbacks import Callbacks

from dhrag_core import DHRAG, AddResult, Passage, Selection

__all__ = [
    "PendingSelections",
    "arecord_turn",
    "aselect",
    "call_on_caller_loop",
    "caller_context",
    "child_callbacks",
    "pending_for",
    "record_turn",
    "session_from_config",
]

T = TypeVar("T")

_CALLER_LOOP: ContextVar[asyncio.AbstractEventLoop | None] = ContextVar(
    "dhrag_caller_loop", default=None
)
_CALLBACKS: ContextVar[Callbacks] = ContextVar("dhrag_callbacks", default=None)


def session_from_config(config: Mapping[str, Any] | None, default: str) -> str:
    """``configurable["session_id"]``, else ``configurable["thread_id"]`` (LangGraph's), else
    ``default``."""
    configurable = (config or {}).get("configurable") or {}
    for key in ("session_id", "thread_id"):
        value = configurable.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise TypeError(
                    f'config["configurable"]["{key}"] must be a str, got {type(value).__name__}'
                )
            return value
    return default


@contextmanager
def caller_context(
    callbacks: Callbacks = None, *, loop: asyncio.AbstractEventLoop | None = None
) -> Iterator[None]:
    """Make ``callbacks`` (and the running event loop) visible to bridge calls that the
    engine makes further down, including in the worker thread of ``aselect``/``arecord``
    (``asyncio.to_thread`` copies context variables)."""
    t_loop = _CALLER_LOOP.set(loop)
    t_cb = _CALLBACKS.set(callbacks)
    try:
        yield
    finally:
        _CALLBACKS.reset(t_cb)
        _CALLER_LOOP.reset(t_loop)


def child_callbacks() -> Callbacks:
    """The callbacks set by the innermost ``caller_context`` (for nested LangChain runs)."""
    return _CALLBACKS.get()


def call_on_caller_loop(
    make: Callable[[], Awaitable[T]], fallback: Callable[[], T]
) -> T:
    """Run ``make()`` on the async caller's event loop and wait for it, when this code runs
    in a worker thread of an async call; otherwise run ``fallback()`` here.

    This is how the engine's synchronous knowledge-base and rewriter calls reach a
    retriever's or chat model's own async implementation during ``ainvoke``.
    """
    loop = _CALLER_LOOP.get()
    if loop is None or loop.is_closed() or not loop.is_running():
        return fallback()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # a worker thread: blocking here is safe, the loop is free
    else:
        return fallback()  # on an event loop thread: never block it

    async def run() -> T:
        return await make()

    future = asyncio.run_coroutine_threadsafe(run(), loop)
    while True:
        try:
            return future.result(timeout=1.0)
        except concurrent.futures.TimeoutError:
            if loop.is_closed() or not loop.is_running():
                future.cancel()
                raise RuntimeError("the calling event loop stopped before the call ended") from None


# Selections of async calls run here, not in the loop's default executor: while one runs it
# may wait for a coroutine on the loop (the source's own async search), and that coroutine
# may itself need the default executor (LangChain runs sync fallbacks there). Sharing one
# pool would let enough concurrent calls occupy every worker and deadlock.
_SELECT_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=32, thread_name_prefix="dhrag-langchain-select"
)


async def aselect(
    engine: DHRAG, session_id: str, query: str, k: int | None, callbacks: Callbacks = None
) -> Selection:
    """``engine.select`` off the event loop, with the knowledge-base and rewriter calls it
    makes routed back to this loop's async APIs (see ``call_on_caller_loop``)."""
    loop = asyncio.get_running_loop()
    with caller_context(callbacks, loop=loop):
        ctx = contextvars.copy_context()
    return await loop.run_in_executor(_SELECT_POOL, ctx.run, engine.select, session_id, query, k)


class PendingSelections:
    """The latest ``Selection`` per session, waiting for its answer to be recorded.

    Components that share one ``DHRAG`` engine share this (see ``pending_for``): a retriever
    selects, and the memory, chat history or ``record`` call stores the turn with the
    passages that selection showed.
    """

    def __init__(self, max_sessions: int = 4096) -> None:
        self._items: OrderedDict[str, Selection] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_sessions

    def put(self, selection: Selection) -> None:
        with self._lock:
            self._items[selection.session_id] = selection
            self._items.move_to_end(selection.session_id)
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def get(self, session_id: str, query: str) -> Selection | None:
        """The pending selection of ``session_id`` if it was made for ``query``."""
        with self._lock:
            sel = self._items.get(session_id)
            return sel if sel is not None and sel.query == query else None

    def pop(self, session_id: str, query: str) -> Selection | None:
        """Like ``get``, and forget it (it is being recorded)."""
        with self._lock:
            sel = self._items.get(session_id)
            if sel is None or sel.query != query:
                return None
            del self._items[session_id]
            return sel

    def restore(self, selection: Selection) -> None:
        """Put back a popped selection (its recording failed) unless a newer one came."""
        with self._lock:
            self._items.setdefault(selection.session_id, selection)

    def discard(self, session_id: str) -> None:
        with self._lock:
            self._items.pop(session_id, None)


_REGISTRY: weakref.WeakKeyDictionary[DHRAG, PendingSelections] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def _pop(engine: DHRAG, session_id: Any, query: Any) -> Selection | None:
    if not isinstance(session_id, str) or not isinstance(query, str):
        return None  # the engine raises the error that names the argument
    return pending_for(engine).pop(session_id, query)


def record_turn(
    engine: DHRAG,
    session_id: str,
    query: str,
    answer: str,
    *,
    passages: Sequence[Passage] | None = None,
) -> AddResult:
    """``engine.record`` with the pending selection of (session, query), if any: its
    passages are stored unless ``passages`` is given."""
    sel = _pop(engine, session_id, query)
    try:
        return engine.record(session_id, query, answer, selection=sel, passages=passages)
    except BaseException:
        if sel is not None:
            pending_for(engine).restore(sel)
        raise


async def arecord_turn(
    engine: DHRAG,
    session_id: str,
    query: str,
    answer: str,
    *,
    passages: Sequence[Passage] | None = None,
) -> AddResult:
    """``record_turn`` off the event loop."""
    sel = _pop(engine, session_id, query)
    try:
        return await engine.arecord(session_id, query, answer, selection=sel, passages=passages)
    except BaseException:
        if sel is not None:
            pending_for(engine).restore(sel)
        raise


def pending_for(engine: DHRAG) -> PendingSelections:
    """The pending selections of ``engine`` (one registry per engine object)."""
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(engine)
        if found is None:
            found = _REGISTRY[engine] = PendingSelections()
        return found

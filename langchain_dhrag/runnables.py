"""``with_dhrag_memory``: DH-RAG memory added to an existing chain in one call.

The wrapper finds the session in the call's config, runs the chain (whose ``DHRAGRetriever``
selects history and passages), and records the turn -- question, passages shown, answer --
once the answer is complete: after ``invoke``/``ainvoke``, for each input of
``batch``/``abatch``, and when a ``stream``/``astream`` has been consumed to its end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.messages import BaseMessage, BaseMessageChunk
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config

from dhrag_core import DHRAG, Selection
from langchain_dhrag._context import hand_on, session_from_config
from langchain_dhrag.convert import history_messages
from langchain_dhrag.retrievers import DHRAGRetriever

__all__ = ["DHRAGMemoryRunnable", "with_dhrag_memory"]


def _text(where: str, value: Any) -> str:
    if isinstance(value, BaseMessage):
        return value.text
    if isinstance(value, str):
        return value
    raise TypeError(f"{where} must be a str or message, got {type(value).__name__}")


def _pick(where: str, value: Any, key: str | None, setting: str) -> str:
    """The text of ``value``: itself, or ``value[key]`` of a dict (the only key if none)."""
    if not isinstance(value, Mapping):
        return _text(where, value)
    if key is None:
        if len(value) != 1:
            raise ValueError(f"cannot tell which key of the {where} holds the text among "
                             f"{sorted(value)}; pass with_dhrag_memory(..., {setting}=...)")
        key = next(iter(value))
    if key not in value:
        raise ValueError(f"the {where} has no key {key!r} ({setting})")
    return _text(f"{where}[{key!r}]", value[key])


def _add(total: Any, chunk: Any) -> Any:
    """``total`` and the next streamed ``chunk`` merged as LangChain adds chunks up: message
    chunks with ``+``; strings and messages as their text joined; dicts key by key (a key's
    first non-``None`` value, then each later one merged into it, as ``AddableDict`` does);
    other values with ``+`` when of one type, else as their ``str`` joined. A chunk is never
    dropped: a stream's answer is all of its chunks."""
    if total is None:
        return chunk
    if chunk is None:
        return total
    if isinstance(total, Mapping) and isinstance(chunk, Mapping):
        merged = dict(total)
        for key, value in chunk.items():
            old = merged.get(key)
            merged[key] = value if old is None else _add(old, value)
        return merged
    if isinstance(total, BaseMessageChunk) and isinstance(chunk, BaseMessageChunk):
        with contextlib.suppress(TypeError, ValueError):  # e.g. chunks of two roles
            return total + chunk
    if isinstance(total, (str, BaseMessage)) and isinstance(chunk, (str, BaseMessage)):
        return _text("chunk", total) + _text("chunk", chunk)  # AIMessage + AIMessage: a prompt
    if type(total) is type(chunk):
        with contextlib.suppress(TypeError):
            return total + chunk
    return _chunk_text(total) + _chunk_text(chunk)


def _chunk_text(value: Any) -> str:
    return value.text if isinstance(value, BaseMessage) else str(value)


class DHRAGMemoryRunnable(Runnable[Any, Any]):
    """A chain whose turns are recorded in DH-RAG's history (see ``with_dhrag_memory``)."""

    def __init__(
        self,
        chain: Runnable[Any, Any],
        engine: DHRAG,
        *,
        session_id: str | None = None,
        input_key: str | None = None,
        output_key: str | None = None,
        history_key: str | None = None,
        k: int | None = None,
    ) -> None:
        if not isinstance(chain, Runnable):
            raise TypeError(f"chain must be a LangChain Runnable, got {type(chain).__name__}")
        if not isinstance(engine, DHRAG):
            raise TypeError(f"engine must be a DHRAGRetriever or DHRAG, got "
                            f"{type(engine).__name__}")
        self.chain = chain
        self.engine = engine
        self.session_id = session_id
        self.input_key = input_key
        self.output_key = output_key
        self.history_key = history_key
        self.k = k  # the retriever's k: its selection is the one made for the history

    # -- plumbing ---------------------------------------------------------------------------

    def _start(self, input: Any, config: RunnableConfig | None) -> tuple[str, str, RunnableConfig]:
        config = ensure_config(config)
        sid = session_from_config(config, self.session_id, "with_dhrag_memory")
        return sid, _pick("input", input, self.input_key, "input_key"), config

    def _with_history(self, input: Any, sid: str, query: str) -> tuple[Any, Selection | None]:
        """The chain's input with the selected history under ``history_key``, and the
        selection made for it (handed on to the chain's retriever)."""
        if self.history_key is None:
            return input, None
        if not isinstance(input, Mapping):
            raise TypeError("history_key needs dict inputs (the prompt's variables)")
        selection = self.engine.select(sid, query, self.k)
        return {**input, self.history_key: history_messages(selection.history)}, selection

    async def _awith_history(self, input: Any, sid: str,
                             query: str) -> tuple[Any, Selection | None]:
        if self.history_key is None:
            return input, None
        if not isinstance(input, Mapping):
            raise TypeError("history_key needs dict inputs (the prompt's variables)")
        selection = await self.engine.aselect(sid, query, self.k)
        return {**input, self.history_key: history_messages(selection.history)}, selection

    def _handing_on(self, selection: Selection | None) -> contextlib.AbstractContextManager[None]:
        return (hand_on(self.engine, selection, self.k) if selection is not None
                else contextlib.nullcontext())

    def _answer(self, output: Any) -> str:
        return _pick("chain's output", output, self.output_key, "output_key")

    # -- calls ------------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the chain on ``input`` and record the turn in the config's session."""
        sid, query, config = self._start(input, config)
        chain_input, selection = self._with_history(input, sid, query)
        with self._handing_on(selection):
            out = self.chain.invoke(chain_input, config, **kwargs)
        self.engine.record(sid, query, self._answer(out))
        return out

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        """``invoke`` for async code."""
        sid, query, config = self._start(input, config)
        chain_input, selection = await self._awith_history(input, sid, query)
        with self._handing_on(selection):
            out = await self.chain.ainvoke(chain_input, config, **kwargs)
        await self.engine.arecord(sid, query, self._answer(out))
        return out

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """The chain's chunks; the turn is recorded when the stream ends (a stream left
        half-way records nothing)."""
        sid, query, config = self._start(input, config)
        total = None
        for chunk in self.chain.stream(self._with_history(input, sid, query)[0], config,
                                       **kwargs):
            total = _add(total, chunk)
            yield chunk
        self.engine.record(sid, query, self._answer(total))

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """``stream`` for async code."""
        sid, query, config = self._start(input, config)
        total = None
        chain_input = (await self._awith_history(input, sid, query))[0]
        async for chunk in self.chain.astream(chain_input, config, **kwargs):
            total = _add(total, chunk)
            yield chunk
        await self.engine.arecord(sid, query, self._answer(total))


def with_dhrag_memory(
    chain: Runnable[Any, Any],
    memory: DHRAGRetriever | DHRAG,
    *,
    session_id: str | None = None,
    input_key: str | None = None,
    output_key: str | None = None,
    history_key: str | None = None,
) -> DHRAGMemoryRunnable:
    """``chain`` with DH-RAG memory: each answer is recorded as a turn of the session named
    by the call's config (``{"configurable": {"session_id": ...}}``).

    ``chain`` retrieves with ``memory`` (a ``DHRAGRetriever``), so each question is
    completed from the turns DH-RAG selects, and the passages it showed are stored with the
    answer. Works for ``invoke``, ``ainvoke``, ``batch``, ``abatch``, ``stream`` and
    ``astream``.

    Args:
        chain: The chain; its input is the question (str or message) or a dict holding it.
        memory: The ``DHRAGRetriever`` the chain uses (or its ``DHRAG`` engine).
        session_id: Session for calls whose config names none (default: the retriever's
            ``session_id`` field; with neither, such a call raises ``ValueError``).
        input_key: Key of the question in dict inputs (default: the only key).
        output_key: Key of the answer in dict outputs (default: the only key).
        history_key: If set, dict inputs also get the turns DH-RAG selected under this key,
            as messages (for a ``MessagesPlaceholder``), instead of the whole history.

    Example:
        ```python
        retriever = DHRAGRetriever.from_knowledge(vector_store, k=4)
        rag_chain = ({"context": retriever | format_documents,
                      "question": RunnablePassthrough()} | prompt | llm | StrOutputParser())
        chat = with_dhrag_memory(rag_chain, retriever)
        cfg = {"configurable": {"session_id": "alice"}}
        chat.invoke("What is the Great Wall built of?", cfg)
        chat.invoke("How long is it?", cfg)  # completed from the first turn
        ```
    """
    if isinstance(memory, DHRAGRetriever):
        engine, default, k = memory.engine, memory.session_id, memory.k
    else:
        engine, default, k = memory, None, None
    return DHRAGMemoryRunnable(
        chain, engine, session_id=session_id if session_id is not None else default,
        input_key=input_key, output_key=output_key, history_key=history_key, k=k,
    )

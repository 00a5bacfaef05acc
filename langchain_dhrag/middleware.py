"""``DHRAGMiddleware``: DH-RAG memory for agents built with ``langchain.agents.create_agent``.

Needs the ``langchain`` package (v1): ``pip install "dhrag[langchain]"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from dhrag_core import DHRAG, Selection
from dhrag_core.validation import check_k, check_session_id
from langchain_dhrag._context import session_from_config
from langchain_dhrag.convert import format_documents, format_history, selection_to_documents

__all__ = ["DHRAGMiddleware"]

Handler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


def _last_human(messages: Sequence[AnyMessage]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


class DHRAGMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Agent memory by DH-RAG: before each model call, the history turns DH-RAG selects for
    the user's latest message (and the integrated knowledge-base context) are added to the
    system message; after the agent's run, the turn (question, passages shown, final answer)
    is recorded.

    Selection runs once per user turn (tool-calling steps reuse it) and changes nothing in
    the agent state. With ``current_turn_only`` (default) the model sees only the messages
    of the current user turn plus what DH-RAG selected, even when a checkpointer keeps the
    whole thread: DH-RAG is the memory.

    The session is ``runtime.context.session_id`` (or ``context["session_id"]``) when the
    agent has such a context, else ``config["configurable"]["session_id"]``, else
    ``["thread_id"]``, else ``session_id`` if set, else a ``ValueError`` says how to pass one.

    Args:
        engine: The ``DHRAG`` engine.
        session_id: Session used when a run names none (default: none, an error).
        k: Context passages per selection (default: ``Settings.retrieval.context_k``).
        include_context: Also inject the knowledge-base/history passages.
        current_turn_only: Drop earlier turns' messages from the model request.
        record_turns: Record each finished run as a turn.

    Example:
        ```python
        from langchain.agents import create_agent

        agent = create_agent(model, tools, middleware=[DHRAGMiddleware(rag)])
        agent.invoke({"messages": [("user", "How long is it?")]},
                     {"configurable": {"session_id": "alice"}})
        ```
    """

    def __init__(
        self,
        engine: DHRAG,
        *,
        session_id: str | None = None,
        k: int | None = None,
        include_context: bool = True,
        current_turn_only: bool = True,
        record_turns: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(engine, DHRAG):
            raise TypeError(f"engine must be a dhrag_core.DHRAG, got {type(engine).__name__}")
        self.engine = engine
        self.session_id = None if session_id is None else check_session_id(session_id)
        self.k = None if k is None else check_k(k)
        self.include_context = include_context
        self.current_turn_only = current_turn_only
        self.record_turns = record_turns

    # -- plumbing ---------------------------------------------------------------------------

    def _session(self, runtime: Runtime[Any] | None) -> str:
        ctx = getattr(runtime, "context", None)
        sid = ctx.get("session_id") if isinstance(ctx, dict) else getattr(ctx, "session_id", None)
        if sid is None:
            try:
                config = get_config()
            except RuntimeError:
                config = None
            sid = session_from_config(config, self.session_id, "DHRAGMiddleware")
        return check_session_id(sid)

    def _question(self, messages: Sequence[AnyMessage]) -> tuple[int, str] | None:
        i = _last_human(messages)
        if i is None:
            return None
        text = messages[i].text
        return (i, text) if text.strip() else None

    def _cached(self, sid: str, query: str) -> Selection | None:
        return self.engine.pending(sid, query)

    def system_text(self, selection: Selection) -> str:
        """The text added to the system message for a selection."""
        parts = []
        if selection.history:
            parts.append(
                "Earlier conversation relevant to the user's latest message (selected from "
                "the conversation history, oldest first):\n"
                + format_history(selection.history, human_prefix="User", ai_prefix="Assistant")
            )
            if selection.rewritten_query != selection.query:
                parts.append(f"The latest message, made standalone: {selection.rewritten_query}")
        if self.include_context and selection.context:
            parts.append("Retrieved passages:\n"
                         + format_documents(selection_to_documents(selection)))
        return "\n\n".join(parts)

    def _request(
        self, request: ModelRequest[Any], selection: Selection, start: int
    ) -> ModelRequest[Any]:
        text = self.system_text(selection)
        overrides: dict[str, Any] = {}
        if self.current_turn_only and start > 0:
            overrides["messages"] = list(request.messages[start:])
        if text:
            old = request.system_message
            if old is None:
                system = SystemMessage(text)
            elif isinstance(old.content, str):
                system = SystemMessage(f"{old.content}\n\n{text}" if old.content else text)
            else:
                system = SystemMessage([*old.content, {"type": "text", "text": text}])
            overrides["system_message"] = system
        return request.override(**overrides) if overrides else request

    # -- before the model -------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> Any:
        found = self._question(request.messages)
        if found is None:
            return handler(request)
        start, query = found
        sid = self._session(request.runtime)
        sel = self._cached(sid, query)
        if sel is None:
            sel = self.engine.select(sid, query, self.k)
        return handler(self._request(request, sel, start))

    async def awrap_model_call(self, request: ModelRequest[Any], handler: AsyncHandler) -> Any:
        found = self._question(request.messages)
        if found is None:
            return await handler(request)
        start, query = found
        sid = self._session(request.runtime)
        sel = self._cached(sid, query)
        if sel is None:
            sel = await self.engine.aselect(sid, query, self.k)
        return await handler(self._request(request, sel, start))

    # -- after the run ----------------------------------------------------------------------

    def _turn(self, state: AgentState[Any]) -> tuple[str, str] | None:
        messages = state.get("messages") or []
        found = self._question(messages)
        if not self.record_turns or found is None:
            return None
        start, query = found
        answers = [m for m in messages[start + 1:] if isinstance(m, AIMessage)]
        if not answers:
            return None
        return query, answers[-1].text

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        turn = self._turn(state)
        if turn is not None:
            self.engine.record(self._session(runtime), *turn)
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        turn = self._turn(state)
        if turn is not None:
            await self.engine.arecord(self._session(runtime), *turn)
        return None

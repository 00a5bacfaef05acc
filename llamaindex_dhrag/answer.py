"""What the chat engine's LLM is shown for one selection, and what the response carries.

* ``DEFAULT_CONTEXT_PROMPT``: the system prompt template around the integrated context.
* ``answer_messages``: the system message (context), the selected history turns oldest
  first, then the user's raw message.
* ``selection_sources``: the selection's trace as a ``ToolOutput``, the integrated context as
  nodes, and the trace itself.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import NodeWithScore
from llama_index.core.tools import ToolOutput

from dhrag_core import Selection
from dhrag_core.transcript import in_turn_order
from llamaindex_dhrag.convert import (
    format_context,
    selection_to_nodes,
    selection_trace,
    turns_to_messages,
)

__all__ = ["DEFAULT_CONTEXT_PROMPT", "TOOL_NAME", "answer_messages", "selection_sources"]

DEFAULT_CONTEXT_PROMPT = PromptTemplate(
    "The following is a conversation between a user and an AI assistant. The earlier turns "
    "shown are the ones relevant to the user's latest message, selected from the whole "
    "conversation.\n\n"
    "Here are the relevant documents for the context, best first (passages shown at earlier "
    "turns are marked so):\n\n"
    "{context_str}\n\n"
    "Instruction: Based on the above documents and the earlier turns, answer the user's "
    'latest message. Answer "don\'t know" if the answer is not in the documents.'
)

#: ``tool_name`` of the ``ToolOutput`` that carries the trace (``sources[0]``).
TOOL_NAME = "dhrag_context"


def answer_messages(
    selection: Selection,
    message: str,
    *,
    context_prompt: PromptTemplate,
    system_prompt: str | None,
    system_role: MessageRole,
) -> list[ChatMessage]:
    """System (``system_prompt`` and the context prompt), the selected history turns oldest
    first, the raw message."""
    context = context_prompt.format(
        context_str=format_context(selection), query=message,
        rewritten_query=selection.rewritten_query,
    )
    system = f"{system_prompt}\n\n{context}" if system_prompt else context
    history = in_turn_order(selection.history)
    return [
        ChatMessage(role=system_role, content=system),
        *turns_to_messages(history),
        ChatMessage(role=MessageRole.USER, content=message),
    ]


def selection_sources(
    selection: Selection,
) -> tuple[list[ToolOutput], list[NodeWithScore], dict[str, Any]]:
    """The response's ``sources`` (one ``ToolOutput`` whose ``raw_output`` is the trace),
    ``source_nodes`` (the integrated context) and the trace."""
    trace = selection_trace(selection)
    lines = [f"rewritten query: {selection.rewritten_query}"]
    lines += [f"history turn {h['turn'] + 1} (weight {h['weight']:.3f}): {h['query']}"
              for h in trace["history"]]
    tool = ToolOutput(
        tool_name=TOOL_NAME, content="\n".join(lines),
        raw_input={"message": selection.query, "session_id": selection.session_id},
        raw_output=trace,
    )
    return [tool], selection_to_nodes(selection), trace

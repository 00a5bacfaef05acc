"""Type translations between dhrag records and LlamaIndex objects (no logic of their own).

* ``node_to_passage``: a retrieved ``NodeWithScore`` as a dhrag ``Passage``.
* ``selection_trace``: a ``Selection`` as one JSON-friendly dict (rewritten query, selected
  history turns with their weights, context items with their integration weights).
* ``selection_to_nodes``: the integrated context as ``NodeWithScore``s, score = integration
  weight, the per-item trace under ``node.metadata["dhrag"]``.
* ``turns_to_messages`` / ``message_pairs``: stored turns <-> user/assistant ``ChatMessage``s.

The LangChain adapter's translations are in ``langchain_dhrag.convert`` (``document_to_passage``,
``selection_to_documents``). ``node_to_passage`` was ``passage_from_node``, a name that still
works for one release (with a ``DeprecationWarning``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from dhrag_core import Passage, SelectedTurn, Selection, Turn
from dhrag_core.deprecation import renamed_attribute
from dhrag_core.transcript import exchanges

__all__ = [
    "TRACE_KEY",
    "format_context",
    "message_pairs",
    "message_text",
    "node_to_passage",
    "selection_to_nodes",
    "selection_trace",
    "turns_to_messages",
]

#: Node metadata key under which the adapter puts its trace (kept out of LLM/embedding text).
TRACE_KEY = "dhrag"

_SCALAR = (str, int, float, bool, type(None))


def node_to_passage(node: NodeWithScore) -> Passage:
    """A LlamaIndex ``NodeWithScore`` as a dhrag ``Passage``.

    The text is the node's content without metadata; the id is the node id (so the same node
    met again, in the knowledge base or the history, is de-duplicated); the title is the
    ``title`` or ``file_name`` metadata. Only flat JSON values of the metadata are kept (what
    a history store can persist), and the adapter's own trace key is dropped.

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> p = node_to_passage(NodeWithScore(node=TextNode(text="Hi", id_="n1"), score=0.5))
        >>> (p.id, p.text, p.score)
        ('n1', 'Hi', 0.5)
    """
    if not isinstance(node, NodeWithScore):
        raise TypeError(f"node must be a llama_index NodeWithScore, got {type(node).__name__}")
    inner = node.node
    meta = {
        str(key): value for key, value in (inner.metadata or {}).items()
        if key != TRACE_KEY and isinstance(value, _SCALAR)
    }
    title = meta.get("title") or meta.get("file_name") or ""
    return Passage(
        text=inner.get_content(metadata_mode=MetadataMode.NONE),
        id=inner.node_id,
        title=str(title),
        score=None if node.score is None else float(node.score),
        metadata=meta,
    )


def _history_row(s: SelectedTurn) -> dict[str, Any]:
    return {
        "turn": s.turn.index, "query": s.turn.query, "response": s.turn.response,
        "relevance": round(s.relevance, 4), "recency": round(s.recency, 4),
        "weight": round(s.weight, 4), "via": list(s.via), "cluster": s.cluster_id,
        "cluster_label": s.cluster_label, "summary": s.summary, "chain": s.chain_id,
    }


def selection_trace(selection: Selection) -> dict[str, Any]:
    """Why this context: the query, its rewrite, the selected history and the context items.

    ``"turn"`` is the record's ``Turn.index`` (from 0); text for people and LLMs adds 1.

    Example:
        >>> trace = selection_trace(rag.select("alice", "How long is it?"))  # doctest: +SKIP
        >>> trace["rewritten_query"], [h["weight"] for h in trace["history"]]  # doctest: +SKIP
    """
    if not isinstance(selection, Selection):
        raise TypeError(f"selection must be a dhrag Selection, got {type(selection).__name__}")
    return {
        "session_id": selection.session_id,
        "query": selection.query,
        "rewritten_query": selection.rewritten_query,
        "history": [_history_row(s) for s in selection.history],
        "context": selection.trace(),
    }


def _node_id(passage_id: str | None, text: str) -> str:
    if passage_id is not None:
        return passage_id
    return "dhrag-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


def selection_to_nodes(selection: Selection) -> list[NodeWithScore]:
    """The integrated context as LlamaIndex nodes, best first.

    Each node keeps the passage's id, text and metadata; its score is the integration weight
    and ``node.metadata["dhrag"]`` holds the item's trace (source ``"kb"``/``"history"``,
    weight, similarity, and for history items the turn and its history weight) plus the
    rewritten query. The trace key is excluded from the LLM and embedding views of the node.

    Example:
        >>> nodes = selection_to_nodes(rag.select("alice", "How long is it?"))  # doctest: +SKIP
        >>> nodes[0].score, nodes[0].node.metadata["dhrag"]["source"]  # doctest: +SKIP
    """
    if not isinstance(selection, Selection):
        raise TypeError(f"selection must be a dhrag Selection, got {type(selection).__name__}")
    out = []
    for item, row in zip(selection.context, selection.trace(), strict=True):
        p = item.passage
        meta: dict[str, Any] = dict(p.metadata)
        if p.title and "title" not in meta:
            meta["title"] = p.title
        meta[TRACE_KEY] = {**row, "rewritten_query": selection.rewritten_query}
        node = TextNode(
            id_=_node_id(p.id, p.text), text=p.text, metadata=meta,
            excluded_llm_metadata_keys=[TRACE_KEY], excluded_embed_metadata_keys=[TRACE_KEY],
        )
        out.append(NodeWithScore(node=node, score=item.weight))
    return out


def format_context(selection: Selection) -> str:
    """The context items as numbered blocks for a prompt: ``[1] title (source, weight)``;
    turns are counted from 1, as in ``dhrag chat``'s ``/trace``."""
    blocks = []
    for i, item in enumerate(selection.context, 1):
        origin = ("knowledge base" if item.source == "kb"
                  else f"shown at turn {item.turn.index + 1}" if item.turn is not None
                  else item.source)
        title = f" {item.passage.title}" if item.passage.title else ""
        blocks.append(f"[{i}]{title} ({origin}, weight {item.weight:.3f})\n{item.passage.text}")
    return "\n\n".join(blocks)


def message_text(message: ChatMessage) -> str:
    """The text of a chat message (its text blocks), ``""`` when it has none."""
    return message.content or ""


def turns_to_messages(turns: Sequence[Turn]) -> list[ChatMessage]:
    """Stored turns as user/assistant messages, in the given order (a blank response is left
    out)."""
    roles = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
    return [ChatMessage(role=roles[role], content=text) for role, text in exchanges(turns)]


def message_pairs(messages: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    """(user text, assistant text) pairs of a chat transcript, in order.

    A user message opens a pair; the assistant messages after it (until the next user message)
    form its answer, joined by newlines. System and tool messages, assistant messages before
    any user message and user messages without text are skipped; a final user message without
    answer gives an empty answer.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"messages must be a list of ChatMessage, got {type(messages).__name__}"
        )
    pairs: list[tuple[str, list[str]]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise TypeError(f"messages[{i}] must be a ChatMessage, got {type(m).__name__}")
        text = message_text(m)
        if m.role == MessageRole.USER and text.strip():
            pairs.append((text, []))
        elif m.role == MessageRole.ASSISTANT and pairs and text.strip():
            pairs[-1][1].append(text)
    return [(q, "\n".join(a)) for q, a in pairs]


def __getattr__(name: str) -> Any:
    return renamed_attribute(__name__, name, {"passage_from_node": "node_to_passage"}, globals())

"""Type translations: LangChain ``Document`` <-> dhrag ``Passage``, selections as documents
and messages, and plain-text formatting for prompts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from dhrag_core import Passage, SelectedTurn, Selection, Turn
from dhrag_core.transcript import exchanges, format_transcript, in_turn_order

__all__ = [
    "TRACE_KEY",
    "document_title",
    "document_to_passage",
    "documents_to_passages",
    "format_documents",
    "format_history",
    "history_messages",
    "selection_to_documents",
    "turns_to_messages",
]

#: Metadata key under which returned documents carry the DH-RAG trace.
TRACE_KEY = "dhrag"


def _json_safe(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata that a durable history store can serialise (non-JSON values become str)."""
    out: dict[str, Any] = json.loads(json.dumps(dict(metadata), default=str))
    return out


def document_title(doc: Document) -> str:
    """The document's title: ``metadata["title"]`` (where loaders and vector stores put it),
    else the title in the DH-RAG trace (``metadata["dhrag"]["title"]``, there for passages of
    a dhrag knowledge base); "" when neither is a non-empty string."""
    own = doc.metadata.get("title")
    if isinstance(own, str) and own:
        return own
    trace = doc.metadata.get(TRACE_KEY)
    traced = trace.get("title") if isinstance(trace, Mapping) else None
    return traced if isinstance(traced, str) else ""


def document_to_passage(doc: Document | str, score: float | None = None) -> Passage:
    """A LangChain ``Document`` (or plain text) as a dhrag ``Passage``.

    The id is the document's id, else ``metadata["_id"]`` (where ``langchain-qdrant`` puts
    the point id); the title is ``document_title``'s; the DH-RAG trace a
    ``DHRAGRetriever`` added is dropped, other metadata is kept (JSON-safe).

    Example:
        >>> document_to_passage(Document("The wall is long.", id="w1")).id
        'w1'
    """
    if isinstance(doc, str):
        return Passage(text=doc)
    if not isinstance(doc, Document):
        raise TypeError(f"documents must hold Document or str items, got {type(doc).__name__}")
    meta = {k: v for k, v in doc.metadata.items() if k != TRACE_KEY}
    doc_id = doc.id
    if doc_id is None and isinstance(meta.get("_id"), (str, int)):
        doc_id = str(meta["_id"])
    return Passage(
        text=doc.page_content, id=doc_id, title=document_title(doc),
        score=score, metadata=_json_safe(meta),
    )


def documents_to_passages(docs: Iterable[Document | str], name: str) -> list[Passage]:
    """``document_to_passage`` over a list; ``name`` is the argument named in errors."""
    if isinstance(docs, (str, Document)):
        raise TypeError(f"{name} must be a list of Document or str, not a single item")
    out = []
    for i, d in enumerate(docs):
        if not isinstance(d, (str, Document)):
            raise TypeError(f"{name}[{i}] must be a Document or str, got {type(d).__name__}")
        out.append(document_to_passage(d))
    return out


def selection_to_documents(selection: Selection) -> list[Document]:
    """The integrated context of a selection as documents, best first.

    Each document keeps its source metadata and adds ``metadata["dhrag"]``: the row of
    ``Selection.trace()`` (``source`` ``"kb"``/``"history"``, ``weight``, ``similarity``; for
    history items ``turn``, ``cluster``, ``cluster_label``, ``chain``, ``via`` ...), plus
    ``rank``, ``session_id``, ``rewritten_query`` and ``history_turns`` (the indices of the
    history turns DH-RAG selected for the query, best first).

    Example:
        ```python
        docs = selection_to_documents(rag.select("alice", "How long is it?"))
        docs[0].metadata["dhrag"]["source"]  # "kb" or "history"
        ```
    """
    docs = []
    turns = [s.turn.index for s in selection.history]
    for rank, (item, row) in enumerate(zip(selection.context, selection.trace(), strict=True)):
        trace = {**row, "rank": rank, "session_id": selection.session_id,
                 "rewritten_query": selection.rewritten_query, "history_turns": turns}
        p = item.passage
        docs.append(Document(page_content=p.text, id=p.id,
                             metadata={**p.metadata, TRACE_KEY: trace}))
    return docs


def format_documents(docs: Sequence[Document]) -> str:
    """Numbered passages for a prompt: ``[1] Title: text`` (the ``document_title`` when
    there is one).

    Example:
        >>> print(format_documents([Document("Made of stone.", metadata={"title": "Wall"})]))
        [1] Wall: Made of stone.
    """
    lines = []
    for i, d in enumerate(docs, 1):
        title = document_title(d)
        lines.append(f"[{i}] {title}: {d.page_content}" if title else f"[{i}] {d.page_content}")
    return "\n".join(lines)


def turns_to_messages(turns: Iterable[Turn]) -> list[BaseMessage]:
    """Each turn as a ``HumanMessage`` (its query) and an ``AIMessage`` (its response, when
    not blank)."""
    return [HumanMessage(text) if role == "user" else AIMessage(text)
            for role, text in exchanges(turns)]


def format_history(
    history: Sequence[SelectedTurn], *, human_prefix: str = "Human", ai_prefix: str = "AI"
) -> str:
    """Selected history turns as ``Human: ...`` / ``AI: ...`` lines, oldest first."""
    return format_transcript(history, user=human_prefix, assistant=ai_prefix)


def history_messages(history: Sequence[SelectedTurn]) -> list[BaseMessage]:
    """Selected history turns as messages, oldest first."""
    return turns_to_messages(in_turn_order(history))

"""LlamaIndex's usual test set-up, ``MockEmbedding``: one vector for every text.

DH-RAG then cannot tell turns apart by meaning: the adapter says so once, with what to use
instead (an embedder that tells texts apart is not warned about), and the near-duplicate rule
compares words instead of vectors, so every turn is kept.
"""

from __future__ import annotations

import warnings
from typing import Any
from unittest.mock import patch

from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode

from dhrag_core import HistoryDatabase
from llamaindex_dhrag import DHRAGChatEngine, LlamaIndexEmbedder

DOCS = {"wall": "The Great Wall of China is 21,196 km long.",
        "moon": "The Moon orbits the Earth at 384,402 km.",
        "pigs": "Guinea pigs sleep in burrows dug by other animals."}
QUESTIONS = ("Hello World!", "What is the capital of the moon?", "Where do guinea pigs sleep?")


def _mock_engine() -> DHRAGChatEngine:
    """The set-up of llama-index-core's own chat-engine tests, with our engine."""
    nodes = [TextNode(id_=i, text=t) for i, t in DOCS.items()]
    index = VectorStoreIndex(nodes=nodes, embed_model=MockEmbedding(embed_dim=8))
    return DHRAGChatEngine.from_defaults(index.as_retriever(), llm=MockLLM(), session_id="s")


def _same_vector_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "same vector" in str(w.message)]


def test_mock_embedding_is_warned_about_once_with_what_to_do() -> None:
    engine = _mock_engine()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for q in QUESTIONS:
            engine.chat(q)
    said = _same_vector_warnings(caught)
    assert len(said) == 1, said
    assert "MockEmbedding gives the same vector to different texts" in said[0]
    assert "merged" in said[0] and "HashingEmbedder" in said[0]


def test_an_embedder_that_tells_texts_apart_is_not_warned_about() -> None:
    def distinct(self: Any, text: str) -> list[float]:
        return [float(ord(c)) for c in (text + " " * 8)[:8]]

    with patch.object(MockEmbedding, "_get_text_embedding", distinct):
        db = HistoryDatabase(embedder=LlamaIndexEmbedder(MockEmbedding(embed_dim=8)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for q in QUESTIONS:
                db.add("s", q, "An answer to " + q)
    assert _same_vector_warnings(caught) == []
    assert db.size("s") == 3


def test_mock_embedding_keeps_every_turn() -> None:
    """Vectors that do not tell texts apart merge nothing: the words decide (``UpdateRule``)."""
    engine = _mock_engine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for q in QUESTIONS:
            engine.chat(q)
    assert [m.content for m in engine.chat_history][::2] == list(QUESTIONS)

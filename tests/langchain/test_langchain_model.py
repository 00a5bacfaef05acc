"""The adapter with the real all-MiniLM-L6-v2 weights (offline): a LangChain vector store
embedded by DH-RAG's MiniLM, a topic switch, an elliptical follow-up and a return."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import FOLLOW_UP, PIG_A, PIG_Q, WALL_A, WALL_Q, demo_documents

from dhrag_core import MiniLMEmbedder
from dhrag_core.app.demo import load_demo_kb
from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever


@pytest.mark.model
def test_minilm_conversation_through_a_langchain_vector_store() -> None:
    embedder = MiniLMEmbedder()
    embeddings = DHRAGEmbeddings(embedder)
    docs = demo_documents()
    # the demo ships MiniLM vectors of its passages: check a few against the model, then
    # let the store reuse them instead of encoding 251 passages on a small CPU
    kb = load_demo_kb(embedder)
    fresh = embedder.encode([p.text for p in kb.passages[:3]])
    np.testing.assert_allclose(fresh, kb.vectors[:3], atol=2e-3)
    embeddings.preload([p.text for p in kb.passages], kb.vectors)
    store = InMemoryVectorStore(embeddings)
    store.add_documents(docs)

    retriever = DHRAGRetriever.from_knowledge(store, k=4)
    assert retriever.engine.history.embedder is embedder  # one model, shared
    sid = {"configurable": {"session_id": "alice"}}

    def turn(question: str, answer: str) -> list[str]:
        found = retriever.invoke(question, config=sid)
        retriever.record("alice", question, answer)
        return [d.metadata["title"] for d in found]

    assert "Great Wall" in turn(WALL_Q, WALL_A)[0]
    follow = turn(FOLLOW_UP, "About 21,196 km.")
    # searched by vector (the store's own path): the core's ranking, the wall first
    assert "Great Wall" in follow[0] and follow.count("Great Wall of China") >= 2, follow
    assert turn(PIG_Q, PIG_A)[0] == "Guinea pig"
    pet = turn("Can I keep one as a pet?", "Yes, they are popular pets.")
    assert pet[0] == "Guinea pig", pet

    back = retriever.invoke("Who was the wall built to keep out?", config=sid)
    assert "Great Wall" in back[0].metadata["title"]

    cold = DHRAGRetriever(engine=retriever.engine).invoke(FOLLOW_UP, session_id="nobody")
    assert not all("Great Wall" in d.metadata["title"] for d in cold[:2])

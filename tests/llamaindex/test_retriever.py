"""DHRAGRetriever: DH-RAG's weighted context as nodes; recording turns; async retrieval."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.query_engine import RetrieverQueryEngine

from dhrag_core import Experiments, HashingEmbedder, Retrieval, Settings
from llamaindex_dhrag import DHRAGRetriever

WALL = "What is the Great Wall of China built out of?"


def _retriever(index: VectorStoreIndex, hashing: HashingEmbedder, **kw: Any) -> DHRAGRetriever:
    kw.setdefault("session_id", "alice")
    kw.setdefault("search", "text")  # expectations for the text path over the hashing embedder
    # the rewrite's vector, a light pull toward the history: see conftest
    kw.setdefault("settings", Settings(retrieval=Retrieval(follow_up_expansion=0.3),
                                       experiments=Experiments(rewrite_vector=True)))
    return DHRAGRetriever.from_defaults(index.as_retriever(similarity_top_k=5),
                                        embedder=hashing, **kw)


def test_retrieve_returns_weighted_traced_nodes(index: VectorStoreIndex,
                                                hashing: HashingEmbedder) -> None:
    r = _retriever(index, hashing, session_id="alice")
    nodes = r.retrieve(WALL)
    assert nodes[0].node.node_id == "wall-material"
    scores = [float(n.score or 0.0) for n in nodes]
    assert scores == sorted(scores, reverse=True) and 0.99 < sum(scores) <= 1 + 1e-6
    meta = nodes[0].node.metadata
    assert meta["title"] == "wall"  # the source node's metadata is kept
    assert meta["dhrag"]["source"] == "kb" and meta["dhrag"]["rewritten_query"] == WALL
    assert r.last_selection is not None and r.last_selection.query == WALL
    assert r.engine.history.size("alice") == 0  # retrieval alone stores nothing


def test_record_then_follow_up_uses_history(index: VectorStoreIndex,
                                            hashing: HashingEmbedder) -> None:
    r = _retriever(index, hashing)
    nodes = r.retrieve(WALL)
    result = r.record(r.session_id, WALL, "Stone, brick, tamped earth and wood.")
    assert [p.id for p in result.turn.passages] == [n.node.node_id for n in nodes]

    follow = r.retrieve("How long is it?")
    assert follow[0].node.node_id == "wall-length"
    dh = follow[0].node.metadata["dhrag"]
    assert "wall" in dh["rewritten_query"].lower()
    assert r.last_selection is not None
    assert [s.turn.query for s in r.last_selection.history] == [WALL]
    r.record(r.session_id, "How long is it?", "21,196 km.")
    assert r.last_selection is None  # recorded: nothing pending


def test_record_with_explicit_nodes_or_without_selection(index: VectorStoreIndex,
                                                         hashing: HashingEmbedder) -> None:
    r = _retriever(index, hashing)
    nodes = r.retrieve(WALL)
    turn = r.record("alice", "A different question?", "An answer.").turn  # no selection
    assert turn.passages == ()
    turn = r.record(r.session_id, WALL, "Stone.", nodes=nodes[:1]).turn
    assert [p.id for p in turn.passages] == ["wall-material"]


async def test_aretrieve_and_arecord(index: VectorStoreIndex, hashing: HashingEmbedder) -> None:
    r = _retriever(index, hashing)
    nodes = await r.aretrieve(WALL)
    assert nodes[0].node.node_id == "wall-material"
    await r.arecord(r.session_id, WALL, "Stone, brick, tamped earth and wood.")
    follow = await r.aretrieve("How long is it?")
    assert follow[0].node.node_id == "wall-length"


def test_inside_a_query_engine(index: VectorStoreIndex, hashing: HashingEmbedder,
                               llm: Any) -> None:
    r = _retriever(index, hashing, k=3)
    engine = RetrieverQueryEngine.from_args(r, llm=llm)
    first = engine.query(WALL)
    r.record(r.session_id, WALL, str(first), nodes=first.source_nodes)
    second = engine.query("How long is it?")
    assert len(second.source_nodes) == 3
    assert second.source_nodes[0].node.node_id == "wall-length"
    assert "21,196 km" in llm.prompts[-1]


def test_bad_arguments(index: VectorStoreIndex, hashing: HashingEmbedder) -> None:
    with pytest.raises(TypeError, match="engine must be"):
        DHRAGRetriever(index.as_retriever())  # type: ignore[arg-type]
    r = _retriever(index, hashing)
    with pytest.raises(ValueError, match="k must be"):
        DHRAGRetriever(r.engine, session_id="a", k=0)
    with pytest.raises(ValueError, match="session_id"):
        DHRAGRetriever(r.engine, session_id="")
    with pytest.raises(ValueError, match=r"no session id: pass DHRAGRetriever\(\.\.\., session"):
        DHRAGRetriever(r.engine)  # no silent shared "default" session
    with pytest.raises(ValueError, match="query"):
        r.retrieve("   ")

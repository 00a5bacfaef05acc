"""Bridges: retriever as knowledge base (by text or by vector), embeddings both ways, the LLM as
the core's LLM protocol for its LLMRewriter."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import NodeWithScore, TextNode

from dhrag_core import (
    DHRAG,
    LLM,
    Ablations,
    Experiments,
    HashingEmbedder,
    HistoryDatabase,
    LightRewriter,
    LLMRewriter,
    Retrieval,
    SelectedTurn,
    Settings,
)
from llamaindex_dhrag import (
    DHRAGEmbedding,
    LlamaIndexEmbedder,
    LlamaIndexLLM,
    RetrieverKnowledgeBase,
    VectorStoreKnowledgeBase,
    build_dhrag,
    node_to_passage,
)

# -- retriever as knowledge base -----------------------------------------------------------


def test_retriever_knowledge_base(index: VectorStoreIndex) -> None:
    kb = RetrieverKnowledgeBase(index.as_retriever(similarity_top_k=5))
    hits = kb.search("How long is the Great Wall of China?", k=3)
    assert len(hits) == 3
    assert hits[0].id == "wall-length"
    assert hits[0].text.startswith("The Great Wall of China, with all")  # no metadata text
    assert hits[0].title == "wall"
    assert hits[0].score is not None and hits[0].vector is None
    assert [p.score for p in hits] == sorted((p.score or 0.0 for p in hits), reverse=True)
    assert [p.id for p in asyncio.run(kb.asearch("guinea pigs sleep", k=1))] == ["pig-sleep"]
    with pytest.raises(TypeError, match="retriever must be"):
        RetrieverKnowledgeBase(index)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        kb.search("x", 0)


def test_node_to_passage_keeps_only_storable_metadata() -> None:
    node = TextNode(text="Body", id_="n1",
                    metadata={"file_name": "a.txt", "pages": [1, 2], "dhrag": {"x": 1}, "n": 3})
    p = node_to_passage(NodeWithScore(node=node, score=0.25))
    assert (p.id, p.text, p.title, p.score) == ("n1", "Body", "a.txt", 0.25)
    assert dict(p.metadata) == {"file_name": "a.txt", "n": 3}
    with pytest.raises(TypeError, match="NodeWithScore"):
        node_to_passage(node)  # type: ignore[arg-type]


# -- embeddings ------------------------------------------------------------------------------

TEXTS = ["The Great Wall of China", "guinea pigs sleep in burrows", ""]


class CountingEmbedding(BaseEmbedding):
    """A real BaseEmbedding with unnormalised outputs that counts its calls."""

    calls: int = 0

    def _vec(self, text: str) -> list[float]:
        self.calls += 1
        return [3.0 + len(text), 4.0, 0.0, 1.0]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)


def test_dhrag_embedding_round_trip(hashing: HashingEmbedder) -> None:
    model = DHRAGEmbedding(hashing)
    direct = hashing.encode(TEXTS)
    assert np.allclose(model.get_text_embedding_batch(TEXTS), direct, atol=1e-6)
    assert np.allclose(model.get_query_embedding(TEXTS[0]), direct[0], atol=1e-6)
    assert np.allclose(asyncio.run(model.aget_query_embedding(TEXTS[1])), direct[1], atol=1e-6)
    back = LlamaIndexEmbedder(model)
    assert back.dimension == hashing.dimension
    assert np.allclose(back.encode(TEXTS), direct, atol=1e-6)
    assert model.embedder is hashing and model.model_name == "dhrag:HashingEmbedder"


def test_dhrag_embedding_defaults_to_minilm_without_loading_it() -> None:
    model = DHRAGEmbedding()
    assert model.model_name == "dhrag:NumpyMiniLMEmbedder"  # the torch-free default
    assert model.embedder._model is None  # type: ignore[attr-defined]  # loaded on first use


def test_llamaindex_embedder_probes_lazily_and_normalises() -> None:
    model = CountingEmbedding()
    emb = LlamaIndexEmbedder(model)
    assert model.calls == 0  # nothing at construction
    assert emb.dimension == 4 and model.calls == 1
    assert emb.dimension == 4 and model.calls == 1  # probed once
    out = emb.encode(["a", "bb"])
    assert out.dtype == np.float32 and out.shape == (2, 4)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0)
    assert emb.encode([]).shape == (0, 4)
    given = LlamaIndexEmbedder(CountingEmbedding(), dimension=4)
    assert given.dimension == 4 and given.embed_model.calls == 0  # type: ignore[attr-defined]


def test_llamaindex_embedder_rejects_bad_input() -> None:
    with pytest.raises(TypeError, match="embed_model"):
        LlamaIndexEmbedder(HashingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimension"):
        LlamaIndexEmbedder(CountingEmbedding(), dimension=0)
    emb = LlamaIndexEmbedder(CountingEmbedding(), dimension=8)
    with pytest.raises(TypeError, match="not one str"):
        emb.encode("text")
    with pytest.raises(ValueError, match="expected"):
        emb.encode(["a"])  # the model gives 4 values, not 8
    with pytest.raises(TypeError, match="embedder must"):
        DHRAGEmbedding("minilm")  # type: ignore[arg-type]


def test_llamaindex_embedding_drives_dhrag(index: VectorStoreIndex,
                                           embed_model: DHRAGEmbedding) -> None:
    rag = build_dhrag(index.as_retriever(similarity_top_k=5),  # text path: another embedder
                      embedder=LlamaIndexEmbedder(embed_model),
                      # bag-of-words fake (conftest): a light pull, so the rewritten
                      # question's own words rank
                      settings=Settings(retrieval=Retrieval(follow_up_expansion=0.3),
                                        experiments=Experiments(rewrite_vector=True)))
    rag.record("alice", "What is the Great Wall of China built out of?", "Stone and brick.")
    sel = rag.select("alice", "How long is it?")
    assert sel.context[0].passage.id == "wall-length"


# -- LLM rewriter ----------------------------------------------------------------------------


def _selected(hashing: HashingEmbedder) -> list[SelectedTurn]:
    # selection over the whole session (not inside one thread): both turns reach the prompt
    db = HistoryDatabase(embedder=hashing, settings=Settings(ablations=Ablations(use_chains=False)))
    db.add("s",
           "What is the Great Wall of China built out of?",
           "Stone, brick, tamped earth and wood.")
    db.add("s", "Where do guinea pigs sleep?", "In burrows.")
    return db.select("s", "How long is it?")


@pytest.mark.parametrize(("raw", "clean"), [
    ("How long is the Great Wall of China?", "How long is the Great Wall of China?"),
    ('Standalone question: "How long is the Great Wall of China?"',
     "How long is the Great Wall of China?"),
    ("  \n**Rewritten query:** How long is the Great Wall?\nBecause the user asked...",
     "How long is the Great Wall?"),
    ("\u201cHow long is the Great Wall?\u201d", "How long is the Great Wall?"),
    ("Question - 'How long is the wall?'", "How long is the wall?"),
])
def test_llm_rewriter_cleans_the_answer(make_llm: Any, hashing: HashingEmbedder, raw: str,
                                        clean: str) -> None:
    llm = make_llm(answer_fn=lambda prompt: raw)
    history = _selected(hashing)
    assert isinstance(LlamaIndexLLM(llm), LLM)
    out = LLMRewriter(LlamaIndexLLM(llm)).rewrite("How long is it?", history)
    assert out.text == clean
    prompt = llm.prompts[-1]
    # both sides of the selected turns, oldest first, then the follow-up
    assert prompt.index("User: What is the Great Wall") < prompt.index("User: Where do guinea")
    assert "Assistant: Stone, brick, tamped earth and wood." in prompt
    assert "Assistant: In burrows." in prompt
    assert "Last question: How long is it?" in prompt


@pytest.mark.parametrize("answer", ["", "Standalone question:", "x" * 2000])
def test_llm_rewriter_falls_back_on_unusable_answers(make_llm: Any, hashing: HashingEmbedder,
                                                     answer: str) -> None:
    history = _selected(hashing)
    llm = LlamaIndexLLM(make_llm(answer_fn=lambda prompt: answer))
    out = LLMRewriter(llm).rewrite("How long?", history)
    assert out == LightRewriter().rewrite("How long?", history)


def test_llm_rewriter_falls_back_when_the_llm_raises(make_llm: Any, hashing: HashingEmbedder,
                                                     caplog: Any) -> None:
    history = _selected(hashing)
    out = LLMRewriter(LlamaIndexLLM(make_llm(fail=True))).rewrite("How long is it?", history)
    expected = LightRewriter().rewrite("How long is it?", history)
    assert out == expected and out.text != "How long is it?"
    assert "RuntimeError: scripted LLM failure" in caplog.text


def test_llm_rewriter_in_dhrag_survives_a_failing_llm(make_llm: Any, index: VectorStoreIndex,
                                                      hashing: HashingEmbedder) -> None:
    rag = build_dhrag(index.as_retriever(similarity_top_k=5), embedder=hashing,
                      rewriter="llm", llm=make_llm(fail=True), search="text",
                      # bag-of-words fake (conftest): a light pull, so the rewritten
                      # question's own words rank
                      settings=Settings(retrieval=Retrieval(follow_up_expansion=0.3),
                                        experiments=Experiments(rewrite_vector=True)))
    rag.record("a", "What is the Great Wall of China built out of?", "Stone.")
    sel = rag.select("a", "How long is it?")
    assert "wall" in sel.rewritten_query.lower()
    assert sel.context[0].passage.id == "wall-length"


def test_llm_arguments_and_build_dhrag_uses_the_cores_rewriter(
    make_llm: Any, index: VectorStoreIndex, hashing: HashingEmbedder
) -> None:
    with pytest.raises(TypeError, match="llm must be"):
        LlamaIndexLLM("gpt")  # type: ignore[arg-type]
    rag = build_dhrag(index.as_retriever(), embedder=hashing, rewriter="llm", llm=make_llm())
    assert isinstance(rag.rewriter, LLMRewriter) and isinstance(rag.rewriter.llm, LlamaIndexLLM)


def test_build_dhrag_arguments(index: VectorStoreIndex, hashing: HashingEmbedder,
                               embed_model: DHRAGEmbedding) -> None:
    retriever = index.as_retriever()
    assert isinstance(build_dhrag(retriever, embedder=hashing), DHRAG)
    # a DHRAGEmbedding is unwrapped, not bridged back and forth
    assert build_dhrag(retriever, embedder=embed_model).history.embedder is hashing
    with pytest.raises(ValueError, match='rewriter="llm" needs llm'):
        build_dhrag(retriever, embedder=hashing, rewriter="llm")
    with pytest.raises(TypeError, match="rewriter must be"):
        build_dhrag(retriever, embedder=hashing, rewriter="heavy")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retriever must be"):
        build_dhrag(index, embedder=hashing)  # type: ignore[arg-type]


# -- search by vector (issue 17) -------------------------------------------------------------


def test_vector_index_is_searched_by_vector_with_its_own_embedding(
    index: VectorStoreIndex, hashing: HashingEmbedder, embed_model: DHRAGEmbedding
) -> None:
    retriever = index.as_retriever(similarity_top_k=5)
    seen: list[tuple[str, Any]] = []
    sync, asyn = retriever._retrieve, retriever._aretrieve

    def spy(bundle: Any) -> Any:
        seen.append(("sync", bundle))
        return sync(bundle)

    async def aspy(query_bundle: Any) -> Any:
        seen.append(("async", query_bundle))
        return await asyn(query_bundle)

    retriever._retrieve = spy  # type: ignore[method-assign]
    retriever._aretrieve = aspy  # type: ignore[method-assign]
    rag = build_dhrag(retriever)  # no embedder: the index's own model, not MiniLM
    assert isinstance(rag.knowledge, VectorStoreKnowledgeBase)
    assert rag.history.embedder is hashing
    rag.record("a", "What is the Great Wall of China built out of?", "Stone.")
    sel = rag.select("a", "How long is it?")
    ((how, bundle),) = seen
    assert how == "sync" and bundle.query_str == ""  # searched by the expanded vector
    np.testing.assert_allclose(bundle.embedding, sel.search_vector, atol=1e-5)
    assert sel.history and not np.allclose(sel.search_vector, sel.query_vector)
    expected = {n.node.node_id for n in sync(bundle)}  # the index's hits for that vector
    assert {c.passage.id for c in sel.context if c.source == "kb"} <= expected

    async def main() -> Any:
        return await rag.aselect("a", "How long is it?")

    again = asyncio.run(main())
    assert seen[-1][0] == "async" and seen[-1][1].embedding is not None
    assert [c.passage.id for c in again.context] == [c.passage.id for c in sel.context]


def test_text_path_for_another_embedder_or_other_retrievers(
    index: VectorStoreIndex, hashing: HashingEmbedder
) -> None:
    other = build_dhrag(index.as_retriever(), embedder=HashingEmbedder(64))
    assert type(other.knowledge) is RetrieverKnowledgeBase
    plain = RetrieverKnowledgeBase(index.as_retriever())
    with pytest.raises(TypeError, match="VectorIndexRetriever"):
        VectorStoreKnowledgeBase(plain)  # type: ignore[arg-type]
    same = build_dhrag(index.as_retriever(), embedder=hashing)  # the index's model, unwrapped
    assert isinstance(same.knowledge, VectorStoreKnowledgeBase)
    hybrid = build_dhrag(index.as_retriever(vector_store_query_mode="hybrid"), embedder=hashing)
    assert type(hybrid.knowledge) is RetrieverKnowledgeBase

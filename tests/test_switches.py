"""Everyday topic switches with the real MiniLM: a cue names a new subject, a pronoun follows
it, the user comes back. The issue's conversation through the core, the LangChain path of the
README (k=4 and the default k) and the LlamaIndex chat engine; and one test per scenario
pattern on the same small knowledge base (20 landmark facts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dhrag_core import DHRAG, Ablations, FaissKnowledgeBase, MiniLMEmbedder, Passage, Settings

pytestmark = pytest.mark.model

PASSAGES = [Passage(p["text"], id=p["id"]) for p in json.loads(
    (Path(__file__).parent / "fixtures" / "landmarks.json").read_text("utf-8"))["passages"]]
KHUFU = "lm06"
EIFFEL_HEIGHT = "lm02"
PYRAMID_HEIGHT = "lm07"
TURNS = [
    ("Tell me about the Eiffel Tower.", "A wrought-iron lattice tower in Paris."),
    ("When was it built?", "It was built from 1887 to 1889 for the World's Fair."),
    ("And what about the Great Pyramid of Giza?", "The largest Egyptian pyramid, near Cairo."),
    ("Who was it built for?", "It was built as a tomb for the pharaoh Khufu."),
    ("Back to the Eiffel Tower: how big is it?", "It is 330 metres tall."),
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def _engine(minilm: MiniLMEmbedder, settings: Settings | None = None) -> DHRAG:
    return DHRAG(FaissKnowledgeBase(PASSAGES, minilm), settings=settings)


def _talk(rag: DHRAG, turns: list[tuple[str, str]], k: int | None = None) -> list[Any]:
    out = []
    for q, a in turns:
        sel = rag.select("s", q, k)
        rag.record("s", q, a, selection=sel)
        out.append(sel)
    return out


@pytest.mark.parametrize("k", [4, None])
def test_core_follows_the_subject_the_user_just_named(minilm: MiniLMEmbedder,
                                                      k: int | None) -> None:
    sels = _talk(_engine(minilm), TURNS, k)
    pyramid = sels[3]
    assert "pyramid" in pyramid.rewritten_query.lower()
    assert "eiffel" not in pyramid.rewritten_query.lower()
    assert pyramid.history[0].turn.query == TURNS[2][0]  # the turn that named it
    assert KHUFU in [p.id for p in pyramid.passages[:4]]
    back = sels[4]
    assert back.passages[0].id == EIFFEL_HEIGHT
    assert back.history[0].turn.query == TURNS[0][0]


def test_without_cues_the_older_wording_wins(minilm: MiniLMEmbedder) -> None:
    """The ablation switch is not inert: without reading the words, "Who was it built for?"
    follows the thread of "When was it built?" (the Eiffel Tower)."""
    sels = _talk(_engine(minilm, Settings(ablations=Ablations(use_cues=False))), TURNS[:4])
    assert "eiffel" in sels[3].rewritten_query.lower()
    assert sels[3].history[0].turn.query == TURNS[1][0]


@pytest.mark.parametrize("k", [4, None])
def test_langchain_readme_path(minilm: MiniLMEmbedder, k: int | None) -> None:
    from langchain_core.documents import Document
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_dhrag import DHRAGEmbeddings, DHRAGRetriever, format_documents, with_dhrag_memory

    store = InMemoryVectorStore(DHRAGEmbeddings(minilm))
    store.add_documents([Document(p.text, id=p.id) for p in PASSAGES])
    retriever = (DHRAGRetriever.from_knowledge(store, k=k) if k is not None
                 else DHRAGRetriever.from_knowledge(store))
    seen: list[list[Document]] = []

    def keep(docs: list[Document]) -> list[Document]:
        seen.append(docs)
        return docs

    prompt = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{question}")])
    llm = FakeListChatModel(responses=[a for _, a in TURNS])
    rag_chain = ({"context": retriever | RunnableLambda(keep) | format_documents,
                  "question": RunnablePassthrough()} | prompt | llm | StrOutputParser())
    chat = with_dhrag_memory(rag_chain, retriever)
    cfg: Any = {"configurable": {"session_id": "alice"}}
    for q, _ in TURNS:
        chat.invoke(q, cfg)
    docs = seen[3]
    assert "pyramid" in docs[0].metadata["dhrag"]["rewritten_query"].lower()
    assert KHUFU in [d.id for d in docs[:4]]
    assert seen[4][0].id == EIFFEL_HEIGHT
    assert len(retriever.engine.history.turns("alice")) == len(TURNS)


def test_llamaindex_chat_engine(minilm: MiniLMEmbedder) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.llms import MockLLM

    from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

    index = VectorStoreIndex.from_documents(
        [Document(text=p.text, id_=p.id) for p in PASSAGES],
        embed_model=DHRAGEmbedding(minilm),
    )
    engine = DHRAGChatEngine.from_defaults(index.as_retriever(similarity_top_k=20),
                                           MockLLM(max_tokens=8), session_id="bob")
    replies = [engine.chat(q) for q, _ in TURNS]
    trace = replies[3].sources[0].raw_output
    assert "pyramid" in trace["rewritten_query"].lower()
    text = {p.id: p.text for p in PASSAGES}
    assert text[KHUFU] in [n.node.get_content() for n in replies[3].source_nodes[:4]]
    assert replies[4].source_nodes[0].node.get_content() == text[EIFFEL_HEIGHT]


def _ranked(sel: Any) -> list[str]:
    return [p.id for p in sel.passages]


def test_pattern_comparison(minilm: MiniLMEmbedder) -> None:
    sels = _talk(_engine(minilm), [("How tall is the Eiffel Tower?", "330 metres."),
                                   ("And what about the Great Pyramid?", "About 146 metres."),
                                   ("Which one is taller?", "The Eiffel Tower.")], 4)
    assert set(_ranked(sels[2])[:2]) == {EIFFEL_HEIGHT, PYRAMID_HEIGHT}


def test_pattern_drill_down(minilm: MiniLMEmbedder) -> None:
    kb = FaissKnowledgeBase(PASSAGES, minilm)
    sels = _talk(DHRAG(kb), [("When was the Statue of Liberty dedicated?", "In 1886."),
                             ("Who gave it?", "The people of France."),
                             ("Where does it stand?", "On Liberty Island.")], 4)
    assert "statue of liberty" in sels[2].rewritten_query.lower()
    alone = [p.id for p in kb.search("Where does it stand?", 20)]
    assert _ranked(sels[2]).index("lm13") < alone.index("lm13")  # "on Liberty Island"


def test_pattern_unrelated_fully_specified(minilm: MiniLMEmbedder) -> None:
    """A question that says everything keeps its own ranking; its follow-up then uses it."""
    kb = FaissKnowledgeBase(PASSAGES, minilm)
    specified = "What is Machu Picchu, the Inca citadel in Peru?"
    sels = _talk(DHRAG(kb), [("Tell me about the Colosseum.", "An amphitheatre in Rome."),
                             ("How many spectators could it hold?", "50,000 to 80,000."),
                             (specified, "A 15th-century Inca citadel."),
                             ("When was it built?", "In the 15th century.")], 4)
    assert _ranked(sels[2]) == [p.id for p in kb.search(specified, 4)]
    assert "machu picchu" in sels[3].rewritten_query.lower()
    assert "lm18" in _ranked(sels[3])


def test_pattern_unnamed_return(minilm: MiniLMEmbedder) -> None:
    """Back to the first subject without naming it: only the Taj Mahal has an emperor."""
    sels = _talk(_engine(minilm), [
        ("Who commissioned the Taj Mahal?", "The Mughal emperor Shah Jahan, in 1632."),
        ("What is it made of?", "Ivory-white marble."),
        ("What is Stonehenge?", "A prehistoric monument in England."),
        ("Which plain is it on?", "Salisbury Plain."),
        ("Who was buried in the emperor's mausoleum?", "Shah Jahan's wife."),
    ], 4)
    assert _ranked(sels[4])[0] == "lm16"
    assert sels[4].history[0].turn.query == "Who commissioned the Taj Mahal?"

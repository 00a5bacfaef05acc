"""The two adapters name the same things the same way; each old name still works for one
release, with a ``DeprecationWarning`` naming the new one (issue 57 item 5)."""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from langchain_core.documents import Document
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeWithScore, TextNode

import langchain_dhrag
import langchain_dhrag.convert
import langchain_dhrag.knowledge
import langchain_dhrag.llm
import llamaindex_dhrag
import llamaindex_dhrag.convert
import llamaindex_dhrag.knowledge
from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder

ADAPTERS = [langchain_dhrag, llamaindex_dhrag]

#: (module, old name, new name): every renamed attribute, where it is defined and re-exported.
RENAMED = [
    (langchain_dhrag, "LangChainKnowledgeBase", "RetrieverKnowledgeBase"),
    (langchain_dhrag, "LangChainVectorKnowledgeBase", "VectorStoreKnowledgeBase"),
    (langchain_dhrag, "ChatModelLLM", "LangChainLLM"),
    (langchain_dhrag.knowledge, "LangChainKnowledgeBase", "RetrieverKnowledgeBase"),
    (langchain_dhrag.knowledge, "LangChainVectorKnowledgeBase", "VectorStoreKnowledgeBase"),
    (langchain_dhrag.llm, "ChatModelLLM", "LangChainLLM"),
    (llamaindex_dhrag, "VectorIndexKnowledgeBase", "VectorStoreKnowledgeBase"),
    (llamaindex_dhrag, "passage_from_node", "node_to_passage"),
    (llamaindex_dhrag.knowledge, "VectorIndexKnowledgeBase", "VectorStoreKnowledgeBase"),
    (llamaindex_dhrag.convert, "passage_from_node", "node_to_passage"),
]


def _engine() -> DHRAG:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase(["The Great Wall is built of stone.", "It is 21,196 km long."], emb)
    return DHRAG(kb, embedder=emb)


@pytest.fixture
def engine() -> Iterator[DHRAG]:
    rag = _engine()
    yield rag
    rag.close()


@pytest.fixture
def no_warnings() -> Iterator[None]:
    """New names must not warn: any ``DeprecationWarning`` fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        yield


# -- old names ------------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "old", "new"), RENAMED,
                         ids=[f"{m.__name__}.{old}" for m, old, _ in RENAMED])
def test_old_name_warns_and_is_the_new_object(module: ModuleType, old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated.*use .*\b{new}$"):
        value = getattr(module, old)
    assert value is getattr(module, new)


def test_old_names_work_in_from_imports() -> None:
    with pytest.warns(DeprecationWarning, match="RetrieverKnowledgeBase"):
        from langchain_dhrag import LangChainKnowledgeBase
    with pytest.warns(DeprecationWarning, match="VectorStoreKnowledgeBase"):
        from llamaindex_dhrag.knowledge import VectorIndexKnowledgeBase
    assert LangChainKnowledgeBase is langchain_dhrag.RetrieverKnowledgeBase
    assert VectorIndexKnowledgeBase is llamaindex_dhrag.VectorStoreKnowledgeBase


@pytest.mark.parametrize("module", [*ADAPTERS, langchain_dhrag.knowledge, llamaindex_dhrag.convert])
def test_unknown_names_still_raise(module: ModuleType) -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        module.NoSuchThing  # noqa: B018


def test_documents_module_is_a_deprecated_alias_of_convert() -> None:
    sys.modules.pop("langchain_dhrag.documents", None)
    with pytest.warns(DeprecationWarning, match=r"langchain_dhrag\.documents is deprecated.*"
                                                r"langchain_dhrag\.convert"):
        documents = importlib.import_module("langchain_dhrag.documents")
    convert = langchain_dhrag.convert
    assert documents.__all__ == convert.__all__
    for name in convert.__all__:
        assert getattr(documents, name) is getattr(convert, name), name


def test_the_package_imports_no_deprecated_module() -> None:
    import subprocess

    code = ("import sys, warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
            "import langchain_dhrag, llamaindex_dhrag\n"
            "print('langchain_dhrag.documents' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("module", ADAPTERS, ids=lambda m: m.__name__)
def test_new_names_are_public_and_old_ones_are_not(module: ModuleType) -> None:
    public = set(module.__all__)
    olds = {old for m, old, _ in RENAMED if m is module}
    news = {new for m, _, new in RENAMED if m is module}
    assert olds and news <= public
    assert not olds & public
    assert not olds & set(vars(module))  # reached only through the warning __getattr__


# -- the same names in both adapters --------------------------------------------------------


def test_both_adapters_name_the_shared_concepts_alike() -> None:
    shared = {"DHRAGRetriever", "RetrieverKnowledgeBase", "VectorStoreKnowledgeBase"}
    for module in ADAPTERS:
        assert shared <= set(module.__all__), module.__name__
        assert issubclass(module.VectorStoreKnowledgeBase, module.RetrieverKnowledgeBase)
    # one LLM bridge each, named after its framework
    assert {"LangChainLLM", "LlamaIndexLLM"} <= set(langchain_dhrag.__all__) | set(
        llamaindex_dhrag.__all__)
    assert "LangChainLLM" in langchain_dhrag.__all__
    assert "LlamaIndexLLM" in llamaindex_dhrag.__all__


def test_both_adapters_translate_in_a_convert_module() -> None:
    lc = importlib.import_module("langchain_dhrag.convert")
    li = importlib.import_module("llamaindex_dhrag.convert")
    for module in (lc, li):
        assert {"TRACE_KEY", "turns_to_messages"} <= set(module.__all__), module.__name__
        to_passage = [n for n in module.__all__ if n.endswith("_to_passage")]
        from_selection = [n for n in module.__all__ if n.startswith("selection_to_")]
        assert len(to_passage) == 1 and len(from_selection) == 1, module.__name__
        assert not [n for n in module.__all__ if "_from_" in n], module.__name__  # X_to_Y
    assert lc.TRACE_KEY == li.TRACE_KEY
    assert lc.document_to_passage(Document("Stone.", id="w")).id == "w"
    node = NodeWithScore(node=TextNode(text="Stone.", id_="w"), score=1.0)
    assert li.node_to_passage(node).id == "w"


def _positional(fn: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "self"]


def _keyword_only(fn: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY]


@pytest.mark.parametrize("method", ["record", "arecord"])
def test_record_has_one_shape(method: str) -> None:
    lc = getattr(langchain_dhrag.DHRAGRetriever, method)
    li = getattr(llamaindex_dhrag.DHRAGRetriever, method)
    assert _positional(lc) == _positional(li) == ["session_id", "query", "answer"]
    assert _keyword_only(lc) == ["documents"] and _keyword_only(li) == ["nodes"]
    core = getattr(DHRAG, method)  # the core's: (session_id, query, response, *, passages=...)
    assert _positional(core)[:2] == ["session_id", "query"] and len(_positional(core)) == 3
    assert "passages" in _keyword_only(core)


# -- .engine, rag= and record(query, answer) ------------------------------------------------


def test_every_adapter_object_holds_its_engine_at_engine(engine: DHRAG,
                                                          no_warnings: None) -> None:
    from langchain_core.runnables import RunnableLambda

    objects: list[Any] = [
        langchain_dhrag.DHRAGRetriever(engine=engine, session_id="a"),
        langchain_dhrag.DHRAGMemory(engine=engine, session_id="a"),
        langchain_dhrag.DHRAGChatMessageHistory(engine, "a"),
        langchain_dhrag.DHRAGMemoryRunnable(RunnableLambda(lambda x: x), engine),
        llamaindex_dhrag.DHRAGRetriever(engine, session_id="a"),
        llamaindex_dhrag.DHRAGRetriever(engine=engine, session_id="a"),
        llamaindex_dhrag.DHRAGChatEngine(engine, MockLLM()),
        llamaindex_dhrag.DHRAGChatEngine(engine=engine, llm=MockLLM()),
    ]
    for obj in objects:
        assert obj.engine is engine, type(obj).__name__


def test_llamaindex_rag_is_a_deprecated_alias_of_engine(engine: DHRAG) -> None:
    retriever = llamaindex_dhrag.DHRAGRetriever(engine, session_id="a")
    chat = llamaindex_dhrag.DHRAGChatEngine(engine, MockLLM())
    with pytest.warns(DeprecationWarning, match=r"DHRAGRetriever\.rag .*DHRAGRetriever\.engine"):
        assert retriever.rag is engine
    with pytest.warns(DeprecationWarning, match=r"DHRAGChatEngine\.rag .*DHRAGChatEngine\.engine"):
        assert chat.rag is engine


def test_llamaindex_rag_keyword_is_deprecated(engine: DHRAG) -> None:
    with pytest.warns(DeprecationWarning, match=r"DHRAGRetriever\(engine=\.\.\.\)"):
        retriever = llamaindex_dhrag.DHRAGRetriever(rag=engine, session_id="a")
    with pytest.warns(DeprecationWarning, match=r"DHRAGChatEngine\(engine=\.\.\.\)"):
        chat = llamaindex_dhrag.DHRAGChatEngine(rag=engine, llm=MockLLM())
    assert retriever.engine is engine and chat.engine is engine
    with pytest.raises(TypeError, match="engine= only"):
        llamaindex_dhrag.DHRAGRetriever(engine, rag=engine, session_id="a")
    with pytest.raises(TypeError, match=r"engine must be a dhrag_core\.DHRAG"):
        llamaindex_dhrag.DHRAGRetriever(session_id="a")
    with pytest.raises(TypeError, match="llm must be"):
        llamaindex_dhrag.DHRAGChatEngine(engine)


def test_llamaindex_record_takes_the_session_first(engine: DHRAG, no_warnings: None) -> None:
    retriever = llamaindex_dhrag.DHRAGRetriever(engine, session_id="alice")
    nodes = retriever.retrieve("What is the wall built of?")
    turn = retriever.record("alice", "What is the wall built of?", "Stone.").turn
    assert (turn.session_id, turn.query, turn.response) == (
        "alice", "What is the wall built of?", "Stone.")
    assert [p.id for p in turn.passages] == [n.node.node_id for n in nodes]  # the pending ones
    other = retriever.record("bob", "How long?", "21,196 km.", nodes=nodes[:1]).turn
    assert other.session_id == "bob" and len(other.passages) == 1
    assert engine.history.size("alice") == 1 and engine.history.size("bob") == 1


async def test_llamaindex_arecord_takes_the_session_first(engine: DHRAG,
                                                          no_warnings: None) -> None:
    retriever = llamaindex_dhrag.DHRAGRetriever(engine, session_id="alice")
    result = await retriever.arecord("bob", "How long?", "21,196 km.")
    assert result.turn.session_id == "bob"


@pytest.mark.parametrize("call", [
    lambda r: r.record("How long?", "21,196 km."),
    lambda r: r.record("How long?", answer="21,196 km."),
    lambda r: r.record(query="How long?", answer="21,196 km."),
], ids=["positional", "answer-keyword", "keywords"])
def test_llamaindex_record_old_form_warns_and_uses_its_session(
    engine: DHRAG, call: Callable[[Any], Any]
) -> None:
    retriever = llamaindex_dhrag.DHRAGRetriever(engine, session_id="alice")
    with pytest.warns(DeprecationWarning, match=r"record\(session_id, query, answer\)"):
        turn = call(retriever).turn
    assert (turn.session_id, turn.query, turn.response) == ("alice", "How long?", "21,196 km.")


async def test_llamaindex_arecord_old_form_warns(engine: DHRAG) -> None:
    retriever = llamaindex_dhrag.DHRAGRetriever(engine, session_id="alice")
    with pytest.warns(DeprecationWarning, match=r"record\(session_id, query, answer\)"):
        result = await retriever.arecord("How long?", "21,196 km.")
    assert result.turn.session_id == "alice" and result.turn.query == "How long?"


def test_llamaindex_record_refuses_what_is_not_a_turn(engine: DHRAG) -> None:
    retriever = llamaindex_dhrag.DHRAGRetriever(engine, session_id="alice")
    with pytest.raises(TypeError, match="session_id, query and answer"):
        retriever.record("How long?")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="query must be a str"):
        retriever.record("alice", None, "Stone.")  # type: ignore[call-overload]
    assert engine.history.size("alice") == 0


# -- the core: HistoryDatabase.add and DHRAG.record take the same shape ---------------------

def test_the_core_add_takes_records_shape_and_the_former_one_warns() -> None:
    import warnings

    from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder, HistoryDatabase

    emb = HashingEmbedder()
    db = HistoryDatabase(embedder=emb)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = db.add("s", "How long is the wall?", "21,196 km.", passages=["The wall is long."])
    with pytest.warns(DeprecationWarning, match="add\\(session_id, query, answer"):
        old = db.add("t", "How long is the wall?", ["The wall is long."], "21,196 km.")
    with pytest.warns(DeprecationWarning, match="response="):
        named = db.add("u", "How long is the wall?", response="21,196 km.")
    for result in (new, old):
        assert result.turn.response == "21,196 km."
        assert [p.text for p in result.turn.passages] == ["The wall is long."]
    assert named.turn.response == "21,196 km." and not named.turn.passages
    with pytest.raises(TypeError, match="answer must be a str"):
        db.add("s", "q", 5)  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="both"):
        db.add("s", "q", ["p"], "a", passages=["p"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="answer must be a str"):  # passages= beside it
        db.add("s", "q", ["not an answer"], passages=["p"])  # type: ignore[arg-type]
    engine = DHRAG(FaissKnowledgeBase(["The wall is long."], emb), embedder=emb)
    with pytest.warns(DeprecationWarning, match="record\\(response=\\)"):
        engine.record("s", "How long?", response="Long.")
    with pytest.raises(TypeError, match="answer must be a str"):
        engine.record("s", "How long?")
    assert [p.name for p in inspect.signature(HistoryDatabase.add).parameters.values()][1:4] \
        == [p.name for p in inspect.signature(DHRAG.record).parameters.values()][1:4] \
        == ["session_id", "query", "answer"]

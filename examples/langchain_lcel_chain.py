"""An LCEL RAG chain with DH-RAG conversational memory added in one call (offline by default).

    python examples/langchain_lcel_chain.py

The knowledge base is a LangChain ``InMemoryVectorStore`` of the 251 demo passages (real
Wikipedia text), embedded by DH-RAG's offline all-MiniLM-L6-v2 through ``DHRAGEmbeddings``.
``DHRAGRetriever`` searches the store by vector, with the question moved toward the history
turns DH-RAG selects, so an elliptical follow-up ("How long is it?") retrieves passages about
the right wall. ``with_dhrag_memory(chain, retriever)`` records each answer as a turn of the
session named in the config -- for ``invoke``, ``ainvoke``, ``batch`` and ``stream``.

The chat model is scripted (no key, no network). To use a real OpenAI-compatible model,
install ``langchain-openai`` and set ``OPENAI_API_KEY`` (and ``OPENAI_BASE_URL``,
``DHRAG_MODEL`` as needed); the model then also rewrites the follow-up questions.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from langchain_core.language_models import BaseChatModel, FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import (
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
)
from langchain_core.vectorstores import InMemoryVectorStore

from dhrag_core import NumpyMiniLMEmbedder
from dhrag_core.app.demo import DEMO_TURNS, load_demo_kb
from langchain_dhrag import (
    DHRAGEmbeddings,
    DHRAGMemoryRunnable,
    DHRAGRetriever,
    format_documents,
    with_dhrag_memory,
)

SESSION = "alice"

#: Answers of the scripted model, one per question of ``DEMO_TURNS``.
SCRIPTED_ANSWERS = [
    "Stone, brick, tamped earth, wood and other materials.",
    "All its branches together measure about 21,196 km.",
    "In the wild they shelter in burrows that other animals dug, or in crevices.",
    "Yes: guinea pigs are popular, gentle pets that need company and space.",
    "Nomadic peoples of the Eurasian Steppe, such as the Xiongnu and later the Mongols.",
    "On 9 November 1989, when the border crossings opened.",
    "Estimates range from about 140 to over 200 people.",
    "Probably for their squeal and stout body; they are rodents, not pigs.",
]

PROMPT = ChatPromptTemplate.from_messages([
    ("system",
     "Answer the user's question in one or two sentences, using only these passages:\n\n"
     "{context}"),
    ("human", "{question}\n\n(The question read with the conversation: {standalone})"),
])


def chat_model() -> tuple[BaseChatModel, bool]:
    """A real OpenAI-compatible model when configured and installed, else the scripted one."""
    if os.environ.get("OPENAI_API_KEY"):
        try:
            from langchain_openai import ChatOpenAI
        except ImportError:
            print("OPENAI_API_KEY is set but langchain-openai is not installed: "
                  "using the scripted model", file=sys.stderr)
        else:
            model: BaseChatModel = ChatOpenAI(
                model=os.environ.get("DHRAG_MODEL", "gpt-4o-mini"),
                base_url=os.environ.get("OPENAI_BASE_URL"), temperature=0,
            )
            return model, True
    return FakeListChatModel(responses=SCRIPTED_ANSWERS), False


def build_store(embedder: NumpyMiniLMEmbedder) -> InMemoryVectorStore:
    """The demo passages in a LangChain vector store embedded by DH-RAG's MiniLM.

    The demo ships MiniLM vectors of its passages; ``preload`` lets the store reuse them
    instead of encoding 251 passages (~20 s on a 2-core CPU). Any other corpus: just
    ``store.add_documents(...)``.
    """
    kb = load_demo_kb(embedder)
    embeddings = DHRAGEmbeddings(embedder)
    embeddings.preload([p.text for p in kb.passages], kb.vectors)
    store = InMemoryVectorStore(embeddings)
    store.add_texts([p.text for p in kb.passages],
                    metadatas=[{"title": p.title, **p.metadata} for p in kb.passages],
                    ids=[p.id or str(i) for i, p in enumerate(kb.passages)])
    return store


def build_chat(
    embedder: NumpyMiniLMEmbedder, llm: BaseChatModel, *, rewrite_with_llm: bool = False
) -> tuple[DHRAGMemoryRunnable, DHRAGRetriever]:
    """An ordinary LCEL RAG chain over the store, with DH-RAG memory added by one call."""
    retriever = DHRAGRetriever.from_knowledge(
        build_store(embedder), k=4, rewriter=llm if rewrite_with_llm else None
    )

    def prompt_inputs(x: dict[str, Any]) -> dict[str, str]:
        docs = x["docs"]
        standalone = docs[0].metadata["dhrag"]["rewritten_query"] if docs else x["question"]
        return {"context": format_documents(docs), "question": x["question"],
                "standalone": standalone}

    # retriever | format | prompt | llm | parser, keeping the documents for display
    chain = RunnableParallel(docs=retriever, question=RunnablePassthrough()).assign(
        answer=RunnableLambda(prompt_inputs) | PROMPT | llm | StrOutputParser()
    )
    return with_dhrag_memory(chain, retriever, output_key="answer"), retriever


def main() -> None:
    started = time.perf_counter()
    embedder = NumpyMiniLMEmbedder()
    llm, real = chat_model()
    chat, retriever = build_chat(embedder, llm, rewrite_with_llm=real)
    config: RunnableConfig = {"configurable": {"session_id": SESSION}}

    for n, question in enumerate(DEMO_TURNS, 1):
        out = chat.invoke(question, config=config)  # the turn is recorded after the answer
        docs = out["docs"]
        print(f"\n[{n}] Q: {question}")
        if docs:
            print(f"    rewritten: {docs[0].metadata['dhrag']['rewritten_query']}")
        for d in docs:
            t = d.metadata["dhrag"]
            origin = f"history turn {t['turn'] + 1}" if t["source"] == "history" else "kb"
            print(f"    {t['weight']:.2f}  {d.metadata.get('title', '')[:38]:38}  ({origin})")
        print(f"    A: {out['answer']}")

    turns = retriever.engine.history.turns(SESSION)
    print(f"\n{len(turns)} turns in session {SESSION!r}; "
          f"{retriever.engine.history.stats(SESSION)['clusters']} topic clusters; "
          f"{time.perf_counter() - started:.1f} s in all (model load included)")


if __name__ == "__main__":
    main()

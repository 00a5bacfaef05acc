"""A LangChain agent whose conversational memory is DH-RAG (offline by default).

    python examples/langchain_agent.py

``DHRAGMiddleware`` gives a ``langchain.agents.create_agent`` agent its memory: before each
model call it adds the earlier turns DH-RAG selects for the user's message (and the passages
of the knowledge base and of those turns) to the system message; after the run it records
the turn. The agent runs without a checkpointer: each call sends only the new message, and
the history lives in the DH-RAG database (here SQLite, so it survives a restart).

The knowledge base is dhrag's own ``FaissKnowledgeBase`` of the 251 demo passages with their
shipped MiniLM vectors. The chat model is scripted (it calls a tool once); to use a real
OpenAI-compatible model, install ``langchain-openai`` and set ``OPENAI_API_KEY`` (and
``OPENAI_BASE_URL``, ``DHRAG_MODEL`` as needed).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import tool

from dhrag_core import DHRAG, NumpyMiniLMEmbedder
from dhrag_core.app.demo import load_demo_kb
from langchain_dhrag import DHRAGMiddleware


@tool
def km_to_miles(km: float) -> str:
    """Convert a distance in kilometres to miles."""
    return f"{km * 0.621371:,.0f} miles"


QUESTIONS = [
    "What is the Great Wall of China built out of?",
    "How long is it in miles?",
    "Where do guinea pigs sleep in the wild?",
    "Can I keep one as a pet?",
    "Who was the wall built to keep out?",
]


class ScriptedChatModel(GenericFakeChatModel):
    """A scripted chat model that accepts tools (agents bind them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[Any, Any]:
        return self


def scripted_model() -> ScriptedChatModel:
    call = {"name": "km_to_miles", "args": {"km": 21196}, "id": "call-1"}
    return ScriptedChatModel(messages=iter([
        AIMessage("Stone, brick, tamped earth, wood and other materials."),
        AIMessage("", tool_calls=[call]),  # "it" = the Great Wall, from DH-RAG's memory
        AIMessage("All its branches measure about 21,196 km, roughly 13,171 miles."),
        AIMessage("In burrows dug by other animals, or in crevices."),
        AIMessage("Yes: they are popular, gentle pets that need company and space."),
        AIMessage("Nomadic peoples of the steppe, such as the Xiongnu and the Mongols."),
    ]))


def chat_model() -> BaseChatModel:
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
            return model
    return scripted_model()


def main() -> None:
    started = time.perf_counter()
    embedder = NumpyMiniLMEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        rag = DHRAG(load_demo_kb(embedder), embedder=embedder,
                    store=f"sqlite:///{Path(tmp) / 'history.db'}")
        agent = create_agent(
            chat_model(), [km_to_miles],
            system_prompt="You are a concise guide. Use the passages you are given.",
            middleware=[DHRAGMiddleware(rag, k=3)],
        )
        config: RunnableConfig = {"configurable": {"session_id": "alice"}}

        for n, question in enumerate(QUESTIONS, 1):
            # what the middleware will inject (select stores nothing; shown for the demo)
            preview = rag.select("alice", question, k=3)
            out = agent.invoke({"messages": [HumanMessage(question)]}, config)
            print(f"\n[{n}] Q: {question}")
            for s in sorted(preview.history, key=lambda s: s.turn.index):
                print(f"    memory: turn {s.turn.index + 1} ({'/'.join(s.via)}, weight "
                      f"{s.weight:.2f}): {s.turn.query}")
            if preview.history:
                print(f"    standalone: {preview.rewritten_query}")
            print(f"    top passage: {preview.context[0].passage.title}")
            for m in out["messages"]:
                if isinstance(m, ToolMessage):
                    print(f"    tool {m.name}: {m.text}")
            print(f"    A: {out['messages'][-1].text}")

        print(f"\n{rag.history.size('alice')} turns stored in the DH-RAG history; "
              f"{time.perf_counter() - started:.1f} s in all (model load included)")
        rag.history.close()


if __name__ == "__main__":
    main()

"""A DH-RAG chat engine over a LlamaIndex ``VectorStoreIndex`` built from a folder (offline).

    python examples/llamaindex_chat_engine.py                 # the shipped demo passages
    python examples/llamaindex_chat_engine.py --docs my_docs/ # your .txt / .md files
    python examples/llamaindex_chat_engine.py --llm openai    # a real model, see below

Embeddings: the packaged all-MiniLM-L6-v2 (no download), exposed to LlamaIndex through the
``DHRAGEmbedding`` bridge and shared with DH-RAG. Answers: by default a *stand-in* extractive
LLM that returns the context sentence sharing most words with the standalone question -- it
shows what the engine hands an LLM, it is not a language model. With ``--llm openai`` and the
package ``llama-index-llms-openai-like`` installed, an OpenAI-compatible server is used
(``OPENAI_API_BASE``, ``OPENAI_API_KEY``, ``DHRAG_LLM_MODEL``), also for query rewriting.

Each turn prints the rewritten query, the history turns DH-RAG selected (with weights), the
top sources (integration weight, knowledge base or earlier turn) and the answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.chat_engine.types import AgentChatResponse
from llama_index.core.llms import LLM, CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.node_parser import SentenceSplitter

from dhrag_core import DHRAGSettings, Embedder, NumpyMiniLMEmbedder, Retrieval
from dhrag_core.algorithm.lexical import word_overlap
from dhrag_core.app.demo import DEMO_TURNS
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

#: The context prompt also shows the standalone (rewritten) question; the stand-in LLM uses it.
CONTEXT_PROMPT = (
    "Answer the user's latest message from the documents below (best first; passages shown "
    "at earlier turns are marked so). If they do not contain the answer, say you don't know."
    "\n\nStandalone question: {rewritten_query}\n\nDocuments:\n{context_str}\n\n"
    "End of documents."
)


class ExtractiveLLM(CustomLLM):
    """Stand-in LLM, no language model: returns the best-matching sentence of the context.

    It reads what the engine sends an LLM: the context passages DH-RAG integrated (with
    their weights), the standalone question and the user's raw latest message. Each sentence
    of the context is scored by the share of the standalone question's words it holds, its
    embedding similarity to the standalone question and to the raw message, and its passage's
    integration weight; the best one is the answer.
    """

    embedder: Any
    label: str = "[extractive stand-in LLM]"
    top_passages: int = 3

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="extractive-stand-in", is_chat_model=False)

    def _answer(self, prompt: str) -> str:
        standalone = re.search(r"^Standalone question: (.*)$", prompt, flags=re.M)
        messages = re.findall(r"^user: (.*)$", prompt, flags=re.M)
        documents = re.search(r"^Documents:\n(.*?)\n\nEnd of documents\.$", prompt,
                              flags=re.S | re.M)
        blocks = re.split(r"^\[\d+\][^\n]*weight ([\d.]+)\)$", documents.group(1) if documents
                          else "", flags=re.M)[1:]
        sentences, weights = [], []
        for weight, text in zip(blocks[0::2][: self.top_passages], blocks[1::2], strict=False):
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
                if len(sentence) > 20:
                    sentences.append(sentence)
                    weights.append(float(weight))
        if not sentences or not messages:
            return f"{self.label} I don't know."
        question = messages[-1]
        full = standalone.group(1) if standalone else question
        vectors = self.embedder.encode([question, full, *sentences])
        scores = (word_overlap(full, sentences) + vectors[2:] @ vectors[1]
                  + 0.5 * (vectors[2:] @ vectors[0]) + 0.05 * np.asarray(weights))
        return f"{self.label} {sentences[int(np.argmax(scores))]}"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._answer(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        text = ""
        for i, word in enumerate(self._answer(prompt).split(" ")):
            delta = word if i == 0 else " " + word
            text += delta
            yield CompletionResponse(text=text, delta=delta)


def openai_compatible_llm() -> LLM | None:
    """An OpenAI-compatible LLM when its package and settings are there, else None."""
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError:
        print("(llama-index-llms-openai-like is not installed: using the stand-in LLM)")
        return None
    model = os.environ.get("DHRAG_LLM_MODEL")
    base = os.environ.get("OPENAI_API_BASE") or os.environ.get("OPENAI_BASE_URL")
    if not model or not base:
        print("(set DHRAG_LLM_MODEL and OPENAI_API_BASE for a real model: using the stand-in)")
        return None
    llm: LLM = OpenAILike(model=model, api_base=base, is_chat_model=True,
                          api_key=os.environ.get("OPENAI_API_KEY", "unused"))
    return llm


def write_demo_docs(folder: Path) -> int:
    """The shipped demo passages (real Wikipedia text) as one .txt file each."""
    data = resources.files("dhrag_core") / "data" / "demo_kb.jsonl"
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines()]
    for row in rows:
        (folder / f"{row['id']}.txt").write_text(row["text"], encoding="utf-8")
    return len(rows)


def build_index(docs: Path, embed_model: DHRAGEmbedding,
                out: TextIO | None = None) -> VectorStoreIndex:
    """Read a folder, chunk it and embed it; file names are metadata, kept out of vectors.

    Says ``embedding N chunks ...`` on ``out`` before the embedding starts (a progress bar on
    stderr too when that is a terminal): 251 demo chunks take ~40 s on a 2-core CPU.
    """

    def file_metadata(path: str) -> dict[str, Any]:
        first = Path(path).read_text("utf-8", errors="replace").strip().split("\n", 1)[0]
        return {"file_name": Path(path).name, "title": first[:80]}

    documents = SimpleDirectoryReader(str(docs), required_exts=[".txt", ".md"],
                                      file_metadata=file_metadata).load_data()
    for doc in documents:
        doc.excluded_embed_metadata_keys = ["file_name", "title"]
        doc.excluded_llm_metadata_keys = ["file_name"]
    nodes = SentenceSplitter(chunk_size=512, chunk_overlap=32).get_nodes_from_documents(documents)
    if out is not None:
        out.write(f"embedding {len(nodes)} chunks from {docs} ...\n")
        out.flush()
    return VectorStoreIndex(nodes, embed_model=embed_model, show_progress=sys.stderr.isatty())


def _short(text: str, width: int = 96) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "..."


def show_turn(n: int, question: str, reply: AgentChatResponse, seconds: float,
              out: TextIO) -> None:
    trace = reply.sources[0].raw_output
    out.write(f"\n[{n}] user: {question}\n")
    out.write(f"    rewritten query: {trace['rewritten_query']}\n")
    if trace["history"]:
        out.write("    selected history:\n")
        for h in trace["history"]:
            out.write(f"      turn {h['turn'] + 1}: {_short(h['query'], 56)!r}  "
                      f"weight={h['weight']:.2f} (relevance={h['relevance']:.2f}, "
                      f"recency={h['recency']:.2f}, via {'+'.join(h['via'])})\n")
    else:
        out.write("    selected history: (none)\n")
    out.write("    top sources:\n")
    for node in reply.source_nodes[:3]:
        dh = node.node.metadata["dhrag"]
        where = "kb" if dh["source"] == "kb" else f"turn {dh['turn'] + 1}"
        title = node.node.metadata.get("title", "")
        out.write(f"      {node.score or 0.0:.2f} [{where}] {_short(title, 30)}: "
                  f"{_short(node.node.get_content(), 70)}\n")
    out.write(f"    answer: {_short(reply.response, 150)}\n")
    out.write(f"    ({seconds:.2f} s)\n")


def run(
    docs: Path,
    *,
    embedder: Embedder | None = None,
    llm: LLM | None = None,
    turns: Sequence[str] = DEMO_TURNS,
    store: str = "memory",
    out: TextIO = sys.stdout,
) -> list[AgentChatResponse]:
    """Index ``docs`` and hold the conversation ``turns``; returns the replies."""
    embedder = embedder or NumpyMiniLMEmbedder()
    embed_model = DHRAGEmbedding(embedder)
    t0 = time.perf_counter()
    embedder.encode(["warm-up"])  # load the model now, so turn timings are turn timings
    out.write(f"model ready in {time.perf_counter() - t0:.1f} s\n")

    t0 = time.perf_counter()
    index = build_index(docs, embed_model, out)
    n_nodes = len(index.docstore.docs)
    out.write(f"indexed {n_nodes} chunks from {docs} in {time.perf_counter() - t0:.1f} s\n")

    llm = llm or ExtractiveLLM(embedder=embedder)
    # one call: the index is searched by vector with its own embedding model (no second
    # model), and every chat turn is recorded by the engine itself
    engine = DHRAGChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=8), llm, store=store,
        settings=DHRAGSettings(retrieval=Retrieval(kb_k=8, context_k=5)),
        context_prompt=CONTEXT_PROMPT,
        rewriter="light" if isinstance(llm, ExtractiveLLM) else "llm", session_id="demo",
    )
    engine.reset()
    replies = []
    t_all = time.perf_counter()
    for n, question in enumerate(turns, 1):
        t0 = time.perf_counter()
        reply = engine.chat(question)
        show_turn(n, question, reply, time.perf_counter() - t0, out)
        replies.append(reply)
    out.write(f"\n{len(turns)} turns in {time.perf_counter() - t_all:.1f} s; "
              f"stored turns: {len(engine.chat_history) // 2}\n")
    return replies


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    ap.add_argument("--docs", type=Path, help="folder of .txt/.md documents (default: demo)")
    ap.add_argument("--llm", choices=["extractive", "openai"], default="extractive",
                    help="stand-in extractive LLM (default) or an OpenAI-compatible server")
    ap.add_argument("--store", default="memory", help="history store: memory or sqlite:///x.db")
    args = ap.parse_args(argv)
    # SimpleDirectoryReader warns per file that optional PDF/Word readers are missing
    logging.getLogger("llama_index.core.readers.file.base").setLevel(logging.ERROR)
    llm = openai_compatible_llm() if args.llm == "openai" else None
    if args.docs is not None:
        if not args.docs.is_dir():
            ap.error(f"--docs {args.docs} is not a folder")
        run(args.docs, llm=llm, store=args.store)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        n = write_demo_docs(Path(tmp))
        print(f"wrote {n} demo passages (Wikipedia, CC BY-SA) to {tmp}")
        run(Path(tmp), llm=llm, store=args.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())

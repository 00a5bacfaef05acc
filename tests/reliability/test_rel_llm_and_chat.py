"""The LLM client, the chat command and LlamaIndex's async chat under stress (found by the
outside attack of issue 55), as a user meets each finding. Each test failed before its fix.

Item 6: a cancelled LlamaIndex ``achat`` follows one rule (the turn is stored exactly when the
LLM's answer reached the engine). Item 12: knowledge-base metadata trimming is linear, and
the metadata with its note fits the limit. Item 13: ``--timeout`` is one overall deadline for
an answer, however slowly a server trickles. Raw errors: log lines carry no raw control
characters, ``/save``'s suggested command is shell-quoted, a base URL's query stays a query.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import shlex
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.schema import TextNode

from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder, Passage
from dhrag_core import validation as validation_module
from dhrag_core.app.chat import ChatSession
from dhrag_core.app.chat_cli import add_chat_arguments, run_chat
from dhrag_core.knowledge.embed_cache import embed_cached
from dhrag_core.llm import LLMError, Message, OpenAICompatibleLLM
from dhrag_core.validation import CLEANED_KEY, clean_passage
from llamaindex_dhrag import DHRAGChatEngine, DHRAGEmbedding

EVIL = "evil\x1b[31m\nFORGED LINE\x07"


def _one_line_and_inert(text: str) -> None:
    assert "\x1b" not in text and "\n" not in text and "\x07" not in text, text


# -- item 6: a cancelled achat follows one rule ----------------------------------------------

DOCS = {
    "wall-material": "The Great Wall of China is built from stone, brick, tamped earth and wood.",
    "wall-length": "The Great Wall of China, with all of its branches, is 21,196 km long.",
    "nile-length": "The Nile is 6,650 km long.",
}
LEFT = "a question a stopped stream left held"


class _AnsweringLLM(CustomLLM):
    """A LlamaIndex LLM whose ``achat`` really awaits, then notes that it answered just
    before it returns (no await in between: the answer reaches the engine in that step)."""

    _answered: list[int] = PrivateAttr(default_factory=list)
    _event: asyncio.Event | None = PrivateAttr(default=None)
    _run: int = PrivateAttr(default=0)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="answering")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="It is long.")

    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError

    async def astream_chat(self, messages: Any, **kwargs: Any) -> ChatResponseAsyncGen:
        raise NotImplementedError

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        for _ in range(3):
            await asyncio.sleep(0.002)
        self._answered.append(self._run)
        if self._event is not None:
            self._event.set()
        return ChatResponse(message=ChatMessage(role="assistant", content=f"answer {self._run}"))


def test_a_cancelled_achat_stores_the_turn_exactly_when_the_llm_answered(
    tmp_path: Path,
) -> None:
    emb = HashingEmbedder(dimension=128)
    nodes = [TextNode(id_=i, text=t) for i, t in DOCS.items()]
    index = VectorStoreIndex(nodes=nodes, embed_model=DHRAGEmbedding(emb))
    llm = _AnsweringLLM()
    engine = DHRAGChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=3), llm, embedder=emb, search="text",
        store=f"sqlite:///{tmp_path / 'chat.db'}", session_id="s")
    history = engine.engine.history

    async def one(run: int) -> tuple[str, bool, int, str | None]:
        llm._run, llm._event = run, asyncio.Event()
        history.hold_question("s", LEFT)
        before = history.size("s")
        task = asyncio.create_task(engine.achat(f"How long is the wall, take {run}?"))
        if run < 10:  # at varied times: before, during and after the selection and the LLM
            await asyncio.sleep(run * 0.004)
        else:  # just after the LLM answered, at varied steps of what follows
            await llm._event.wait()
            for _ in range(run - 10):
                await asyncio.sleep(0)
        task.cancel()
        try:
            await task
            outcome = "answer"
        except asyncio.CancelledError:
            outcome = "cancelled"
        stored = history.size("s") - before
        answered = run in llm._answered
        await asyncio.sleep(0.3)  # nothing is stored later, behind the caller's back
        assert history.size("s") - before == stored, run
        return outcome, answered, stored, history.held_question("s")

    async def all_runs() -> list[tuple[str, bool, int, str | None]]:
        return [await one(run) for run in range(20)]

    results = asyncio.run(all_runs())
    try:
        for run, (outcome, answered, stored, held) in enumerate(results):
            # the rule: stored exactly when the LLM's answer reached the engine; a stored
            # turn lets the held question go; a returned answer was stored
            assert stored == (1 if answered else 0), (run, results)
            assert held == (None if answered else LEFT), (run, results)
            if outcome == "answer":
                assert answered, (run, results)
        assert {o for o, *_ in results} >= {"cancelled"}
        assert any(a for _, a, *_ in results) and not all(a for _, a, *_ in results)
    finally:
        engine.close()


# -- item 12: metadata trimming is linear, and fits the limit with its note ----------------

class _CountingJson:
    """``json`` as ``validation`` uses it, counting the characters it serialises."""

    def __init__(self) -> None:
        self.chars = 0
        self.calls = 0

    def dumps(self, *args: Any, **kwargs: Any) -> str:
        out = json.dumps(*args, **kwargs)
        self.calls += 1
        self.chars += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


def _wide(keys: int) -> Passage:
    return Passage("The wall is long.", id="p",
                   metadata={f"key{i:05d}": f"value number {i}" for i in range(keys)})


def test_metadata_trimming_serialises_linearly_in_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _CountingJson()
    monkeypatch.setattr(validation_module, "json", counter)
    p = _wide(4000)
    full = len(json.dumps(p.metadata, ensure_ascii=False))
    clean_passage(p, 10_000, 10_000)
    # before: the whole remaining dict serialised again after each of ~3,300 drops
    assert counter.chars <= 4 * full + 50_000, (counter.chars, full)


@pytest.mark.parametrize("keys", [3000, 16_000])
def test_trimmed_metadata_with_its_note_fits_the_limit(keys: int) -> None:
    out = clean_passage(_wide(keys), 10_000, 10_000)
    size = len(json.dumps(out.metadata, ensure_ascii=False))
    assert size <= 10_000, size
    note = out.metadata[CLEANED_KEY]
    assert "metadata: dropped" in note and " more" in note
    assert len(out.metadata) > 100  # what fits is kept


def test_a_note_on_metadata_that_just_fits_still_fits() -> None:
    meta = {"big": "x" * 9_980}
    assert len(json.dumps(meta)) <= 10_000
    out = clean_passage(Passage("NUL\x00here", id="p", metadata=meta), 10_000, 10_000)
    assert "NUL" in out.metadata[CLEANED_KEY]
    assert len(json.dumps(out.metadata, ensure_ascii=False)) <= 10_000


def test_a_huge_key_name_is_not_copied_whole_into_the_note() -> None:
    meta = {"k" * 30_000: 1, "small": 2}
    out = clean_passage(Passage("t", id="p", metadata=meta), 10_000, 10_000)
    assert out.metadata.get("small") == 2
    assert len(json.dumps(out.metadata, ensure_ascii=False)) <= 10_000


# -- item 13: one overall deadline for an answer --------------------------------------------

class _Trickle:
    """An OpenAI-compatible endpoint that never finishes: one byte every 0.5 s for 60 s
    (of the body, or of the headers too)."""

    def __init__(self, headers_too: bool) -> None:
        self.headers_too = headers_too
        self.stop = threading.Event()
        trickle = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100000\r\n\r\n")
                body = b'{"choices": [{"message": {"content": "' + b"x" * 200
                data = head + body if trickle.headers_too else body
                if not trickle.headers_too:
                    self.wfile.write(head)
                    self.wfile.flush()
                deadline = time.monotonic() + 60
                for byte in data:
                    if trickle.stop.is_set() or time.monotonic() > deadline:
                        return
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        return
                    trickle.stop.wait(0.5)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=[False, True], ids=["body", "headers"])
def trickle(request: pytest.FixtureRequest) -> Iterator[_Trickle]:
    server = _Trickle(headers_too=request.param)
    yield server
    server.close()


MSGS: list[Message] = [{"role": "user", "content": "hi"}]


def test_a_trickling_server_cannot_extend_the_deadline(trickle: _Trickle) -> None:
    llm = OpenAICompatibleLLM(trickle.url, "m", timeout=2)
    t0 = time.monotonic()
    with pytest.raises(LLMError) as info:
        llm.complete(MSGS)
    assert time.monotonic() - t0 < 10
    assert "2 s" in str(info.value)


def test_a_trickling_server_cannot_extend_the_async_deadline(trickle: _Trickle) -> None:
    llm = OpenAICompatibleLLM(trickle.url, "m", timeout=30)
    t0 = time.monotonic()
    with pytest.raises(LLMError):
        asyncio.run(llm.acomplete(MSGS, timeout=2))
    assert time.monotonic() - t0 < 10


def test_chat_timeout_applies_to_answers(trickle: _Trickle, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "wall.txt").write_text("The Great Wall of China is 21,196 km long in total.\n")
    ap = argparse.ArgumentParser()
    add_chat_arguments(ap)
    args = ap.parse_args(["--kb", str(kb), "--embedder", "hashing", "--store", "memory",
                          "--base-url", trickle.url, "--model", "m", "--timeout", "2"])
    out = io.StringIO()
    t0 = time.monotonic()
    assert run_chat(args, io.StringIO("How long is the Great Wall?\n"), out) == 0
    assert time.monotonic() - t0 < 10, out.getvalue()  # before: 60 s, whatever --timeout
    assert "LLM failed" in out.getvalue()


# -- raw errors: log lines --------------------------------------------------------------------

def test_embedding_cache_warnings_escape_the_folder_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / EVIL
    emb = HashingEmbedder(32)
    embed_cached(["one", "two"], emb, cache_dir=folder, progress=False)
    for check in folder.glob("*.sha256"):
        check.write_text("0" * 64 + "\n")  # damaged
    with caplog.at_level(logging.WARNING, logger="dhrag_core.knowledge.embed_cache"):
        embed_cached(["one", "two"], emb, cache_dir=folder, progress=False)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said and any("checksum" in m for m in said)
    for message in said:
        _one_line_and_inert(message)


class _FailingLLM:
    def complete(self, messages: list[Message], **kwargs: Any) -> str:
        raise LLMError(f"server said {EVIL}")

    async def acomplete(self, messages: list[Message], **kwargs: Any) -> str:
        raise LLMError(f"server said {EVIL}")


def _session(**kwargs: Any) -> ChatSession:
    emb = HashingEmbedder(64)
    kb = FaissKnowledgeBase([Passage("The Great Wall is 21,196 km long.", id="w")], emb)
    return ChatSession(DHRAG(kb, embedder=emb), "s", **kwargs)


def test_the_chat_logs_an_llm_failure_on_one_inert_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = _session(llm=_FailingLLM())
    with caplog.at_level(logging.WARNING, logger="dhrag_core.app.chat"):
        _, reply = session.ask("How long is the Great Wall?")
    assert reply.source == "extract"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said and "FORGED" in said[0]
    for message in said:
        _one_line_and_inert(message)


class _FailingStreamLLM(CustomLLM):
    """A LlamaIndex LLM whose stream fails after its first token, quoting hostile text."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="failing")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="It is long.")

    def stream_complete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponseGen:
        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text="It", delta="It")
            raise RuntimeError(f"upstream said {EVIL}")

        return gen()


def test_a_failed_stream_is_logged_on_one_inert_line(caplog: pytest.LogCaptureFixture) -> None:
    emb = HashingEmbedder(dimension=128)
    nodes = [TextNode(id_=i, text=t) for i, t in DOCS.items()]
    index = VectorStoreIndex(nodes=nodes, embed_model=DHRAGEmbedding(emb))
    engine = DHRAGChatEngine.from_defaults(index.as_retriever(similarity_top_k=3),
                                           _FailingStreamLLM(), embedder=emb, search="text",
                                           session_id="s")
    with caplog.at_level(logging.WARNING, logger="llamaindex_dhrag.chat_engine"):
        reply = engine.stream_chat("How long is the wall?")
        with pytest.raises(RuntimeError):
            for _ in reply.response_gen:
                pass
        engine.close()  # waits for the writer, which logs the failure
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said and any("FORGED" in m for m in said)
    for message in said:
        _one_line_and_inert(message)


def test_ingestion_warning_escapes_the_file_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    from dhrag_core.knowledge.ingest import load_passages

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / f"{EVIL}.txt").write_text("A wall\x00 with a NUL is cleaned and logged.\n")
    with caplog.at_level(logging.WARNING):
        load_passages(kb)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said
    for message in said:
        _one_line_and_inert(message)


def test_recording_warning_escapes_the_passage_id(caplog: pytest.LogCaptureFixture) -> None:
    emb = HashingEmbedder(64)
    rag = DHRAG(FaissKnowledgeBase(["The wall is long."], emb), embedder=emb)
    with caplog.at_level(logging.WARNING):
        rag.record("s", "How long?", "Long.", passages=[Passage("a\x00b", id=EVIL)])
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said
    for message in said:
        _one_line_and_inert(message)


# -- raw errors: /save's command, the base URL's query ---------------------------------------

def test_the_suggested_command_is_shell_quoted(tmp_path: Path) -> None:
    folder = tmp_path / "my chats"
    folder.mkdir()
    name = "o'brien $HOME.db"
    url = f"sqlite:///{folder / name}"
    emb = HashingEmbedder(64)
    kb = FaissKnowledgeBase([Passage("The Great Wall is 21,196 km long.", id="w")], emb)
    rag = DHRAG(kb, embedder=emb, store=url)
    kb_path = str(tmp_path / "my kb; rm -rf x")
    session = ChatSession(rag, "it's mine", store_url=url, kb=kb_path)
    try:
        session.ask("How long is the Great Wall?")
        said = session.where()
        command = said.split("continue it with: ", 1)[1]
        argv = shlex.split(command)
        assert argv[:2] == ["dhrag", "chat"]
        assert argv[argv.index("--session") + 1] == "it's mine"
        assert argv[argv.index("--store") + 1] == url
        assert argv[argv.index("--kb") + 1] == kb_path
    finally:
        rag.history.close()


class _Recorder:
    """An OpenAI-compatible endpoint recording each request's path and query."""

    def __init__(self, status: int = 200) -> None:
        self.seen: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.seen.append(self.path)
                body: dict[str, Any]
                if status == 200:
                    body = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
                else:
                    body = {"error": {"message": f"bad request to {self.path}"}}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SECRET = "SECRETQUERYKEY99"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_base_url_query_stays_the_query(is_async: bool,
                                          caplog: pytest.LogCaptureFixture) -> None:
    server = _Recorder()
    try:
        llm = OpenAICompatibleLLM(f"{server.base}/v1/?api_key={SECRET}&tenant=a%20b", "m")
        with caplog.at_level(logging.DEBUG):
            text = (asyncio.run(llm.acomplete(MSGS)) if is_async else llm.complete(MSGS))
        assert text == "ok"
        (path,) = server.seen
        parts = urlsplit(path)
        assert parts.path == "/v1/chat/completions"  # before: /v1/?api_key=...chat/completions
        assert parse_qs(parts.query) == {"api_key": [SECRET], "tenant": ["a b"]}
        assert SECRET not in repr(llm) and SECRET not in llm.shown_url
        assert SECRET not in caplog.text
    finally:
        server.close()


def test_an_error_at_a_base_url_with_a_query_shows_no_key() -> None:
    server = _Recorder(status=400)
    try:
        llm = OpenAICompatibleLLM(f"{server.base}/v1?api_key={SECRET}", "m")
        with pytest.raises(LLMError) as info:
            llm.complete(MSGS)
        assert server.seen and urlsplit(server.seen[0]).path == "/v1/chat/completions"
        assert SECRET not in str(info.value) and "400" in str(info.value)
    finally:
        server.close()

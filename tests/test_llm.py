"""The OpenAI-compatible client and the LLM rewriter, against a real local HTTP server."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from dhrag_core import DHRAG, FaissKnowledgeBase, HashingEmbedder, LightRewriter
from dhrag_core.algorithm.llm_rewriting import (
    LLMRewriter,
    clean_rewrite,
    default_gate,
    rewrite_messages,
)
from dhrag_core.llm import LLM, LLMError, OpenAICompatibleLLM, llm_from_env
from dhrag_core.records import SelectedTurn, Turn

# -- a fake OpenAI-compatible server ---------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer: chat text, or an HTTP status, raw body, or a delay first."""

    text: str | None = "OK"
    status: int = 200
    raw: bytes | None = None
    delay: float = 0.0


@dataclass
class FakeOpenAI:
    """``POST /v1/chat/completions`` serving scripted replies and recording request bodies."""

    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    default: Reply = field(default_factory=Reply)

    def script(self, *replies: Reply | str) -> None:
        self.replies.extend(r if isinstance(r, Reply) else Reply(r) for r in replies)

    def prompt(self, i: int = -1) -> str:
        return "\n".join(m["content"] for m in self.requests[i]["messages"])


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path.rstrip("/") != "/v1/chat/completions":
                self.send_error(404)
                return
            fake.requests.append(json.loads(body))
            fake.headers.append({k.lower(): v for k, v in self.headers.items()})
            reply = fake.replies.pop(0) if fake.replies else fake.default
            if reply.delay:
                time.sleep(reply.delay)
            if reply.raw is not None:
                payload = reply.raw
            else:
                payload = json.dumps({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "model": fake.requests[-1].get("model", "?"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": reply.text}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                pass

    return Handler


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.block_on_close = False
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


# -- helpers -------------------------------------------------------------------------------


def selected(index: int, query: str, response: str, weight: float = 0.5) -> SelectedTurn:
    v = np.zeros(8, dtype=np.float32)
    turn = Turn(session_id="s", turn_id=f"t{index}", index=index, query=query, passages=(),
                response=response, timestamp=0.0, query_vector=v, response_vector=v,
                passage_vectors=np.zeros((0, 8), dtype=np.float32))
    return SelectedTurn(turn=turn, relevance=weight, recency=weight, weight=weight,
                        via=("recent",), cluster_id=0, cluster_label="", summary=None,
                        chain_id=0)


HISTORY = [
    selected(0, "What is the Great Wall of China built out of?",
             "Stone, brick, tamped earth and wood."),
    selected(1, "Who ordered its construction first?", "Qin Shi Huang, the first emperor."),
]


def llm(fake: FakeOpenAI, **kw: Any) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(base_url=fake.url, model="fake-model", api_key="k", env={}, **kw)


# -- the client ----------------------------------------------------------------------------


def test_client_sends_messages_and_returns_text(fake_llm: FakeOpenAI) -> None:
    fake_llm.script("Hello there.")
    client = llm(fake_llm)
    assert isinstance(client, LLM)
    msgs = [{"role": "user", "content": "hi"}]
    assert client.complete(msgs, max_tokens=7, temperature=0.3) == "Hello there."
    body = fake_llm.requests[0]
    assert body["model"] == "fake-model" and body["messages"] == msgs
    assert body["max_tokens"] == 7 and body["temperature"] == 0.3
    assert fake_llm.headers[0]["authorization"] == "Bearer k"


def test_client_is_lazy_and_configured_from_env(
    fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.url)
    monkeypatch.setenv("DHRAG_MODEL", "env-model")
    client = OpenAICompatibleLLM()
    assert client._client is None and not fake_llm.requests  # nothing sent at construction
    assert (client.base_url, client.model) == (fake_llm.url, "env-model")
    client.complete([{"role": "user", "content": "x"}])
    assert fake_llm.requests[0]["model"] == "env-model"
    assert fake_llm.headers[0]["authorization"] == "Bearer sk-no-key"
    assert llm_from_env() is not None


def test_client_configuration_errors_name_the_setting() -> None:
    with pytest.raises(ValueError, match="model"):
        OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", env={})
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatibleLLM(model="m", env={})
    with pytest.raises(ValueError, match="base_url must start"):
        OpenAICompatibleLLM(base_url="127.0.0.1:9", model="m", env={})
    with pytest.raises(ValueError, match="timeout"):
        OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", model="m", timeout=0, env={})
    only_key = OpenAICompatibleLLM(model="m", env={"OPENAI_API_KEY": "sk"})
    assert only_key.base_url == "https://api.openai.com/v1"
    assert llm_from_env(env={}) is None
    assert llm_from_env(env={"OPENAI_BASE_URL": "http://x/v1"}) is None  # no model: not asked
    with pytest.raises(ValueError, match="model"):
        llm_from_env(base_url="http://x/v1", env={})
    with pytest.raises(TypeError, match="messages"):
        OpenAICompatibleLLM(base_url="http://x/v1", model="m", env={}).complete([])


def test_client_timeout_is_honoured(fake_llm: FakeOpenAI) -> None:
    fake_llm.script(Reply("late", delay=3.0))
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match="fake-model"):
        llm(fake_llm).complete([{"role": "user", "content": "x"}], timeout=0.5)
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize("reply", [
    Reply(status=500, raw=b'{"error": {"message": "boom"}}'),
    Reply(raw=b"<html>not json</html>"),
    Reply(raw=b'{"unexpected": true}'),
    Reply(text=None),
    Reply(text="   "),
])
def test_client_raises_llm_error_on_bad_replies(fake_llm: FakeOpenAI, reply: Reply) -> None:
    fake_llm.script(reply)
    with pytest.raises(LLMError):
        llm(fake_llm).complete([{"role": "user", "content": "x"}])


async def test_async_client(fake_llm: FakeOpenAI) -> None:
    fake_llm.script("async reply")
    out = await llm(fake_llm).acomplete([{"role": "user", "content": "x"}], max_tokens=5)
    assert out == "async reply" and fake_llm.requests[0]["max_tokens"] == 5


# -- the rewriter --------------------------------------------------------------------------


def test_prompt_holds_selected_user_and_assistant_turns(fake_llm: FakeOpenAI) -> None:
    fake_llm.script("Who finished the Great Wall of China?")
    out = LLMRewriter(llm(fake_llm)).rewrite("Who finished it?", list(reversed(HISTORY)))
    assert out.text == "Who finished the Great Wall of China?"
    assert "great" in out.added and "wall" in out.added and "finished" not in out.added
    prompt = fake_llm.prompt()
    for s in HISTORY:
        assert s.turn.query in prompt and s.turn.response in prompt
    # oldest first, questions and answers labelled, the query last
    assert prompt.index("User: What is the Great Wall") < prompt.index("Assistant: Stone")
    assert prompt.index("Assistant: Stone") < prompt.index("User: Who ordered")
    assert prompt.rstrip().endswith("Last question: Who finished it?\n\nStandalone question:")


@pytest.mark.parametrize("reply", [
    'Standalone question: "Who finished the Great Wall of China?"',
    "Rewritten: Who finished the Great Wall of China?",
    "**Standalone question:** Who finished the Great Wall of China?",
    "Sure, here is the rewritten question:\n\n> “Who finished the Great Wall of China?”",
    "<think>The user means the wall.</think>\n`Who finished the Great Wall of China?`",
    "```\nWho finished the Great Wall of China?\n```\nIt replaces 'it' with the wall.",
])
def test_prefixes_quotes_and_markdown_are_stripped(fake_llm: FakeOpenAI, reply: str) -> None:
    fake_llm.script(reply)
    out = LLMRewriter(llm(fake_llm)).rewrite("Who finished it?", HISTORY)
    assert out.text == "Who finished the Great Wall of China?"


@pytest.mark.parametrize("reply", [
    Reply(status=500, raw=b'{"error": "boom"}'),
    Reply(raw=b"garbage, not JSON"),
    Reply(text=""),
    Reply(text="Standalone question:"),
    Reply(text="The wall " * 100),
])
def test_failures_fall_back_to_the_light_rewriter(
    fake_llm: FakeOpenAI, reply: Reply, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.script(reply)
    with caplog.at_level(logging.WARNING, logger="dhrag_core.algorithm.llm_rewriting"):
        out = LLMRewriter(llm(fake_llm)).rewrite("How long is it?", HISTORY)
    assert out == LightRewriter().rewrite("How long is it?", HISTORY)
    assert out.text == "How long is the Great Wall of China?"
    assert len(fake_llm.requests) == 1
    assert "LLM rewrite" in caplog.text and "LightRewriter" in caplog.text


def test_timeout_falls_back_quickly(fake_llm: FakeOpenAI) -> None:
    fake_llm.script(Reply("Too late?", delay=3.0))
    t0 = time.perf_counter()
    out = LLMRewriter(llm(fake_llm), timeout=0.4).rewrite("How long is it?", HISTORY)
    assert time.perf_counter() - t0 < 2.0
    assert out == LightRewriter().rewrite("How long is it?", HISTORY)


def test_unreachable_server_falls_back() -> None:
    dead = OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", model="m", env={})
    out = LLMRewriter(dead, timeout=2).rewrite("How long is it?", HISTORY)
    assert out == LightRewriter().rewrite("How long is it?", HISTORY)


def test_gate_is_a_constructor_option(fake_llm: FakeOpenAI) -> None:
    full = "What materials were used to build the Great Wall of China in the Ming era?"
    assert not default_gate(full, HISTORY) and default_gate("How long is it?", HISTORY)
    assert default_gate("And the Ming era walls?", HISTORY)  # short, with history
    assert LLMRewriter(llm(fake_llm)).rewrite(full, HISTORY).text == full
    assert LLMRewriter(llm(fake_llm)).rewrite("How long is it?", []).text == "How long is it?"
    assert not fake_llm.requests
    fake_llm.script("rewritten by gate=False", "rewritten by callable")
    assert LLMRewriter(llm(fake_llm), gate=False).rewrite(full, HISTORY).text == (
        "rewritten by gate=False")
    calls: list[str] = []

    def always(query: str, history: object) -> bool:
        calls.append(query)
        return True

    gated = LLMRewriter(llm(fake_llm), gate=always)
    assert gated.rewrite(full, HISTORY).text == "rewritten by callable" and calls == [full]
    with pytest.raises(TypeError, match="gate"):
        LLMRewriter(llm(fake_llm), gate="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        LLMRewriter(llm(fake_llm), timeout=-1)
    with pytest.raises(ValueError, match="temperature"):
        LLMRewriter(llm(fake_llm), temperature=5)
    with pytest.raises(TypeError, match="LLM protocol"):
        LLMRewriter(object())  # type: ignore[arg-type]


async def test_async_rewrite_and_fallback(fake_llm: FakeOpenAI) -> None:
    fake_llm.script("How long is the Great Wall of China?", Reply(status=500, raw=b"{}"))
    rw = LLMRewriter(llm(fake_llm))
    assert (await rw.arewrite("How long is it?", HISTORY)).text == (
        "How long is the Great Wall of China?")
    assert await rw.arewrite("How long is it?", HISTORY) == LightRewriter().rewrite(
        "How long is it?", HISTORY)


def test_clean_rewrite_rejects_nothing_and_essays() -> None:
    assert clean_rewrite("") is None and clean_rewrite("\n```\n```\n") is None
    assert clean_rewrite("Why?" + " x" * 300) is None
    assert clean_rewrite("What is X: the thing?") == "What is X: the thing?"
    msgs = rewrite_messages("Why?", [])
    assert msgs[0]["role"] == "system" and "(no earlier turns)" in msgs[1]["content"]


def test_engine_with_llm_rewriter_end_to_end(fake_llm: FakeOpenAI) -> None:
    emb = HashingEmbedder()
    kb = FaissKnowledgeBase([
        "The Great Wall of China is 21,196 km long, built of stone, brick and earth.",
        "Guinea pigs sleep in short naps in burrows dug by other animals.",
        "The Berlin Wall fell on 9 November 1989.",
    ], emb)
    rag = DHRAG(kb, embedder=emb, rewriter=LLMRewriter(llm(fake_llm)))
    first = rag.select("u", "What is the Great Wall of China built of?")
    assert first.rewritten_query == first.query and not fake_llm.requests  # no history yet
    rag.record("u", first.query, "Stone, brick and earth.", selection=first)
    fake_llm.script("Standalone question: How long is the Great Wall of China?")
    sel = rag.select("u", "How long is it?")
    assert sel.rewritten_query == "How long is the Great Wall of China?"
    prompt = fake_llm.prompt()
    assert "User: What is the Great Wall of China built of?" in prompt
    assert "Assistant: Stone, brick and earth." in prompt
    assert "21,196" in sel.context[0].passage.text


def test_repr_and_errors_mask_url_credentials() -> None:
    from dhrag_core.llm import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM("http://bob:pa#ss?w@127.0.0.1:9/v1?api_key=k3y-value", "m",
                              env={})
    assert "pa#ss" not in repr(llm) and "k3y-value" not in repr(llm)
    assert llm.shown_url == "http://bob:***@127.0.0.1:9/v1?api_key=***"
    assert "k3y" not in llm._scrub("bad key k3y-value and pa#ss?w in pieces: pa, ss?w")


def test_a_secret_query_value_is_masked_whole() -> None:
    from dhrag_core.redact import redact_url

    assert redact_url("http://h/v1?api_key=k#y?v&x=1") == "http://h/v1?api_key=***&x=1"
    assert redact_url("http://h/v1?token=a/b#c") == "http://h/v1?token=***"


def test_llm_error_keeps_status_and_type_but_no_chain(fake_llm: FakeOpenAI) -> None:
    """The openai exception is summarised (type, HTTP status, masked message), not chained:
    its request URL and the server's body may quote credentials (issue 55, item 7)."""
    fake_llm.script(Reply(status=503, raw=b'{"error": {"message": "overloaded"}}'))
    with pytest.raises(LLMError) as info:
        llm(fake_llm).complete([{"role": "user", "content": "x"}])
    err = info.value
    assert err.__cause__ is None and err.__context__ is None and err.__suppress_context__
    assert err.status_code == 503 and err.cause_type == "InternalServerError"
    assert "InternalServerError (HTTP 503)" in str(err) and "overloaded" in str(err)


def test_a_password_with_at_then_slash_is_masked_whole() -> None:
    from dhrag_core.redact import redact_url, url_secrets

    url = "postgresql://user:p@ss/w0rd@host:5432/db"
    assert redact_url(url) == "postgresql://user:***@host:5432/db"
    assert url_secrets(url)[0] == "p@ss/w0rd"

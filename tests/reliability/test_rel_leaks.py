"""Issue 55, leaks: no credential in an ``LLMError``'s traceback (item 7) and no piece of a
password holding raw URL delimiters in a redacted URL (item 9). Each test failed before its
fix."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import random
import string
import traceback
from typing import Any

import httpx
import pytest

from dhrag_core.llm import LLMError, OpenAICompatibleLLM, failures_as_llm_error
from dhrag_core.redact import redact_url, url_secrets

KEY = "SECRETKEY4242"
PASSWORD = "SECRETPW77"
BASIC = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
BASE_URL = f"https://alice:{PASSWORD}@llm.example.com/v1?api_key={KEY}"


def _status_reply(request: httpx.Request) -> httpx.Response:
    """A proxy answering 401 and echoing the URL and the credentials it was sent."""
    body = {"error": {"message": f"unauthorized {request.url} Authorization: Basic {BASIC} "
                                 f"(got {request.headers.get('authorization')})",
                      "type": "auth"}}
    return httpx.Response(401, request=request, content=json.dumps(body).encode(),
                          headers={"content-type": "application/json"})


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError(f"cannot reach {request.url} (Basic {BASIC})", request=request)


def _llm(handler: Any, *, is_async: bool = False) -> OpenAICompatibleLLM:
    """An ``OpenAICompatibleLLM`` whose real ``openai`` client talks to ``handler`` (no
    network): the client builds its real exceptions from the real request."""
    from openai import AsyncOpenAI, OpenAI

    llm = OpenAICompatibleLLM(BASE_URL, "m", api_key=KEY, timeout=5)
    if not is_async:
        llm._client = OpenAI(base_url=llm.base_url, api_key=KEY, max_retries=0,
                             http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    else:
        transport = httpx.MockTransport(handler)
        llm._async_client = lambda: AsyncOpenAI(  # type: ignore[method-assign]
            base_url=llm.base_url, api_key=KEY, max_retries=0,
            http_client=httpx.AsyncClient(transport=transport))
    return llm


def _printed(err: BaseException) -> str:
    """What a traceback and ``logging.exception`` show of ``err``."""
    shown = "".join(traceback.format_exception(err))
    stream = io.StringIO()
    logger = logging.getLogger("dhrag.test.leaks")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise err
        except LLMError:
            logger.exception("the LLM failed")
    finally:
        logger.removeHandler(handler)
    return shown + stream.getvalue()


def _assert_clean(text: str) -> None:
    for secret in (KEY, PASSWORD, BASIC, "SECRET"):
        assert secret not in text, (secret, text)


@pytest.mark.parametrize("handler", [_status_reply, _refuse], ids=["http-401", "connect"])
def test_llm_error_traceback_holds_no_credentials(handler: Any) -> None:
    with pytest.raises(LLMError) as info:
        _llm(handler).complete([{"role": "user", "content": "hi"}])
    err = info.value
    text = _printed(err)
    _assert_clean(text)
    assert err.__cause__ is None and err.__context__ is None and err.__suppress_context__
    assert err.cause_type is not None and err.cause_type in text  # what failed still shows
    if handler is _status_reply:
        assert err.status_code == 401 and "401" in str(err)
    assert "llm.example.com" in text


@pytest.mark.parametrize("handler", [_status_reply, _refuse], ids=["http-401", "connect"])
def test_async_llm_error_traceback_holds_no_credentials(handler: Any) -> None:
    llm = _llm(handler, is_async=True)
    with pytest.raises(LLMError) as info:
        asyncio.run(llm.acomplete([{"role": "user", "content": "hi"}]))
    _assert_clean(_printed(info.value))
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_framework_failures_are_scrubbed_and_unchained() -> None:
    """The LangChain / LlamaIndex adapters' wrapper: a real openai error raised inside."""
    import openai

    request = httpx.Request("POST", f"https://llm.example.com/v1/chat?api_key={KEY}")
    response = httpx.Response(401, request=request)
    cause = openai.AuthenticationError(
        f"Error code: 401 - {request.url} Authorization: Basic {BASIC}", response=response,
        body=None)
    with pytest.raises(LLMError) as info, failures_as_llm_error("chat model"):
        raise cause
    err = info.value
    text = _printed(err)
    _assert_clean(text)
    # a with statement always sets the failure as context: suppressed, never printed
    assert err.__cause__ is None and err.__suppress_context__
    assert "AuthenticationError" in text and err.status_code == 401
    connection = openai.APIConnectionError(message=f"cannot reach {request.url}",
                                           request=request)
    with pytest.raises(LLMError) as info, failures_as_llm_error("LLM"):
        raise connection
    _assert_clean(_printed(info.value))


def test_raw_passwords_with_url_delimiters_are_hidden_whole() -> None:
    """300 random passwords pasted unencoded, "@" before "/" included: no piece of 4+
    characters shows, and ``url_secrets`` names the whole password."""
    rng = random.Random(55)
    chars = string.ascii_letters + string.digits + "@/:?#&=%"
    template = "postgresql://user:{}@db.example.com:5432/app"
    rest = template.replace("{}", "")
    for _ in range(300):
        pw = "".join(rng.choice(chars) for _ in range(rng.randint(6, 24)))
        url = template.format(pw)
        shown = redact_url(url)
        leaked = [pw[j:j + n] for n in range(4, len(pw) + 1) for j in range(len(pw) - n + 1)
                  if pw[j:j + n] in shown and pw[j:j + n] not in rest]
        assert not leaked, (pw, shown)
        assert pw in url_secrets(url), (pw, url_secrets(url))


def test_at_then_slash_in_a_password() -> None:
    url = "postgresql://user:p@ss/w0rd@host:5432/db"
    assert redact_url(url) == "postgresql://user:***@host:5432/db"
    assert "p@ss/w0rd" in url_secrets(url)
    # an "@" in the query of a plain URL still ends no password
    plain = "postgresql://bob:pw@h:5432/db?user=a@b.org&sslmode=require"
    assert redact_url(plain) == "postgresql://bob:***@h:5432/db?user=a@b.org&sslmode=require"

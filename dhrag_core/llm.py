"""Chat-completion LLMs: a small protocol and a client for any OpenAI-compatible endpoint.

Nothing here touches the network or imports ``openai`` until the first request, so building an
``OpenAICompatibleLLM`` is free and configuration errors surface at construction.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from dhrag_core.redact import install_log_redaction, redact_url, scrub_credentials, url_secrets

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

__all__ = [
    "LLM",
    "LLMError",
    "Message",
    "OpenAICompatibleLLM",
    "failures_as_llm_error",
    "framework_messages",
    "llm_from_env",
]

Message = dict[str, str]

#: Base URL used when only ``OPENAI_API_KEY`` is set (the OpenAI service itself).
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Placeholder key for local servers (vLLM, llama.cpp, Ollama) that accept any key.
NO_KEY = "sk-no-key"
MODEL_ENV = ("DHRAG_MODEL", "OPENAI_MODEL")


class LLMError(RuntimeError):
    """A request to the LLM failed: connection, timeout, HTTP error or an unusable reply.

    It carries no exception chain (no ``__cause__``; no ``__context__``, or one suppressed,
    never printed): the client's exceptions quote request URLs (``?api_key=``) and
    server-echoed credentials, and a traceback, ``logging.exception`` or an error tracker
    prints a chain whole. What is
    useful of the failure stays: its type (``cause_type``) and HTTP status (``status_code``),
    and its message with credentials masked, in this error's message.
    """

    def __init__(self, message: str, *, cause_type: str | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(message)
        self.cause_type = cause_type
        """The failure's exception type name (``"APIStatusError"``), if one caused this."""
        self.status_code = status_code
        """The HTTP status of the failed request, if the server answered."""


def _status_code(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _scrubbed_error(message: str, exc: BaseException) -> LLMError:
    """An ``LLMError`` for ``exc`` with no chain: raise it outside the ``except`` block (or
    ``from None``), so that ``exc``, whose message and request may hold secrets, is neither
    its cause nor its context."""
    err = LLMError(message, cause_type=type(exc).__name__, status_code=_status_code(exc))
    err.__cause__ = None
    err.__context__ = None
    err.__suppress_context__ = True
    return err


@runtime_checkable
class LLM(Protocol):
    """Completes a chat: a list of ``{"role": ..., "content": ...}`` messages to reply text.

    Implementations raise ``LLMError`` (or a subclass) when no usable reply came back.
    """

    def complete(
        self, messages: list[Message], *, max_tokens: int = ..., temperature: float = ...,
        timeout: float = ...,
    ) -> str: ...

    async def acomplete(
        self, messages: list[Message], *, max_tokens: int = ..., temperature: float = ...,
        timeout: float = ...,
    ) -> str: ...


R = TypeVar("R")


def framework_messages(messages: list[Message], roles: Mapping[str, R]) -> list[tuple[R, str]]:
    """Each message as (its role in a framework's terms, from ``roles``; its content), for
    the adapters that put a framework's chat model behind ``LLM``; ``LLMError`` for a role
    ``roles`` lacks."""
    out = []
    for m in messages:
        role = roles.get(m.get("role", ""))
        if role is None:
            raise LLMError(f"unknown message role {m.get('role')!r}")
        out.append((role, m.get("content", "")))
    return out


@contextmanager
def failures_as_llm_error(what: str) -> Iterator[None]:
    """Raise any failure inside as ``LLMError("<what> failed: <type>: <message>")`` (an
    ``LLMError`` as it is), so that the core's rewriter falls back on a framework's error."""
    try:
        yield
    except LLMError:
        raise
    except Exception as exc:
        # from None: the with statement still sets the failure as context, not printed
        raise _scrubbed_error(
            f"{what} failed: {type(exc).__name__}: {scrub_credentials(str(exc))}", exc
        ) from None


def _env(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _check_messages(messages: Any) -> list[Message]:
    if not isinstance(messages, list) or not messages:
        raise TypeError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(
            m.get("content"), str
        ):
            raise TypeError(f"messages[{i}] must be a dict with str 'role' and 'content'")
    return messages


_DEADLINE: ContextVar[float | None] = ContextVar("dhrag_llm_deadline", default=None)
"""When the answer being fetched in this context must have arrived (``time.monotonic``)."""


def _left(timeout: float | None, error: str) -> float | None:
    """``timeout`` cut to what is left of the running answer's deadline; the ``httpcore``
    timeout named ``error`` once it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        import httpcore

        raise getattr(httpcore, error)("the deadline of the answer passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """A connection of the HTTP client whose every wait ends at the answer's deadline, so
    that a server sending a byte now and then cannot stretch a per-read timeout forever."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, _left(timeout, "ReadTimeout"))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, "WriteTimeout"))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> _DeadlineStream:
        return _DeadlineStream(self._stream.start_tls(
            ssl_context, server_hostname, _left(timeout, "ConnectTimeout")))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """``httpcore``'s network backend making ``_DeadlineStream`` connections."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> _DeadlineStream:
        return _DeadlineStream(self._backend.connect_tcp(
            host, port, _left(timeout, "ConnectTimeout"), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> _DeadlineStream:
        return _DeadlineStream(self._backend.connect_unix_socket(
            path, _left(timeout, "ConnectTimeout"), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _deadline_http_client() -> Any:
    """The ``openai`` client's default ``httpx.Client`` (proxies from the environment
    included) whose connections end every wait at the answer's deadline. It reaches into
    httpx's transports and httpcore's pools (no public hook exists); where they change,
    each wait keeps its own timeout, and tests/reliability/test_rel_llm_and_chat.py says so."""
    from openai import DefaultHttpxClient

    client = DefaultHttpxClient()
    mounts = getattr(client, "_mounts", {})
    for transport in [getattr(client, "_transport", None), *mounts.values()]:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return client


def _endpoint(base_url: str) -> tuple[str, dict[str, str]]:
    """``base_url`` without its query, and the query's parameters: the client appends
    ``/chat/completions`` to the path, and sends the parameters with every request."""
    parts = urlsplit(base_url)
    path = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return path, dict(parse_qsl(parts.query, keep_blank_values=True))


def _check_request(max_tokens: Any, temperature: Any, timeout: Any) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
        0.0 <= temperature <= 2.0
    ):
        raise ValueError(f"temperature must be a number in [0, 2], got {temperature!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")


class OpenAICompatibleLLM:
    """Chat completions through the ``openai`` client against any OpenAI-compatible server.

    Every argument left ``None`` is read from the environment: ``OPENAI_BASE_URL``,
    ``OPENAI_API_KEY``, and the model from ``DHRAG_MODEL`` or ``OPENAI_MODEL``. With an API key
    but no base URL, the OpenAI service is used; with a base URL but no key, a placeholder key
    is sent (local servers ignore it). The client is created on the first request.

    Args:
        base_url: Endpoint root, e.g. ``http://localhost:8000/v1``; a query
            (``?api_key=...``) is sent with every request, never printed.
        model: Model name the server knows.
        api_key: Bearer key.
        timeout: Default deadline of an answer in seconds (each call may pass its own): the
            whole request, however slowly the server sends its reply.
        max_retries: Retries of the ``openai`` client on connection errors, 429 and 5xx
            (0 by default, so a timeout means the caller waited ``timeout``, not a multiple).
        env: Where to read the variables (default ``os.environ``).

    Raises:
        ValueError: No model, or neither a base URL nor an API key, is configured.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        model = model.strip() if isinstance(model, str) else _env(env, *MODEL_ENV)
        if not model:
            raise ValueError(
                "model is not configured: pass model= (--model) or set DHRAG_MODEL or "
                "OPENAI_MODEL"
            )
        base = base_url.strip() if isinstance(base_url, str) else _env(env, "OPENAI_BASE_URL")
        key = api_key if isinstance(api_key, str) and api_key else _env(env, "OPENAI_API_KEY")
        if not base:
            if key is None:
                raise ValueError(
                    "base_url is not configured: pass base_url= (--base-url) or set "
                    "OPENAI_BASE_URL (or OPENAI_API_KEY to use the OpenAI service)"
                )
            base = OPENAI_DEFAULT_BASE_URL
        if not base.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must start with http:// or https://, got {redact_url(base)!r}")
        _check_request(1, 0.0, timeout)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.model: str = model
        self.base_url: str = base.rstrip("/")
        self._url, self._query = _endpoint(self.base_url)
        self.shown_url: str = redact_url(self.base_url)
        """``base_url`` as printed: password and secret query values (``api_key=``) masked."""
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._api_key = key or NO_KEY
        self._client: OpenAI | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        # the HTTP client logs every request's URL at INFO, credentials included
        install_log_redaction("httpx", "httpx2", "openai", "openai._base_client")

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM(base_url={self.shown_url!r}, model={self.model!r})"

    def _scrub(self, text: str) -> str:
        """``text`` without the URL's secrets or the API key (errors may quote them)."""
        secrets = url_secrets(self.base_url)
        if self._api_key != NO_KEY and len(self._api_key) >= 4:
            secrets.append(self._api_key)
        for secret in secrets:
            text = text.replace(secret, "***")
        return scrub_credentials(text)

    def _sync_client(self) -> OpenAI:
        with self._lock:
            if self._client is None:
                from openai import OpenAI

                self._client = OpenAI(base_url=self._url, api_key=self._api_key,
                                      default_query=self._query or None,
                                      timeout=self.timeout, max_retries=self.max_retries,
                                      http_client=_deadline_http_client())
            return self._client

    def _async_client(self) -> AsyncOpenAI:
        # an httpx async client belongs to the event loop it first ran on: one per loop
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._aclients.get(loop)
            if client is None:
                from openai import AsyncOpenAI

                client = AsyncOpenAI(base_url=self._url, api_key=self._api_key,
                                     default_query=self._query or None,
                                     timeout=self.timeout, max_retries=self.max_retries)
                self._aclients[loop] = client
            return client

    def _request(
        self, messages: list[Message], max_tokens: int, temperature: float, timeout: float | None
    ) -> dict[str, Any]:
        timeout = self.timeout if timeout is None else timeout
        _check_request(max_tokens, temperature, timeout)
        return {"model": self.model, "messages": _check_messages(messages),
                "max_tokens": max_tokens, "temperature": float(temperature),
                "timeout": float(timeout)}

    def _text(self, response: Any) -> str:
        error: LLMError | None = None
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, KeyError, TypeError) as exc:
            error = _scrubbed_error(
                f"{self.shown_url} returned no chat completion ({type(response).__name__}: "
                f"{type(exc).__name__})", exc)
        if error is not None:
            raise error from None
        if not isinstance(content, str) or not content.strip():
            raise LLMError(f"{self.shown_url} returned an empty completion")
        return content

    def _error(self, exc: Exception, timeout: float, late: bool = False) -> LLMError:
        """The ``LLMError`` for the client's ``exc``; a deadline's message when the answer's
        deadline passed (``late``), whichever wait of the request it stopped."""
        if late or isinstance(exc, asyncio.TimeoutError) \
                or type(exc).__name__ == "APITimeoutError":
            return _scrubbed_error(
                f"chat completion at {self.shown_url} (model {self.model!r}) failed: no "
                f"complete answer within the {timeout:g} s deadline", exc)
        status = _status_code(exc)
        shown = f"{type(exc).__name__}" + ("" if status is None else f" (HTTP {status})")
        return _scrubbed_error(
            f"chat completion at {self.shown_url} (model {self.model!r}) failed: "
            f"{shown}: {self._scrub(str(exc))}", exc)

    def complete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The reply text to ``messages``, within ``timeout`` seconds in all (default: the
        client's ``timeout``).

        Raises:
            LLMError: The request failed, or no complete reply came within ``timeout``, or
                the reply had no text.
        """
        request = self._request(messages, max_tokens, temperature, timeout)
        # one deadline for the whole answer: every wait of the connection ends at it
        end = time.monotonic() + request["timeout"]
        deadline = _DEADLINE.set(end)
        try:
            response = self._sync_client().chat.completions.create(**request)
        except Exception as exc:
            error = self._error(exc, request["timeout"], late=time.monotonic() >= end)
        else:
            return self._text(response)
        finally:
            _DEADLINE.reset(deadline)
        # raised outside the except block: the client's exception is no context of it
        raise error from None

    async def acomplete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """``complete`` on the running event loop."""
        request = self._request(messages, max_tokens, temperature, timeout)
        try:
            # one deadline for the whole answer, however slowly the server sends it
            response = await asyncio.wait_for(
                self._async_client().chat.completions.create(**request), request["timeout"])
        except Exception as exc:
            error = self._error(exc, request["timeout"])
        else:
            return self._text(response)
        # raised outside the except block: the client's exception is no context of it
        raise error from None


def llm_from_env(
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> OpenAICompatibleLLM | None:
    """An ``OpenAICompatibleLLM`` if an endpoint is asked for, else ``None``.

    An endpoint is asked for when any argument is given or a model variable (``DHRAG_MODEL``,
    ``OPENAI_MODEL``) is set; an incomplete configuration then raises ``ValueError``.
    """
    env = os.environ if env is None else env
    if base_url is None and model is None and api_key is None and _env(env, *MODEL_ENV) is None:
        return None
    return OpenAICompatibleLLM(base_url, model, api_key, env=env, **kwargs)

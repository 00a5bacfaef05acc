"""A LlamaIndex LLM as ``dhrag_core``'s ``LLM``, and the checks on the LLM a component is given.

* ``LlamaIndexLLM``: any LlamaIndex LLM behind the ``LLM`` protocol, for the core's
  ``LLMRewriter`` (its prompt, gate and fallback).
* ``check_llm`` / ``configured_llm``: the LLM passed in, or LlamaIndex's ``Settings.llm``.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms.llm import LLM
from llama_index.core.settings import Settings as LlamaSettings

from dhrag_core.llm import LLMError, Message, failures_as_llm_error, framework_messages

__all__ = ["LlamaIndexLLM", "check_llm", "configured_llm"]

_ROLES = {"system": MessageRole.SYSTEM, "user": MessageRole.USER,
          "assistant": MessageRole.ASSISTANT}


class LlamaIndexLLM:
    """A LlamaIndex LLM as dhrag_core's ``LLM`` protocol (``complete``/``acomplete`` call its
    ``chat``/``achat``), for the core's ``LLMRewriter`` (its prompt, gate and fallback).

    ``max_tokens``, ``temperature`` and ``timeout`` are the LLM's own settings; failures are
    raised as ``LLMError``, which makes the rewriter fall back.

    Example:
        >>> from llama_index.core.llms import MockLLM
        >>> from dhrag_core import LLMRewriter
        >>> rewriter = LLMRewriter(LlamaIndexLLM(MockLLM()))
    """

    def __init__(self, llm: LLM) -> None:
        if not isinstance(llm, LLM):
            raise TypeError(f"llm must be a llama_index LLM, got {type(llm).__name__}")
        self.llm = llm

    @staticmethod
    def _messages(messages: list[Message]) -> list[ChatMessage]:
        return [ChatMessage(role=role, content=content)
                for role, content in framework_messages(messages, _ROLES)]

    @staticmethod
    def _text(content: Any) -> str:
        if not isinstance(content, str) or not content.strip():
            raise LLMError("the LLM returned an empty reply")
        return content

    def complete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The LLM's reply text (``chat``)."""
        with failures_as_llm_error("LLM"):
            reply = self.llm.chat(self._messages(messages))
        return self._text(reply.message.content)

    async def acomplete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The LLM's reply text (``achat``, on the running loop)."""
        with failures_as_llm_error("LLM"):
            reply = await self.llm.achat(self._messages(messages))
        return self._text(reply.message.content)


def check_llm(llm: Any) -> LLM:
    """``llm`` if it is a LlamaIndex LLM, else ``TypeError``."""
    if not isinstance(llm, LLM):
        raise TypeError(
            f"llm must be a llama_index LLM (pass it explicitly), got {type(llm).__name__}"
        )
    return llm


def configured_llm() -> LLM:
    """LlamaIndex's ``Settings.llm``, or a ``ValueError`` saying how to give one."""
    try:
        llm = LlamaSettings.llm
    except Exception as exc:  # LlamaIndex's default (OpenAI) could not be loaded
        raise ValueError(
            "no llm: pass llm=... or set llama_index.core.Settings.llm "
            f"(LlamaIndex's default LLM is not available: {exc})"
        ) from exc
    return check_llm(llm)

"""A LangChain chat model as ``dhrag_core``'s ``LLM``, for the core's ``LLMRewriter``.

* ``LangChainLLM``: any chat model (or runnable) behind the ``LLM`` protocol.
* ``as_rewriter``: a chat model as the core's ``LLMRewriter``; a dhrag rewriter as it is.

``LangChainLLM`` was ``ChatModelLLM``, a name that still works for one release (with a
``DeprecationWarning``).
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable

from dhrag_core import LLMRewriter, QueryRewriter
from dhrag_core.deprecation import renamed_attribute
from dhrag_core.llm import LLMError, Message, failures_as_llm_error, framework_messages
from langchain_dhrag._context import child_config

__all__ = ["LangChainLLM", "as_rewriter"]

_ROLES: dict[str, type[BaseMessage]] = {
    "system": SystemMessage, "user": HumanMessage, "assistant": AIMessage,
}


class LangChainLLM:
    """A LangChain chat model as dhrag_core's ``LLM`` protocol (``complete``/``acomplete``),
    for the core's ``LLMRewriter`` (its prompt, gate and fallback); the LlamaIndex adapter's
    counterpart is ``LlamaIndexLLM``.

    ``max_tokens``, ``temperature`` and ``timeout`` are the model's own settings (configure
    the model); failures are raised as ``LLMError``, which makes the rewriter fall back.

    Args:
        model: A chat model, or any runnable taking messages and returning a message or str.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> from dhrag_core import LLMRewriter
        >>> llm = LangChainLLM(FakeListChatModel(responses=["How long is the Great Wall?"]))
        >>> llm.complete([{"role": "user", "content": "How long is it?"}])
        'How long is the Great Wall?'
        >>> rewriter = LLMRewriter(llm)
    """

    def __init__(self, model: BaseChatModel | Runnable[Any, Any]) -> None:
        if not isinstance(model, Runnable):
            raise TypeError(
                f"model must be a LangChain chat model or Runnable, got {type(model).__name__}"
            )
        self.model = model

    @staticmethod
    def _messages(messages: list[Message]) -> list[BaseMessage]:
        return [role(content) for role, content in framework_messages(messages, _ROLES)]

    @staticmethod
    def _text(out: Any) -> str:
        text = out.text if isinstance(out, BaseMessage) else out
        if not isinstance(text, str):
            raise LLMError(f"the model returned {type(out).__name__}, not a message or str")
        if not text.strip():
            raise LLMError("the model returned an empty reply")
        return text

    def complete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The model's reply text (``invoke``)."""
        with failures_as_llm_error("chat model"):
            out = self.model.invoke(self._messages(messages), child_config())
        return self._text(out)

    async def acomplete(
        self, messages: list[Message], *, max_tokens: int = 256, temperature: float = 0.0,
        timeout: float | None = None,
    ) -> str:
        """The model's reply text (``ainvoke``, on the running loop)."""
        with failures_as_llm_error("chat model"):
            out = await self.model.ainvoke(self._messages(messages), child_config())
        return self._text(out)


def as_rewriter(rewriter: Any) -> QueryRewriter | None:
    """A chat model (or runnable) as the core's ``LLMRewriter(LangChainLLM(model))``; a
    dhrag rewriter or None as it is."""
    if rewriter is None or isinstance(rewriter, QueryRewriter):
        return rewriter
    if isinstance(rewriter, Runnable):
        return LLMRewriter(LangChainLLM(rewriter))
    raise TypeError(
        "rewriter must be a dhrag QueryRewriter or a LangChain chat model, got "
        f"{type(rewriter).__name__}"
    )


def __getattr__(name: str) -> Any:
    return renamed_attribute(__name__, name, {"ChatModelLLM": "LangChainLLM"}, globals())

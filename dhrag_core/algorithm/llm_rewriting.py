"""Query reconstruction by an LLM (paper eq. 8), falling back to the light rewriter.

The prompt shows the history turns DH-RAG *selected* for the query -- both what the user asked
and what the assistant answered (the entity an "it" stands for is often only in the answer) --
and asks for one standalone question. Any failure (timeout, HTTP error, an empty or absurd
reply) logs a warning and returns the fallback rewriter's result: rewriting never raises.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

from dhrag_core.algorithm.rewriting import LightRewriter, QueryRewriter, Rewrite, is_incomplete
from dhrag_core.embedding import tokens
from dhrag_core.llm import LLM, Message, OpenAICompatibleLLM
from dhrag_core.records import SelectedTurn
from dhrag_core.transcript import format_transcript
from dhrag_core.validation import printable

__all__ = [
    "LLMRewriter",
    "clean_rewrite",
    "default_gate",
    "rewrite_messages",
]

log = logging.getLogger(__name__)

Gate = Callable[[str, Sequence[SelectedTurn]], bool]

SYSTEM_PROMPT = (
    "You rewrite the last question of a conversation into one standalone question that can be "
    "understood without the conversation. Replace pronouns and vague references with the names "
    "and things they refer to, taken from the conversation. Keep the meaning and the wording "
    "of the question otherwise; do not answer it. Reply with the rewritten question only."
)


def default_gate(query: str, history: Sequence[SelectedTurn], short_words: int = 6) -> bool:
    """Rewrite when the query leans on the conversation (``is_incomplete``), or when there is
    history and the query is short (at most ``short_words`` words)."""
    if is_incomplete(query):
        return True
    return bool(history) and len(query.split()) <= short_words


def rewrite_messages(
    query: str, history: Sequence[SelectedTurn], max_turn_chars: int = 600
) -> list[Message]:
    """The chat messages asking for a standalone version of ``query``: the selected turns as a
    transcript (both sides: an answer often names what the next question omits), each text
    clipped to ``max_turn_chars``."""
    convo = format_transcript(history, max_chars=max_turn_chars) or "(no earlier turns)"
    user = (f"Conversation so far:\n{convo}\n\nLast question: {query.strip()}\n\n"
            "Standalone question:")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"^```[\w-]*$")
_LABEL = re.compile(
    r"^(?:(?:standalone|rewritten|reformulated|final|self-contained)\s*)?"
    r"(?:question|query|rewrite|rewritten|version|output)?\s*(?:[:\uff1a]|(?<=\w)\s+-)\s*",
    re.I,
)
_MARKER = re.compile(r"^(?:#+\s*|>\s*|[-*•]\s+|\d+[.)]\s+)")
_EMPHASIS = re.compile(r"^(\*\*|__)(.*?)\1")
_PAIRS = (("**", "**"), ("__", "__"), ('"', '"'), ("'", "'"), ("`", "`"), ("\u201c", "\u201d"),
          ("\u2018", "\u2019"), ("«", "»"), ("*", "*"), ("_", "_"))


def _unwrap(text: str) -> str:
    """Strip surrounding quotes and emphasis, repeatedly ('"**What?**"' -> 'What?')."""
    text = text.strip()
    while True:
        for left, right in _PAIRS:
            if len(text) > len(left) + len(right) and text.startswith(left) and (
                text.endswith(right)
            ):
                text = text[len(left) : -len(right)].strip()
                break
        else:
            return text


def _unlabel(line: str) -> str:
    """Strip markdown markers and a leading label ("**Standalone question:** What ...")."""
    for _ in range(4):
        before = line
        line = _MARKER.sub("", line.strip())
        line = _EMPHASIS.sub(lambda m: m.group(2) + " ", line).strip()
        line = _LABEL.sub("", line, count=1).strip()
        if line == before:
            break
    return line


def clean_rewrite(reply: str, max_chars: int = 400) -> str | None:
    """The question in an LLM reply, or ``None`` if there is no usable one.

    Drops ``<think>`` blocks, code fences, markdown markers, a leading label ("Standalone
    question:", "Rewritten:"), preamble lines ending in a colon and surrounding quotes; keeps
    the first line with text. Replies longer than ``max_chars`` (an answer or an essay, not a
    question) are rejected.
    """
    for raw in _THINK.sub("", reply).splitlines():
        line = raw.strip()
        if not line or _FENCE.match(line) or line.endswith((":", "\uff1a")):
            continue
        line = " ".join(_unwrap(_unlabel(_unwrap(line))).split())
        if not line:
            continue
        return line if len(line) <= max_chars else None
    return None


class LLMRewriter:
    """``QueryRewriter`` that asks an LLM for a standalone question.

    Args:
        llm: Any ``LLM``; default: ``OpenAICompatibleLLM()`` from the environment.
        fallback: Used when the LLM fails; default: ``LightRewriter()``.
        gate: ``True`` rewrites only where ``default_gate`` says so (incomplete, or short with
            history), ``False`` rewrites every query that has history, or a callable
            ``(query, history) -> bool``. Gated-out queries are returned unchanged.
        timeout: Seconds to wait for the LLM.
        max_tokens: Reply length limit.
        temperature: Sampling temperature.
        max_turn_chars: Each history query/answer is clipped to this in the prompt.
        max_chars: Longer replies are rejected (fallback).
    """

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        fallback: QueryRewriter | None = None,
        gate: bool | Gate = True,
        timeout: float = 10.0,
        max_tokens: int = 96,
        temperature: float = 0.0,
        max_turn_chars: int = 600,
        max_chars: int = 400,
    ) -> None:
        if llm is not None and not isinstance(llm, LLM):
            raise TypeError("llm must have complete() and acomplete() (the LLM protocol)")
        if fallback is not None and not isinstance(fallback, QueryRewriter):
            raise TypeError("fallback must have rewrite(query, history) (QueryRewriter)")
        if not (isinstance(gate, bool) or callable(gate)):
            raise TypeError(f"gate must be a bool or a callable, got {type(gate).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            0.0 <= temperature <= 2.0
        ):
            raise ValueError(f"temperature must be a number in [0, 2], got {temperature!r}")
        for name, value in (("max_tokens", max_tokens), ("max_turn_chars", max_turn_chars),
                            ("max_chars", max_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.llm: LLM = llm if llm is not None else OpenAICompatibleLLM()
        self.fallback: QueryRewriter = fallback if fallback is not None else LightRewriter()
        self.gate = gate
        self.timeout = float(timeout)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_turn_chars = max_turn_chars
        self.max_chars = max_chars

    def wants(self, query: str, history: Sequence[SelectedTurn]) -> bool:
        """Whether ``query`` goes to the LLM (the gate)."""
        if not history:
            return False
        if self.gate is True:
            return default_gate(query, history)
        if self.gate is False:
            return True
        return bool(self.gate(query, history))

    def _result(self, query: str, reply: str) -> Rewrite:
        text = clean_rewrite(reply, self.max_chars)
        if text is None:
            raise ValueError(f"unusable rewrite {reply[:80]!r}")
        present = set(tokens(query))
        added = tuple(w for w in dict.fromkeys(tokens(text)) if w not in present)
        return Rewrite(text, added)

    def _fallback(self, query: str, history: Sequence[SelectedTurn], exc: Exception) -> Rewrite:
        log.warning("LLM rewrite of %r failed (%s); using %s", query[:80],
                    printable(str(exc)), type(self.fallback).__name__)
        try:
            return self.fallback.rewrite(query, history)
        except Exception:  # never let rewriting break a turn
            log.exception("fallback rewriter failed; using the query as is")
            return Rewrite(query)

    def rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        """A standalone version of ``query`` (the fallback's on any LLM failure)."""
        if not self.wants(query, history):
            return Rewrite(query)
        try:
            messages = rewrite_messages(query, history, self.max_turn_chars)
            reply = self.llm.complete(messages, max_tokens=self.max_tokens,
                                      temperature=self.temperature, timeout=self.timeout)
            return self._result(query, reply)
        except Exception as exc:
            return self._fallback(query, history, exc)

    async def arewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        """``rewrite`` awaiting the LLM's ``acomplete`` on the running loop."""
        if not self.wants(query, history):
            return Rewrite(query)
        try:
            messages = rewrite_messages(query, history, self.max_turn_chars)
            reply = await self.llm.acomplete(messages, max_tokens=self.max_tokens,
                                             temperature=self.temperature, timeout=self.timeout)
            return self._result(query, reply)
        except Exception as exc:
            return self._fallback(query, history, exc)

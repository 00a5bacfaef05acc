"""``dhrag chat``: an interactive DH-RAG conversation over your own files (the session and
its answers; the terminal loop and options are in ``chat_cli``).

Each line typed is one turn: ``select`` (history, rewritten query, integrated context), an
answer -- from an OpenAI-compatible LLM when one is configured, else the offline extractive
answerer, labelled as such -- then ``record``. The session lives in a SQLite file, so a restart
with the same ``--session`` continues the conversation.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from dhrag_core.app.answering import ExtractiveAnswerer
from dhrag_core.llm import LLM, LLMError, Message
from dhrag_core.pipeline.engine import DHRAG
from dhrag_core.private_files import create_private
from dhrag_core.records import Passage, Selection
from dhrag_core.store import PostgresStore, SQLiteStore, redact_dsn
from dhrag_core.transcript import clip, describe_selected, exchanges, in_turn_order
from dhrag_core.validation import check_k, check_session_id, one_line, printable

__all__ = [
    "ChatSession",
    "LLMAnswerer",
    "Reply",
    "default_session",
    "default_store_url",
    "plural",
    "printable",
    "render",
]

log = logging.getLogger(__name__)

ANSWER_SYSTEM_PROMPT = (
    "You are a helpful assistant in a multi-turn conversation. Answer the user's last "
    "question from the numbered context passages (cite them like [1]) and the conversation. "
    "If the context does not hold the answer, say so briefly. Be concise."
)


def default_store_url() -> str:
    """``sqlite:///$XDG_DATA_HOME/dhrag/chat.db`` (default ``~/.local/share/dhrag/chat.db``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base).expanduser() / 'dhrag' / 'chat.db'}"


def default_session(kb: str | os.PathLike[str]) -> str:
    """The default session of a knowledge base: its name and a hash of its absolute path, so
    that chats over different knowledge bases never continue one another."""
    path = Path(kb).expanduser().resolve()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name)[:40] or "kb"
    return f"{name}-{hashlib.sha1(str(path).encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _body(p: Passage) -> str:
    """Passage text without its heading line."""
    return p.text.split("\n", 1)[-1] if "\n" in p.text.strip() else p.text


@dataclass(frozen=True)
class Reply:
    """An answer and where it came from: ``"llm"``, ``"extract"`` or ``"none"``."""

    text: str
    source: str
    passages: tuple[Passage, ...] = ()
    note: str = ""


class LLMAnswerer:
    """Answers from the raw question, the integrated context and the selected history turns.

    Args:
        llm: Any ``LLM``.
        passages: Most context passages shown.
        max_passage_chars: Each passage is clipped to this.
        max_tokens, temperature: Passed to ``llm.complete``.
        timeout: The deadline of an answer in seconds, passed to ``llm.complete``; default:
            the LLM's own (``OpenAICompatibleLLM(timeout=)``, ``dhrag chat --timeout``).
    """

    def __init__(
        self, llm: LLM, *, passages: int = 5, max_passage_chars: int = 1500,
        max_tokens: int = 512, temperature: float = 0.2, timeout: float | None = None,
    ) -> None:
        self.llm = llm
        self.passages = passages
        self.max_passage_chars = max_passage_chars
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.timeout = timeout

    def messages(self, selection: Selection) -> list[Message]:
        """System prompt, the selected history as user/assistant turns, then context + question.
        """
        msgs: list[Message] = [{"role": "system", "content": ANSWER_SYSTEM_PROMPT}]
        msgs += [{"role": role, "content": text}
                 for role, text in exchanges(in_turn_order(selection.history))]
        ctx = "\n\n".join(
            f"[{i}] {p.title or p.id or 'passage'}: {clip(_body(p), self.max_passage_chars)}"
            for i, p in enumerate(selection.passages[: self.passages], 1)
        )
        msgs.append({"role": "user",
                     "content": f"Context:\n{ctx or '(none)'}\n\nQuestion: {selection.query}"})
        return msgs

    def answer(self, selection: Selection) -> str:
        """The LLM's answer (raises ``LLMError`` on failure)."""
        timeout = {} if self.timeout is None else {"timeout": self.timeout}
        return self.llm.complete(self.messages(selection), max_tokens=self.max_tokens,
                                 temperature=self.temperature, **timeout).strip()


class ChatSession:
    """One conversation: ask, trace, reset; what the ``dhrag chat`` loop drives.

    Args:
        rag: The pipeline (its history store keeps the session).
        session_id: Conversation name.
        llm: Generates answers when given; else (or when it fails) extracts them.
        store_url: Shown by ``where``.
        k: Context passages per turn (default: ``rag.settings.retrieval.context_k``).
        kb: The knowledge base, recorded with each turn (``dhrag sessions`` shows it).
    """

    def __init__(
        self, rag: DHRAG, session_id: str, *, llm: LLM | None = None,
        store_url: str = "memory", k: int | None = None, kb: str = "",
    ) -> None:
        self.rag = rag
        self.session_id = check_session_id(session_id)
        self.k = None if k is None else check_k(k)
        self.kb = kb
        self.llm_answerer = LLMAnswerer(llm) if llm is not None else None
        self.extractive = ExtractiveAnswerer(rag.history.embedder)
        self.store_url = store_url
        self.last: tuple[Selection, Reply] | None = None

    @property
    def turns(self) -> int:
        """Turns stored for this session."""
        return self.rag.history.size(self.session_id)

    def _extract(self, sel: Selection, note: str = "") -> Reply:
        found = self.extractive.answer(sel.rewritten_query, sel.passages)
        if found is None:
            return Reply("(no answer: nothing in the context matches the question)", "none",
                         note=note)
        return Reply(found.text, "extract", (found.passage,), note)

    def answer(self, sel: Selection) -> Reply:
        """The LLM's answer, else (no LLM, or it failed) the best context sentence."""
        if self.llm_answerer is None:
            return self._extract(sel)
        try:
            text = self.llm_answerer.answer(sel)
        except LLMError as exc:
            log.warning("%s", one_line(exc))
            return self._extract(sel, note=f"LLM failed: {clip(str(exc), 160)}")
        shown = tuple(sel.passages[: self.llm_answerer.passages])
        return Reply(text, "llm", shown)

    def ask(self, question: str) -> tuple[Selection, Reply]:
        """One turn: select, answer, record."""
        sel = self.rag.select(self.session_id, question, k=self.k)
        reply = self.answer(sel)
        meta = {"answered_by": reply.source, **({"kb": self.kb} if self.kb else {})}
        said = reply.text if reply.source != "none" else ""  # "no answer" is no topic
        self.rag.record(self.session_id, question, said, selection=sel, metadata=meta)
        self.last = (sel, reply)
        return sel, reply

    def reset(self) -> int:
        """Forget the session; the number of turns forgotten."""
        n = self.turns
        self.rag.reset(self.session_id)
        self.last = None
        return n

    def where(self) -> str:
        """Where the session persists, in words, with the command that continues it (each
        argument shell-quoted, so it can be pasted as it is)."""
        store = self.rag.history.store
        if isinstance(store, SQLiteStore):
            return (f"session {self.session_id!r} is saved after every turn in "
                    f"{self.store_url.removeprefix('sqlite:///')} ({self.turns} turns); "
                    f"continue it with: {self._command(self.store_url)}")
        if isinstance(store, PostgresStore):
            return (f"session {self.session_id!r} is saved after every turn in PostgreSQL "
                    f"{redact_dsn(store.dsn)} ({self.turns} turns); continue it with: "
                    f"{self._command(redact_dsn(store.dsn))}")
        return (f"session {self.session_id!r} is in memory only ({self.turns} turns) and ends "
                "with this process; pass --store sqlite:///PATH.db to keep it, or /save FILE")

    def _command(self, store: str) -> str:
        """``dhrag chat`` over this knowledge base, session and store, shell-quoted."""
        kb = ["--kb", self.kb] if self.kb else []
        return shlex.join(["dhrag", "chat", *kb, "--session", self.session_id, "--store", store])

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the conversation to a new Markdown file (an existing file is never
        overwritten); what was done, in words."""
        turns = self.rag.history.turns(self.session_id)
        if not turns:
            raise ValueError("nothing to save: this session has no turns yet")
        target = Path(path).expanduser()
        parts = [f"# dhrag session {self.session_id!r}\n"]
        for t in turns:
            sources = ", ".join(p.id or p.title for p in t.passages[:3])
            parts.append(f"## {t.index + 1}. {t.query}\n\n{t.response}\n\n"
                         f"*answered by {t.metadata.get('answered_by', '?')}; "
                         f"sources: {sources or '(none)'}*\n")
        try:
            create_private(target, "\n".join(parts))
        except FileExistsError:
            raise FileExistsError(f"{target} exists; /save writes a new file only, so give "
                                  "another name") from None
        return f"wrote {plural(len(turns), 'turn')} of session {self.session_id!r} to {target}"

    def trace(self) -> str:
        """The last turn's selection: rewritten query, selected history, context weights."""
        if self.last is None:
            return self._stored_trace()
        sel, reply = self.last
        lines = [f"trace of {sel.query!r}", f"  rewritten query: {sel.rewritten_query}"]
        if sel.history:
            lines.append("  selected history:")
            lines += ["    " + describe_selected(h, query_chars=60, response_chars=50)
                      for h in sel.history]
        else:
            lines.append("  selected history: (none)")
        lines.append("  context:")
        for i, c in enumerate(sel.context, 1):
            turn = f" (turn {c.selected.turn.index + 1})" if c.selected is not None else ""
            lines.append(
                f"    {i:>2}. weight={c.weight:.3f} similarity={c.similarity:.3f} "
                f"{c.source}{turn} [{c.passage.title}] {c.passage.id or ''}"
            )
        lines.append(f"  answered by: {reply.source}")
        return "\n".join(lines)

    def _stored_trace(self) -> str:
        """The last stored turn, for a session continued after a restart."""
        turns = self.rag.history.turns(self.session_id)
        if not turns:
            return "(no turn yet in this session)"
        t = turns[-1]
        lines = [f"trace of {t.query!r} (turn {t.index + 1}, asked before this start: its "
                 "weights were not kept; the next question is traced in full)",
                 "  passages recorded with it:"]
        lines += [f"    {i:>2}. [{p.title}] {p.id or ''}" for i, p in enumerate(t.passages, 1)]
        lines.append(f"  answered by: {t.metadata.get('answered_by', '?')}")
        return "\n".join(lines)


def render(reply: Reply) -> str:
    """A reply as the chat prints it."""
    if reply.source == "llm":
        cites = ", ".join(f"[{i}] {p.title or p.id}" for i, p in enumerate(reply.passages, 1))
        return f"dhrag> {reply.text}\n       sources: {cites or '(none)'}"
    note = f"; {reply.note}" if reply.note else ""
    if reply.source == "extract":
        p = reply.passages[0]
        return (f"dhrag> (extract, no LLM{note}) {reply.text}\n"
                f"       source: [{p.title}] {p.id or ''}")
    return f"dhrag> {reply.text}" + (f" ({reply.note})" if reply.note else "")

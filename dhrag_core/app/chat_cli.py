"""``dhrag chat`` on a terminal: the question loop, its commands, line-editing history, and
the command-line options of ``dhrag chat`` and ``dhrag sessions``."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import os
import sys
import unicodedata
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from dhrag_core.algorithm.llm_rewriting import LLMRewriter
from dhrag_core.app.chat import (
    ChatSession,
    default_session,
    default_store_url,
    plural,
    printable,
    render,
)
from dhrag_core.app.interrupt import exit_on_interrupt
from dhrag_core.embedding import Embedder, HashingEmbedder, default_embedder
from dhrag_core.history import HistoryDatabase
from dhrag_core.knowledge.embed_cache import warm_up
from dhrag_core.knowledge.ingest import load_kb
from dhrag_core.llm import OpenAICompatibleLLM, llm_from_env
from dhrag_core.pipeline.engine import DHRAG
from dhrag_core.settings import Limits, Settings, Threads
from dhrag_core.store import redact_dsn
from dhrag_core.validation import check_k, check_session_id

__all__ = [
    "CHAT_DESCRIPTION",
    "add_chat_arguments",
    "add_sessions_arguments",
    "chat_loop",
    "forget_lines",
    "main",
    "run_chat",
]

COMMANDS = "/trace  /reset  /save  /help  /quit"
HELP = (
    ("/trace", "why the last answer's passages were chosen: rewritten query, selected "
               "history, context weights"),
    ("/save [FILE]", "write the conversation to FILE as Markdown; without FILE, say where it "
                     "is already saved (after every turn)"),
    ("/reset", "forget this session's turns (asks first on a terminal)"),
    ("/help", "this list"),
    ("/quit", "leave (also Ctrl-D); the session is kept for the next start"),
)
CHAT_DESCRIPTION = (
    "Chat over a folder of .txt/.md files or a JSONL of passages. Each question is one DH-RAG "
    "turn: select (history, rewritten query, context), answer (an OpenAI-compatible LLM when "
    "configured, else a labelled extract), record. The session is stored, so a restart over "
    "the same knowledge base continues it; each knowledge base has its own default session."
)


def _lines(stdin: TextIO, stdout: TextIO, interactive: bool) -> Iterator[str]:
    while True:
        if interactive:
            try:
                yield input("you> ")
            except EOFError:
                stdout.write("\n")
                return
        else:
            line = stdin.readline()
            if not line:
                return
            yield line.rstrip("\n")


def _history_file() -> Path:
    """The line-editing history of ``dhrag chat`` (next to the default store)."""
    return Path(default_store_url().removeprefix("sqlite:///")).with_name("chat_history")


def _save_history() -> None:
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return
    path = _history_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        readline.set_history_length(1000)
        readline.write_history_file(path)


def _readline_history() -> None:
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return
    with contextlib.suppress(OSError):
        readline.read_history_file(_history_file())
    atexit.register(_save_history)


def forget_lines(lines: Iterable[str]) -> int:
    """Remove ``lines`` from the line-editing history, in memory and in its file (after
    ``/reset``, what was typed must not stay behind); the number of entries removed."""
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return 0
    drop = {line.strip() for line in lines if line.strip()}
    removed = 0
    for pos in range(readline.get_current_history_length() - 1, -1, -1):
        item = readline.get_history_item(pos + 1)  # 1-based, unlike remove_history_item
        if item is not None and item.strip() in drop:
            readline.remove_history_item(pos)
            removed += 1
    _save_history()
    return removed


def _run_line(
    session: ChatSession, line: str, command: str | None, typed: list[str], interactive: bool
) -> str:
    """What one question or command prints."""
    if command == "/trace":
        return session.trace()
    if command == "/reset":
        asked = [t.query for t in session.rag.history.turns(session.session_id)]
        if interactive and asked and not _confirm(
                f"forget the {plural(len(asked), 'turn')} of session "
                f"{session.session_id!r}? [y/N] "):
            return f"kept session {session.session_id!r}"
        out = f"forgot session {session.session_id!r} ({session.reset()} turns)"
        if interactive:
            forget_lines(asked + typed)
        return out
    if command == "/save":
        name = line.split(maxsplit=1)[1].strip() if len(line.split(maxsplit=1)) > 1 else ""
        return session.save(name) if name else session.where()
    if command == "/help":
        return "\n".join(f"  {name:<13} {what}" for name, what in HELP)
    if command is not None:
        return f"unknown command {command}; commands: {COMMANDS} (/help says what they do)"
    _, reply = session.ask(line)
    return render(reply)


def _confirm(prompt: str) -> bool:
    """A y/N answer read on the terminal (kept out of the line-editing history)."""
    try:
        answer = input(prompt)
    except EOFError:
        return False
    with contextlib.suppress(ImportError, ValueError):
        import readline

        n = readline.get_current_history_length()
        if n and readline.get_history_item(n) == answer:
            readline.remove_history_item(n - 1)
    return answer.strip().lower() in ("y", "yes")


def chat_loop(
    session: ChatSession, stdin: TextIO, stdout: TextIO, *, interactive: bool = False
) -> int:
    """Read questions and commands until ``/quit`` or end of input; 0 when done."""
    typed: list[str] = []  # this session's lines, forgotten by /reset
    for raw in _lines(stdin, stdout, interactive):
        line = raw.strip()
        if not line:
            continue
        typed.append(line)
        command = line.split()[0].lower() if line.startswith("/") else None
        if command in ("/quit", "/exit"):
            break
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", UserWarning)
                out = _run_line(session, line, command, typed, interactive)
            out = "".join(f"warning: {w.message}\n" for w in said
                          if issubclass(w.category, UserWarning)) + out
        except (TypeError, ValueError, OSError) as exc:  # OSError: the store failed
            out = f"error: {exc}"
        if command == "/reset":
            typed = []
        stdout.write(printable(out) + "\n")
        stdout.flush()
    stdout.write("bye\n")
    stdout.flush()
    return 0


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dhrag chat``."""
    parser.add_argument("--kb", required=True, type=Path,
                        help="folder of .txt/.md files, or a .jsonl of {id, text, title}")
    parser.add_argument("--session", default=None,
                        help="conversation name; the same name continues a stored conversation "
                             "(default: one per knowledge base, named after it)")
    parser.add_argument("--store", default=None,
                        help="history store: sqlite:///PATH.db (PATH relative to the current "
                             "folder; an absolute path takes four slashes: "
                             "sqlite:////home/me/chat.db; default: "
                             "~/.local/share/dhrag/chat.db), memory, or "
                             "postgresql://user:password@host:port/db")
    parser.add_argument("--base-url", default=None,
                        help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")
    parser.add_argument("--model", default=None,
                        help="model name (default: $DHRAG_MODEL or $OPENAI_MODEL); without a "
                             "model, answers are extracts from the context (no LLM)")
    parser.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="deadline in seconds of each LLM answer (and rewrite), however "
                             "slowly the server sends it (default 60)")
    parser.add_argument("--llm-rewrite", action="store_true",
                        help="rewrite follow-up questions with the LLM too (default: light)")
    parser.add_argument("--k", type=int, default=None,
                        help="context passages per turn (default: 10)")
    parser.add_argument("--min-words", type=int, default=120,
                        help="passage size of .txt/.md files, lower end in words (default 120)")
    parser.add_argument("--max-words", type=int, default=200,
                        help="passage size limit in words (default 200)")
    parser.add_argument("--thread-decision", choices=("fitted", "scores"), default="fitted",
                        help="how the earlier topic a question continues is chosen "
                             "(Settings.threads.thread_decision; default fitted)")
    parser.add_argument("--max-query-chars", type=int, default=Settings().limits.max_query_chars,
                        help="longest question used; a longer one is cut to it with a warning "
                             "(Settings.limits.max_query_chars; default %(default)s)")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm",
                        help=argparse.SUPPRESS)


def add_sessions_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dhrag sessions``."""
    parser.add_argument("--store", default=None,
                        help="history store, as for dhrag chat (default: "
                             "~/.local/share/dhrag/chat.db)")
    parser.add_argument("--delete", nargs="+", metavar="SESSION", default=[],
                        help="delete these sessions (their turns and derived state)")


def shown_id(session_id: str) -> str:
    """A session id as listed: as is when it prints as one unambiguous line, else escaped
    (``ascii``), so that a newline cannot forge a line and two ids that look alike (composed
    and decomposed accents, surrounding spaces) list differently."""
    plain = (session_id.isprintable() and session_id.strip() == session_id
             and unicodedata.normalize("NFC", session_id) == session_id)
    return session_id if plain else ascii(session_id)


def _store_url(arg: str | None) -> str:
    """The store URL with a SQLite path made absolute (``sqlite:///x.db`` is relative to the
    current folder), so that what is printed can be pasted back from anywhere."""
    url = arg or default_store_url()
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///")).expanduser()
        url = f"sqlite:///{path if path.is_absolute() else Path.cwd() / path}"
    return url


def _shown_store(url: str) -> str:
    if url.startswith("sqlite:///"):
        return f"SQLite file {url.removeprefix('sqlite:///')}"
    return redact_dsn(url)


def run_chat(args: argparse.Namespace, stdin: TextIO | None = None,
             stdout: TextIO | None = None) -> int:
    """The ``dhrag chat`` command."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    if isinstance(stdin, io.TextIOWrapper):
        stdin.reconfigure(errors="replace")  # undecodable input bytes: U+FFFD, not a crash
    try:
        llm: OpenAICompatibleLLM | None = llm_from_env(args.base_url, args.model, args.api_key,
                                                       timeout=args.timeout)
        k = None if args.k is None else check_k(args.k)
        most = Settings().limits.max_passages
        if k is not None and k > most:
            raise ValueError(f"--k {k} is above the {most} passages a turn can store "
                             "(Settings.limits.max_passages)")
        if not 1 <= args.min_words <= args.max_words:
            raise ValueError(f"need 1 <= --min-words <= --max-words, got {args.min_words} and "
                             f"{args.max_words}")
        if not Path(args.kb).expanduser().exists():  # before the model loads
            raise FileNotFoundError(f"knowledge base path {args.kb} does not exist")
        session_id = check_session_id(
            default_session(args.kb) if args.session is None else args.session)
        embedder: Embedder = (HashingEmbedder() if args.embedder == "hashing"
                              else default_embedder())
        store = _store_url(args.store)
        history = HistoryDatabase(embedder=embedder, store=store,
                                  settings=Settings(limits=Limits(max_query_chars=args.max_query_chars),
                                                    threads=Threads(thread_decision=args.thread_decision)))
        earlier = history.size(session_id)  # fails fast on a bad store
        with exit_on_interrupt("dhrag chat"):
            warm_up(embedder, "dhrag chat")
        kb = load_kb(args.kb, embedder, min_words=args.min_words, max_words=args.max_words)
        # --timeout is the deadline of every LLM call: a rewrite waits at most its usual 10 s
        rewriter = (LLMRewriter(llm, timeout=min(10.0, llm.timeout))
                    if llm is not None and args.llm_rewrite else None)
        rag = DHRAG(kb, history=history, rewriter=rewriter)
        session = ChatSession(rag, session_id, llm=llm, store_url=store, k=k,
                              kb=str(Path(args.kb).expanduser().resolve()))
    except (OSError, ValueError, TypeError, RuntimeError) as exc:  # Runtime: no weights
        sys.stderr.write(printable(f"dhrag chat: error: {exc}") + "\n")
        return 2
    answers = f"LLM {llm.model} at {llm.shown_url}" if llm else "extracts (no LLM)"
    if llm is None and os.environ.get("OPENAI_BASE_URL"):
        answers += " -- OPENAI_BASE_URL is set but no model: pass --model or set DHRAG_MODEL"
    stdout.write(printable(
        f"dhrag chat: {len(kb)} passages from {args.kb}; session {session_id!r} "
        f"({'continuing, ' + plural(earlier, 'earlier turn') if earlier else 'new'}) in "
        f"{_shown_store(store)}; answers: {answers}\ncommands: {COMMANDS}  (/help says what "
        "they do)\n"
    ))
    stdout.flush()
    interactive = stdin.isatty() and stdin is sys.stdin
    if interactive:
        _readline_history()
    try:
        return chat_loop(session, stdin, stdout, interactive=interactive)
    except KeyboardInterrupt:
        stdout.write("\nbye\n")
        return 130
    finally:
        rag.history.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dhrag_core.app.chat_cli``: the chat command alone."""
    ap = argparse.ArgumentParser(prog="dhrag chat", description=CHAT_DESCRIPTION)
    add_chat_arguments(ap)
    return run_chat(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

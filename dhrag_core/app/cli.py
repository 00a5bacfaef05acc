"""The ``dhrag`` command: ``demo`` (a scripted session, offline), ``chat`` (over your own files)
and ``sessions`` (list or delete stored conversations)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TextIO

from dhrag_core.app.answering import ExtractiveAnswerer
from dhrag_core.app.chat import plural, printable
from dhrag_core.app.chat_cli import (
    CHAT_DESCRIPTION,
    _shown_store,
    _store_url,
    add_chat_arguments,
    add_sessions_arguments,
    run_chat,
    shown_id,
)
from dhrag_core.app.demo import DEMO_TURNS, load_demo_kb
from dhrag_core.app.interrupt import exit_on_interrupt
from dhrag_core.embedding import default_embedder
from dhrag_core.knowledge.embed_cache import status, warm_up
from dhrag_core.pipeline.engine import DHRAG
from dhrag_core.records import Selection
from dhrag_core.settings import Ablations, Settings, Weighting
from dhrag_core.store import open_store, redact_dsn
from dhrag_core.store.base import SessionSummary, session_summaries
from dhrag_core.transcript import clip, describe_selected

__all__ = ["main"]


def _label(sel: Selection) -> str:
    p = sel.context[0].passage
    return clip(f"[{p.title}] {p.text.split(chr(10), 1)[-1]}", 40)


def _print_turn(out: TextIO, n: int, sel: Selection, answer: str) -> None:
    out.write(f"\n[{n}] user: {sel.query}\n")
    if sel.rewritten_query != sel.query:
        out.write(f"    reconstructed query: {sel.rewritten_query}\n")
    if sel.history:
        out.write("    history selected:\n")
        for h in sel.history:
            out.write(f"      {describe_selected(h, query_chars=50, digits=2)}\n")
    else:
        out.write("    history selected: (none)\n")
    if sel.history and sel.gated and sel.clarity is not None:
        out.write(f"    clear on its own (best passage {sel.clarity:.2f}): "
                  "ranked by the question alone\n")
    out.write("    context:\n")
    for c in sel.context[:3]:
        out.write(f"      w={c.weight:.2f} {c.source:<7} [{c.passage.title}] "
                  f"{clip(c.passage.text.split(chr(10), 1)[-1], 70)}\n")
    out.write(f"    answer (extract, no LLM): {clip(answer, 150)}\n")


def run_demo(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = sys.stdout
    try:
        store = open_store(args.store)
        store.sessions()  # a damaged file fails here, before the model loads
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"dhrag demo: error: {exc}\n")
        return 2
    embedder = default_embedder()
    with exit_on_interrupt("dhrag demo"):
        try:
            warm_up(embedder, "dhrag demo")
        except RuntimeError as exc:  # the weights are not installed: say how, in one line
            sys.stderr.write(f"dhrag demo: error: {exc}\n")
            return 2
    kb = load_demo_kb(embedder)
    rag = DHRAG(kb, embedder=embedder, store=store, settings=Settings())
    raw = DHRAG(kb, embedder=embedder, settings=Settings(weighting=Weighting(history_turns=1),
                                                         ablations=Ablations(use_rewrite=False)))
    answerer = ExtractiveAnswerer(embedder)
    session = "demo"
    rag.reset(session)
    out.write(f"dhrag demo: {len(kb)} Wikipedia passages (MTRAG ClapNQ), all-MiniLM-L6-v2 "
              f"offline, FAISS; history store: {redact_dsn(args.store)}\n")
    tops: list[tuple[str, str, str]] = []
    for n, question in enumerate(DEMO_TURNS, 1):
        sel = rag.select(session, question)
        extract = answerer.answer(sel.rewritten_query, sel.passages)
        answer = extract.text if extract else "(no answer: nothing in the context matches)"
        _print_turn(out, n, sel, answer)
        rag.record(session, question, answer, selection=sel)
        base = raw.select("raw", question)
        raw.record("raw", question, answer, selection=base)
        tops.append((question, _label(sel), _label(base)))
    out.write("\nTop passage per turn, DH-RAG vs the raw question alone (* where they differ):\n")
    for question, ours, theirs in tops:
        mark = "  " if ours == theirs else "* "
        out.write(f"  {mark}{clip(question, 44):<45} dhrag: {ours:<40} raw: {theirs}\n")
    stats = rag.history.stats(session)
    out.write(f"\nhistory: {stats['turns']} turns in {stats['clusters']} topic clusters, "
              f"{stats['chains']['chains']} chains; done in {time.perf_counter() - t0:.1f} s\n")
    rag.history.close()
    return 0


def _describe(s: SessionSummary) -> str:
    try:
        when = datetime.fromtimestamp(s.last_timestamp).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):  # a time no date can be made of
        when = "?"
    kb = s.last_metadata.get("kb") or "?"
    return f"{plural(s.turns, 'turn')}, last {when}, knowledge base {kb}"


def run_sessions(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    """The ``dhrag sessions`` command: list the stored sessions (from the store's
    per-session summaries: no turn is decoded), or delete some."""
    out = sys.stdout if stdout is None else stdout
    url = _store_url(args.store)
    shown = _shown_store(url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        if args.delete:
            sys.stderr.write(printable(f"dhrag sessions: error: no store at {shown}") + "\n")
            return 2
        out.write(printable(f"no sessions: {shown} does not exist yet") + "\n")
        return 0
    try:
        store = open_store(url)
        try:
            if args.delete:
                ids = set(store.sessions())
                missing = [s for s in args.delete if s not in ids]
                if missing:  # nothing is deleted when one name is wrong
                    raise ValueError(f"no session {missing[0]!r} in {shown}; "
                                     "'dhrag sessions' lists them")
                for sid in dict.fromkeys(args.delete):
                    store.delete_session(sid)
                    out.write(printable(f"deleted session {sid!r}") + "\n")
            else:
                found = session_summaries(store)
                out.write(printable(f"{plural(len(found), 'session')} in {shown}") + "\n")
                for summary in found:
                    out.write(printable(f"  {shown_id(summary.session_id)}: "
                                        f"{_describe(summary)}") + "\n")
        finally:
            store.close()
    except (OSError, ValueError, TypeError) as exc:
        sys.stderr.write(printable(f"dhrag sessions: error: {exc}") + "\n")
        return 2
    return 0


def _version() -> str:
    try:
        return version("dhrag")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree only
        return "unknown (not installed)"


def _verbose(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: "dhrag -v chat" keeps its value when the subcommand has no -v of its own
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log progress to stderr")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dhrag", description="DH-RAG conversational memory")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    ap.add_argument("--version", action="version", version=f"dhrag {_version()}")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scripted multi-turn session offline",
                          description="A scripted eight-turn conversation over the shipped "
                                      "Wikipedia passages, offline: what DH-RAG selects each "
                                      "turn, against the raw question alone.")
    _verbose(demo)
    demo.add_argument("--store", default="memory",
                      help="history store: memory (default), sqlite:///path.db (relative; "
                           "sqlite:////abs/path.db for an absolute path) or "
                           "postgresql://user:password@host:port/db")
    demo.set_defaults(func=run_demo)
    chat = sub.add_parser("chat", help="chat with DH-RAG over your own files (LLM optional)",
                          description=CHAT_DESCRIPTION)
    _verbose(chat)
    add_chat_arguments(chat)
    chat.set_defaults(func=run_chat)
    sessions = sub.add_parser("sessions", help="list or delete stored chat sessions",
                              description="List the conversations in a history store (turns, "
                                          "last activity, knowledge base), or delete some.")
    _verbose(sessions)
    add_sessions_arguments(sessions)
    sessions.set_defaults(func=run_sessions)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    command = "dhrag"
    try:  # Ctrl-C from the parser's version look-up on, also while the model loads
        args = build_parser().parse_args(argv)
        command = f"dhrag {args.command}"
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
        return int(args.func(args))
    except KeyboardInterrupt:  # no traceback: one line
        status(command, "interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())

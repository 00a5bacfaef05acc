"""The ``dhrag`` command: ``dhrag demo`` runs a scripted multi-turn session offline."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from dhrag_core.demo import DEMO_TURNS, load_demo_kb
from dhrag_core.embedding import MiniLMEmbedder
from dhrag_core.history import HistoryDatabase
from dhrag_core.settings import Settings

__all__ = ["main"]


def _short(text: str, width: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def run_demo(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    embedder = MiniLMEmbedder()
    kb = load_demo_kb(embedder)
    db = HistoryDatabase(embedder=embedder, store=args.store, settings=Settings())
    session = "demo"
    db.delete_session(session)
    out = sys.stdout
    out.write(f"dhrag demo: {len(kb)} Wikipedia passages, all-MiniLM-L6-v2 (offline), "
              f"history store: {args.store}\n")
    for turn_no, question in enumerate(DEMO_TURNS, 1):
        hits = db.search(session, question, k=2)
        passages = kb.search(question, 3)
        out.write(f"\n[{turn_no}] user: {question}\n")
        out.write("    history selected:\n" if hits else "    history selected: (empty)\n")
        for h in hits:
            out.write(f"      turn {h.turn.index + 1}: {_short(h.turn.query, 60)!r}  "
                      f"relevance={h.relevance:.2f} recency={h.recency:.2f} "
                      f"weight={h.weight:.2f}\n")
        out.write("    top passages:\n")
        for p in passages:
            out.write(f"      {p.score:.2f} [{p.title}] {_short(p.text.split(chr(10), 1)[-1])}\n")
        answer = passages[0].text.split("\n", 1)[-1].split(" . ")[0] + "." if passages else ""
        out.write(f"    answer (extractive, no LLM): {_short(answer, 120)}\n")
        db.add(session, question, passages, answer)
    out.write(f"\nstored turns: {db.size(session)}; done in {time.perf_counter() - t0:.1f} s\n")
    db.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dhrag", description="DH-RAG conversational memory")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scripted multi-turn session offline")
    demo.add_argument("--store", default="memory",
                      help="history store: memory (default) or sqlite:///path.db")
    demo.set_defaults(func=run_demo)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())

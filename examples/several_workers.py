"""Two worker processes serve one conversation through a shared PostgreSQL history (offline).

A load balancer may send each turn of a chat to a different worker. Here the demo
conversation alternates between two processes; each has its own DH-RAG engine (MiniLM, FAISS,
in-memory clusters and chains) over one ``PostgresStore``, notices the other's turns by the
session version, and completes follow-ups ("How long is it?") from turns the *other* worker
stored.

    python examples/several_workers.py                      # starts a throw-away server
    python examples/several_workers.py --dsn postgresql://user:pw@host/db

The throw-away server needs PostgreSQL's ``initdb`` and ``pg_ctl`` (Debian: ``apt-get install
postgresql``); with ``--dsn`` or ``$DHRAG_POSTGRES_DSN`` any server does.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import uuid
from typing import Any

TURNS = 6


def worker(name: str, dsn: str, inbox: Any, outbox: Any) -> None:
    """Answer the turns sent to this worker until it receives ``None``."""
    from dhrag_core import DHRAG, NumpyMiniLMEmbedder, PostgresStore
    from dhrag_core.app.answering import ExtractiveAnswerer
    from dhrag_core.app.demo import load_demo_kb

    embedder = NumpyMiniLMEmbedder()
    rag = DHRAG(load_demo_kb(embedder), embedder=embedder, store=PostgresStore(dsn))
    answerer = ExtractiveAnswerer(embedder)
    outbox.put((name, "ready", None))
    while (job := inbox.get()) is not None:
        session, question = job
        sel = rag.select(session, question)
        extract = answerer.answer(sel.rewritten_query, sel.passages)
        answer = extract.text if extract else "(no answer in the context)"
        rag.record(session, question, answer, selection=sel)
        outbox.put((name, "turn", {
            "question": question,
            "rewritten": sel.rewritten_query,
            "history": [(h.turn.index, h.turn.query) for h in sel.history],
            "top": sel.passages[0].title if sel.passages else "",
            "answer": answer,
        }))
    rag.history.close()


def run(dsn: str) -> list[dict[str, Any]]:
    """The demo's first turns, alternating between two workers; one record per turn."""
    from dhrag_core.app.demo import DEMO_TURNS

    ctx = mp.get_context("spawn")
    outbox = ctx.Queue()
    inboxes = [ctx.Queue(), ctx.Queue()]
    workers = [ctx.Process(target=worker, args=(f"worker-{i}", dsn, q, outbox))
               for i, q in enumerate(inboxes)]
    for w in workers:
        w.start()
    try:
        for _ in workers:
            outbox.get(timeout=300)
        session = f"user-{uuid.uuid4().hex[:8]}"
        records = []
        for n, question in enumerate(DEMO_TURNS[:TURNS]):
            inboxes[n % 2].put((session, question))  # the balancer alternates
            name, _, record = outbox.get(timeout=300)
            records.append({"worker": name, **record})
        return records
    finally:
        for q in inboxes:
            q.put(None)
        for w in workers:
            w.join(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("DHRAG_POSTGRES_DSN"))
    ap.add_argument("--json", action="store_true", help="print the turn records as JSON")
    args = ap.parse_args()
    server = None
    dsn = args.dsn
    if not dsn:
        from dhrag_core.testing import TempPostgres  # a throw-away server (PostgreSQL's binaries)

        server = TempPostgres()
        dsn = server.start()
    try:
        records = run(dsn)
        if args.json:
            print(json.dumps(records))
            return
        for n, r in enumerate(records, 1):
            print(f"[{n}] {r['worker']}: {r['question']}")
            print(f"    reconstructed query: {r['rewritten']}")
            if r["history"]:
                turns = ", ".join(f"turn {i + 1} {q!r}" for i, q in r["history"])
                print(f"    history (stored by either worker): {turns}")
            print(f"    top passage: [{r['top']}]  answer (extract): {r['answer'][:90]}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

"""Child process of ``test_rel_pg_durable``: writes numbered turns to a PostgreSQL history
until the server goes away.

    python tests/reliability/pg_writer.py DSN START

After each ``add`` returns it prints ``committed N`` and flushes, so the parent knows which
turns the library reported as stored when it crash-stops the server. When the store becomes
unavailable it prints ``unavailable: ...`` to stderr and exits with status 3.
"""

from __future__ import annotations

import sys

from crash_writer import DIM, SESSION, turn_text

UNAVAILABLE = 3


def main() -> None:
    from dhrag_core import (
        HashingEmbedder,
        HistoryDatabase,
        Limits,
        PostgresStore,
        Settings,
        Weighting,
    )
    from dhrag_core.store import StoreUnavailableError

    dsn, start = sys.argv[1], int(sys.argv[2])
    db = HistoryDatabase(embedder=HashingEmbedder(DIM),
                         store=PostgresStore(dsn, min_size=1, max_size=2, timeout=2),
                         settings=Settings(limits=Limits(capacity=1_000_000),
                                           weighting=Weighting(merge_threshold=1.0)))
    try:
        db.size(SESSION)  # connect, load and calibrate before announcing readiness
        _ = db.calibration
        print("ready", flush=True)
        n = start
        while True:
            query, passages, response = turn_text(n)
            try:
                db.add(SESSION, query, response, passages=passages, metadata={"n": n})
            except StoreUnavailableError as exc:
                print(f"unavailable: {exc}", file=sys.stderr, flush=True)
                sys.exit(UNAVAILABLE)
            sys.stdout.write(f"committed {n}\n")
            sys.stdout.flush()
            n += 1
    finally:
        db.close()


if __name__ == "__main__":
    main()

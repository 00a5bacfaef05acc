"""Child process of ``test_rel_crash``: writes numbered turns to a SQLite history until killed.

    python tests/reliability/crash_writer.py PATH.db START [CAPACITY]

After each ``add`` returns it prints ``committed N`` and flushes, so the parent knows which
turns the library reported as stored when it sends SIGKILL. A small CAPACITY makes every
turn evict one, so kills land in evictions too.
"""

from __future__ import annotations

import sys

SESSION = "crash"
DIM = 64


def turn_text(n: int) -> tuple[str, list[str], str]:
    """The query, passages and response of turn ``n`` (the parent checks them)."""
    return (f"question {n} zeta{n} about item{n % 97}",
            [f"passage {n}.{j} word{n}x{j}" for j in range(3)],
            f"answer {n} omega{n}")


def main() -> None:
    from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, Settings, Weighting

    path, start = sys.argv[1], int(sys.argv[2])
    capacity = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}",
                         settings=Settings(limits=Limits(capacity=capacity),
                                           weighting=Weighting(merge_threshold=1.0)))
    db.size(SESSION)  # load and calibrate before announcing readiness
    _ = db.calibration
    print("ready", flush=True)
    n = start
    while True:
        query, passages, response = turn_text(n)
        db.add(SESSION, query, response, passages=passages, metadata={"n": n})
        sys.stdout.write(f"committed {n}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    main()

"""Several worker processes writing one PostgreSQL history at once.

4 spawned processes x 250 turns over 20 shared sessions through ``HistoryDatabase``; every
tenth turn of each worker is a "hot" turn: 2 threads per worker meet at a barrier and add to
one session together, so 8 turns race on it at once. The result is then counted with SQL, not
through the client.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

WORKERS = 4
TURNS = 250
SESSIONS = 20
HOT_THREADS = 2
HOT_EVERY = 25  # a hot round after every 25 turns: 10 rounds x 2 threads = 20 hot turns each
HOT = "hot"


def _worker(dsn: str, wid: int, capacity: int, barrier: Any, out: str) -> None:
    from dhrag_core import (
        HashingEmbedder,
        HistoryDatabase,
        Limits,
        PostgresStore,
        Settings,
        Weighting,
    )
    from dhrag_core.store import StaleSessionError

    lock = threading.Lock()
    conflicts = 0

    class CountingStore(PostgresStore):
        def apply(self, *args: Any, **kwargs: Any) -> int:
            nonlocal conflicts
            try:
                return super().apply(*args, **kwargs)
            except StaleSessionError:
                with lock:
                    conflicts += 1
                raise

    db = HistoryDatabase(
        embedder=HashingEmbedder(dimension=64), store=CountingStore(dsn, max_size=4),
        settings=Settings(limits=Limits(capacity=capacity),
                          weighting=Weighting(merge_threshold=1.0)),
    )
    added: list[tuple[str, str]] = []
    retries = 0

    def add(session: str, i: int) -> None:
        nonlocal retries
        query = f"[{session}] w{wid} t{i} {uuid.uuid4().hex}"
        while True:
            try:
                db.add(session,
                       query,
                       f"answer {i}",
                       passages=[f"passage of [{session}] w{wid} t{i}"])
                break
            except StaleSessionError:
                with lock:
                    retries += 1
        with lock:
            added.append((session, query))

    def hot(i: int) -> None:
        barrier.wait(timeout=60)
        add(HOT, i)

    i = 0
    while i < TURNS:
        if i % HOT_EVERY == HOT_EVERY - HOT_THREADS:
            threads = [threading.Thread(target=hot, args=(i + k,)) for k in range(HOT_THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            i += HOT_THREADS
            continue
        add(f"s{(i * 7 + wid) % SESSIONS:02d}", i)
        i += 1
    db.close()
    Path(out).write_text(json.dumps({"added": added, "retries": retries,
                                     "conflicts": conflicts}))


def _run_all(ctx: Any, target: Any, args: list[tuple[Any, ...]], timeout: float) -> None:
    """Start one process per argument tuple, wait for all, and check each exited cleanly."""
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def _run_workers(dsn: str, capacity: int, tmp_path: Path) -> tuple[dict[str, set[str]], int]:
    """Runs the workers; returns the turns each session was given and the number of
    optimistic conflicts (a writer found its session changed and retried)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS * HOT_THREADS)
    outs = [str(tmp_path / f"w{w}.json") for w in range(WORKERS)]
    _run_all(ctx, _worker, [(dsn, w, capacity, barrier, outs[w]) for w in range(WORKERS)], 120)
    added: dict[str, set[str]] = {}
    conflicts = 0
    for path in outs:
        data = json.loads(Path(path).read_text())
        conflicts += data["conflicts"]
        for session, query in data["added"]:
            added.setdefault(session, set()).add(query)
    assert sum(map(len, added.values())) == WORKERS * TURNS
    return added, conflicts


def _rows(dsn: str) -> tuple[dict[str, list[tuple[str, str, int]]], dict[str, int]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        turns: dict[str, list[tuple[str, str, int]]] = {}
        for sid, query, passages, idx in conn.execute(
            "SELECT session_id, query, passages, idx FROM dhrag_turns"
        ):
            turns.setdefault(sid, []).append((query, passages, idx))
        versions: dict[str, int] = dict(
            conn.execute("SELECT session_id, version FROM dhrag_sessions").fetchall()
        )
    return turns, versions


def _check_common(
    added: dict[str, set[str]], turns: dict[str, list[tuple[str, str, int]]],
    versions: dict[str, int], capacity: int,
) -> None:
    assert set(turns) == set(added) and len(added) == SESSIONS + 1
    assert len(added[HOT]) == WORKERS * HOT_THREADS * (TURNS // HOT_EVERY)
    for sid, rows in turns.items():
        assert len(rows) == min(len(added[sid]), capacity), sid
        assert len({idx for _, _, idx in rows}) == len(rows), f"{sid}: turn index reused"
        for query, passages, _ in rows:
            assert query.startswith(f"[{sid}] ") and f"[{sid}]" in passages, (sid, query)
            assert query in added[sid], f"{sid} holds a turn nobody added to it: {query}"
        # one successful apply per added turn: no write was lost or applied twice
        assert versions[sid] == len(added[sid]), sid


@pytest.mark.parametrize("capacity", [120, 8], ids=["no-turn-lost", "capacity-bound"])
def test_workers_share_one_postgres_history(
    clean_postgres_dsn: str, tmp_path: Path, capacity: int
) -> None:
    added, conflicts = _run_workers(clean_postgres_dsn, capacity, tmp_path)
    assert conflicts > 0, "the hot rounds should have made writers collide"
    turns, versions = _rows(clean_postgres_dsn)
    _check_common(added, turns, versions, capacity)
    if capacity > max(map(len, added.values())):
        for sid, rows in turns.items():
            assert {q for q, _, _ in rows} == added[sid], f"{sid}: a turn was lost"


def _contender(dsn: str, wid: int, adds: int, barrier: Any, out: str) -> None:
    from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, Settings, Weighting
    from dhrag_core.store import StaleSessionError

    db = HistoryDatabase(embedder=HashingEmbedder(dimension=64), store=dsn,
                         settings=Settings(limits=Limits(capacity=10_000),
                                           weighting=Weighting(merge_threshold=1.0)))
    barrier.wait(timeout=120)
    lost = 0
    for i in range(adds):
        try:  # no retry of our own: a StaleSessionError is a lost turn
            db.add("one", f"w{wid} t{i} {uuid.uuid4().hex}", f"answer {i}")
        except StaleSessionError:
            lost += 1
    db.close()
    Path(out).write_text(json.dumps({"lost": lost}))


def test_twelve_processes_on_one_session_lose_no_turn(clean_postgres_dsn: str,
                                                      tmp_path: Path) -> None:
    """12 processes adding to one session at once: every add succeeds (the engine retries
    under contention for up to two minutes), every turn is in the table."""
    workers, adds = 12, 150
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers)
    outs = [str(tmp_path / f"c{w}.json") for w in range(workers)]
    _run_all(ctx, _contender,
             [(clean_postgres_dsn, w, adds, barrier, outs[w]) for w in range(workers)], 300)
    assert sum(json.loads(Path(o).read_text())["lost"] for o in outs) == 0
    turns, _ = _rows(clean_postgres_dsn)
    assert len(turns["one"]) == workers * adds
    assert len({idx for _, _, idx in turns["one"]}) == workers * adds

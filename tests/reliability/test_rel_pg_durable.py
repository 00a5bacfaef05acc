"""Durability of the PostgreSQL store: crash-stop a durable server mid-write, then audit.

The server is the test's own ``TempPostgres(durable=True)``: ``fsync``, ``synchronous_commit``
and ``full_page_writes`` at PostgreSQL's defaults (checked to be ``on``; the other tests run
with them off, which loses acknowledged commits on a crash). A child process
(``pg_writer.py``) adds numbered turns through ``HistoryDatabase`` on a ``PostgresStore`` and
prints ``committed N`` once each ``add`` has returned. The parent crash-stops the server
(``pg_ctl stop -m immediate``: no checkpoint, recovery on the next start) after a random
delay, ``DHRAG_PG_CRASHES`` times (default 5), each cycle continuing the numbering. After
every crash the writer must report the store unavailable and exit; the restarted server must
hold every turn reported committed, complete, at most the one in flight besides, and take
one more turn.

An immediate stop kills PostgreSQL's processes, not the machine: the kernel's page cache
survives, so this exercises what reaches the OS before a commit is acknowledged
(``synchronous_commit``), not the disk flushes of ``fsync`` themselves.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from pg_support import start_server

from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, PostgresStore, Settings, Weighting
from dhrag_core.testing import TempPostgres

sys.path.insert(0, str(Path(__file__).parent))
from crash_writer import DIM, SESSION, turn_text
from pg_writer import UNAVAILABLE

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs pg_ctl")

WRITER = Path(__file__).with_name("pg_writer.py")
REPO = Path(__file__).resolve().parents[2]
DURABLE = ("fsync", "synchronous_commit", "full_page_writes")
_NUMBER = re.compile(r"question (\d+) ")


def turn_number(query: str) -> int:
    """The number ``turn_text`` put in a turn's query."""
    found = _NUMBER.match(query)
    assert found is not None, f"not a numbered turn: {query!r}"
    return int(found.group(1))


def committed_but_lost(queries: Iterable[str], last_committed: int) -> list[int]:
    """The numbers 0..last_committed (every turn reported committed) that no stored query
    carries, in order."""
    stored = {turn_number(q) for q in queries}
    return [n for n in range(last_committed + 1) if n not in stored]


def test_checker_reports_lost_turns() -> None:
    """The check can fail: turns reported committed but not stored are named."""
    queries = [turn_text(n)[0] for n in (0, 1, 2, 4, 6)]
    assert committed_but_lost(queries, 4) == [3]
    assert committed_but_lost(queries, 8) == [3, 5, 7, 8]
    assert committed_but_lost(queries[:3], 2) == []
    assert committed_but_lost([], 1) == [0, 1]
    with pytest.raises(AssertionError, match="not a numbered turn"):
        committed_but_lost(["question about nothing"], 0)


def _durable_server() -> TempPostgres:
    return start_server(durable=True)


def _settings(dsn: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in DURABLE}


def _open(dsn: str) -> HistoryDatabase:
    return HistoryDatabase(embedder=HashingEmbedder(DIM),
                           store=PostgresStore(dsn, min_size=1, max_size=2, timeout=10),
                           settings=Settings(limits=Limits(capacity=1_000_000),
                                             weighting=Weighting(merge_threshold=1.0)))


def _audit(dsn: str, last_committed: int, cycle: int) -> int:
    """Check the restarted server; add one more turn; the number of the next turn to write."""
    db = _open(dsn)
    try:
        turns = db.turns(SESSION)
        queries = [t.query for t in turns]
        numbers = [turn_number(q) for q in queries]
        assert len(numbers) == len(set(numbers)), f"crash {cycle}: a turn was stored twice"
        lost = committed_but_lost(queries, last_committed)
        assert not lost, (
            f"crash {cycle}: {last_committed + 1} turns reported committed, "
            f"{last_committed + 1 - len(lost)} found; lost: {lost[:20]}")
        extra = set(numbers) - set(range(last_committed + 1))
        assert extra <= {last_committed + 1}, (
            f"crash {cycle}: unexpected turns stored: {sorted(extra)[:10]}")
        for t in turns:  # every stored turn, the one in flight included, is complete
            n = turn_number(t.query)
            query, passages, response = turn_text(n)
            assert (t.query, t.response, [p.text for p in t.passages]) == (
                query, response, passages), f"crash {cycle}: turn {n} stored incomplete"
            assert t.metadata["n"] == n
        # the store is usable: one more turn goes in and reads back
        n = max(numbers, default=-1) + 1
        query, passages, response = turn_text(n)
        db.add(SESSION, query, response, passages=passages, metadata={"n": n})
        assert db.size(SESSION) == len(turns) + 1
    finally:
        db.close()
    again = _open(dsn)
    try:
        assert again.turns(SESSION)[-1].query == query
    finally:
        again.close()
    return n + 1


def _read_committed(proc: subprocess.Popen[str], last: list[int]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("committed "):
            last[0] = int(line.split()[1])


def test_crash_stop_never_loses_a_committed_turn() -> None:
    crashes = int(os.environ.get("DHRAG_PG_CRASHES", "5"))
    rng = random.Random(int(os.environ.get("DHRAG_CRASH_SEED", "11")))
    pg = _durable_server()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        found = _settings(pg.dsn)
        assert found == dict.fromkeys(DURABLE, "on"), f"the server is not durable: {found}"
        next_n, total_committed, in_flight_stored = 0, 0, 0
        for cycle in range(crashes):
            proc = subprocess.Popen(
                [sys.executable, str(WRITER), pg.dsn, str(next_n)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )
            assert proc.stdout is not None and proc.stderr is not None
            try:
                first = proc.stdout.readline()
                if first.strip() != "ready":
                    proc.kill()
                    pytest.fail(f"writer did not start: {first!r} {proc.communicate()[1][-2000:]}")
                last = [next_n - 1]
                reader = threading.Thread(target=_read_committed, args=(proc, last))
                reader.start()
                time.sleep(rng.uniform(0.2, 1.5))  # crash at a random moment mid-write
                pg.crash()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    pytest.fail(f"crash {cycle}: the writer hung after the server crashed")
                reader.join()
                err = proc.stderr.read()
                assert proc.returncode == UNAVAILABLE, (
                    f"crash {cycle}: writer exited {proc.returncode}, not with the store "
                    f"unavailable: {err[-2000:]}")
                assert "Exception ignored" not in err and "Traceback" not in err, err[-2000:]
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()
                proc.stderr.close()
            committed = last[0] - next_n + 1
            assert committed > 0, f"crash {cycle}: the writer committed nothing before it"
            total_committed += committed
            pg.start_server()  # crash recovery
            after = _audit(pg.dsn, last[0], cycle)
            in_flight_stored += after == last[0] + 3  # the in-flight turn, then the extra one
            next_n = after
        assert total_committed > crashes, "the writer hardly wrote; the crashes tested nothing"
        print(f"{crashes} crash-stops, {total_committed} turns committed and all found, "
              f"{in_flight_stored} in-flight turns found complete")
    finally:
        pg.stop()

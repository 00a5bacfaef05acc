"""The history stores under contention and damage (issue 55 items 5, 14 and the raw errors).

The PostgreSQL contention test runs 16 writer processes (``DHRAG_FAIR_WRITERS``) x 40 turns
(``DHRAG_FAIR_TURNS``; the issue's 150 take several minutes) on one session of a durable
server (``fsync`` on) while CPU burners load the machine: every ``add`` that returned is
stored once, none gives up, and none needs more than two ``apply`` calls (a writer that loses a
race is guaranteed the next turn). ``dhrag sessions`` and ``session_summaries`` are checked to
decode no turn; damaged counters, lost connections, stores dropped unclosed and stores used
after ``close()`` to raise the library's errors, naming the store, and print nothing stray.

Run as a script, the module is that test's writer:

    python tests/reliability/test_rel_store_contention.py DSN WRITER TURNS GO_FILE
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

FAIR_SESSION = "contended"
FAIR_DIM = 64
WRITERS = int(os.environ.get("DHRAG_FAIR_WRITERS", "16"))
TURNS = int(os.environ.get("DHRAG_FAIR_TURNS", "40"))


def fair_writer() -> None:
    """Add TURNS numbered turns; print ``committed W N APPLIES`` after each (APPLIES: the
    store ``apply`` calls that ``add`` made), ``lost W N`` for one that gave up."""
    import dhrag_core as core
    from dhrag_core.store import StaleSessionError

    dsn, wid, turns, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    calls = [0]

    class Counting(core.PostgresStore):
        def apply(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls[0] += 1
            return super().apply(*args, **kwargs)

    db = core.HistoryDatabase(embedder=core.HashingEmbedder(FAIR_DIM),
                              store=Counting(dsn, min_size=1, max_size=2, timeout=30),
                              settings=core.Settings(limits=core.Limits(capacity=1_000_000),
                                                    weighting=core.Weighting(merge_threshold=1.0)))
    try:
        db.size(FAIR_SESSION)
        _ = db.calibration
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.01)
        for n in range(turns):
            calls[0] = 0
            try:
                db.add(FAIR_SESSION,
                       f"writer {wid} question {n} zeta{wid}x{n}",
                       f"answer {wid}.{n}",
                       passages=[f"passage {wid}.{n}"],
                       metadata={"w": wid, "n": n})
            except StaleSessionError as exc:
                print(f"lost {wid} {n} {calls[0]} {exc}", flush=True)
                continue
            print(f"committed {wid} {n} {calls[0]}", flush=True)
    finally:
        db.close()


if __name__ == "__main__":
    fair_writer()
    sys.exit(0)

# ruff: noqa: E402 -- the test module proper (the writer above runs without pytest)
import contextlib
import logging
import re
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from pg_support import start_server

from dhrag_core import (
    HashingEmbedder,
    HistoryDatabase,
    Limits,
    PostgresStore,
    Settings,
    SQLiteStore,
    Weighting,
)
from dhrag_core.app.cli import main
from dhrag_core.records import Passage, Turn
from dhrag_core.store import (
    CorruptStoreError,
    HistoryStore,
    MemoryStore,
    StaleSessionError,
    StoreUnavailableError,
    codec,
)
from dhrag_core.store import postgres as postgres_store
from dhrag_core.store import sqlite as sqlite_store
from dhrag_core.store.base import (
    SessionSummary,
    StoreClosedError,
    SummaryStore,
    session_summaries,
    summarize,
)
from dhrag_core.testing import TempPostgres

REPO = Path(__file__).resolve().parents[2]


def _durable_server() -> TempPostgres:
    return start_server(durable=True)


BURN = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _run_writers(pg: TempPostgres, tmp_path: Path) -> list[tuple[int, str, str]]:
    """Start the writers, load every core with a burner, let them go; (status, out, err)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    go = tmp_path / "go"
    procs: list[subprocess.Popen[str]] = []
    burners: list[subprocess.Popen[bytes]] = []
    try:
        for wid in range(WRITERS):
            procs.append(subprocess.Popen(
                [sys.executable, __file__, pg.dsn, str(wid), str(TURNS), str(go)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        for p in procs:
            assert p.stdout is not None
            first = p.stdout.readline()
            assert first.strip() == "ready", f"writer did not start: {first!r}"
        burners = [subprocess.Popen([sys.executable, "-c", BURN])
                   for _ in range(os.cpu_count() or 2)]
        go.touch()
        outputs = [p.communicate(timeout=900) for p in procs]
        return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    finally:
        for burner in burners:
            _stop(burner)
        for proc in procs:
            _stop(proc)


@pytest.mark.skipif(sys.platform == "win32", reason="needs pg_ctl")
def test_sixteen_postgres_writers_of_one_session_lose_nothing_under_load(
        tmp_path: Path) -> None:
    """16 processes x TURNS adds on one session, durable server, a CPU burner per core:
    0 lost, 0 stored twice, and no add needs more than two applies (fair turns)."""
    import psycopg

    pg = _durable_server()
    try:
        with psycopg.connect(pg.dsn) as conn:
            assert str(conn.execute("SHOW fsync").fetchone()[0]) == "on"  # type: ignore[index]
        committed: set[tuple[int, int]] = set()
        lost: list[str] = []
        most_applies = 0
        for status, out, err in _run_writers(pg, tmp_path):
            assert status == 0, err[-3000:]
            assert not err.strip(), err[-3000:]  # no traceback, no stray psycopg line
            for line in out.splitlines():
                word, *rest = line.split()
                if word == "committed":
                    committed.add((int(rest[0]), int(rest[1])))
                    most_applies = max(most_applies, int(rest[2]))
                elif word == "lost":
                    lost.append(line)
        with PostgresStore(pg.dsn) as store:
            turns, _ = store.load(FAIR_SESSION)
        stored = [(int(t.metadata["w"]), int(t.metadata["n"])) for t in turns]
        print(f"{WRITERS} writers x {TURNS}: {len(committed)} committed, {len(lost)} lost, "
              f"{len(stored)} stored, at most {most_applies} applies per add")
        assert not lost, f"{len(lost)} of {WRITERS * TURNS} adds gave up: {lost[:3]}"
        assert len(stored) == len(set(stored)), "a turn was stored twice"
        assert set(stored) == committed == {(w, n) for w in range(WRITERS)
                                            for n in range(TURNS)}
        assert most_applies <= 2, (
            f"an add needed {most_applies} applies: a writer that lost a race was not given "
            "the next turn")
    finally:
        pg.stop()


# -- dhrag sessions from per-session summaries (item 14) ---------------------------------


def _turn(session: str, index: int, ts: float, kb: str | None) -> Turn:
    rng = np.random.default_rng(index)
    return Turn(session_id=session, turn_id=f"{session}-{index}", index=index,
                query=f"question {index}", passages=(Passage(text="p"),), response="r",
                timestamp=ts, query_vector=rng.standard_normal(8).astype(np.float32),
                response_vector=None,
                passage_vectors=rng.standard_normal((1, 8)).astype(np.float32),
                metadata={} if kb is None else {"kb": kb})


def _fill(store: HistoryStore) -> None:
    """Sessions whose latest turn is not the last written, with a tie of timestamps."""
    store.apply("alpha", upsert=[_turn("alpha", 0, 1.7e9 + 50, "kb-late"),
                                 _turn("alpha", 1, 1.7e9 + 10, "kb-early")])
    store.apply("beta", upsert=[_turn("beta", i, 1.7e9 + 99, f"kb{i}") for i in range(3)])
    store.apply("gamma", upsert=[_turn("gamma", 0, 1.7e9, None)])
    store.apply("empty", upsert=[_turn("empty", 0, 1.7e9, "x")])
    store.apply("empty", delete=["empty-0"])


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    decoded = [0]
    real = codec.decode_turn

    def counting(row: dict[str, Any]) -> Turn:
        decoded[0] += 1
        return real(row)

    for module in (codec, sqlite_store, postgres_store):
        monkeypatch.setattr(module, "decode_turn", counting)
    return decoded


def _listing_by_loading(url: str) -> str:
    """``dhrag sessions``' output as the command made it before summaries: every session
    loaded and its turns read."""
    from datetime import datetime

    from dhrag_core.app.chat_cli import _shown_store, _store_url, shown_id
    from dhrag_core.store import open_store

    store = open_store(_store_url(url))
    try:
        ids = sorted(store.sessions())
        lines = [f"{len(ids)} session{'s' if len(ids) != 1 else ''} in "
                 f"{_shown_store(_store_url(url))}"]
        for sid in ids:
            turns = store.load(sid)[0]
            last = max(turns, key=lambda t: t.timestamp)
            when = datetime.fromtimestamp(last.timestamp).strftime("%Y-%m-%d %H:%M")
            n = len(turns)
            lines.append(f"  {shown_id(sid)}: {n} turn{'s' if n != 1 else ''}, last {when}, "
                         f"knowledge base {last.metadata.get('kb') or '?'}")
    finally:
        store.close()
    return "\n".join(lines) + "\n"


def _expected(store: HistoryStore) -> list[SessionSummary]:
    """The summaries as the listing used to make them: every turn loaded."""
    return [summarize(sid, store.load(sid)[0]) for sid in sorted(store.sessions())]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, HistoryStore]]:
    if request.param == "memory":
        store: HistoryStore = MemoryStore()
        url = "memory"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'h.db'}"
        store = SQLiteStore(tmp_path / "h.db")
    else:
        url = request.getfixturevalue("clean_postgres_dsn")
        store = PostgresStore(url)
    _fill(store)
    yield url, store
    store.close()


def test_session_summaries_decode_no_turn(filled: tuple[str, HistoryStore],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, store = filled
    expected = _expected(store)
    assert [s.session_id for s in expected] == ["alpha", "beta", "gamma"]
    assert expected[0].last_metadata == {"kb": "kb-late"}  # the latest, not the last index
    assert expected[1].last_metadata == {"kb": "kb0"}  # equally late: the lowest index
    decoded = _count_decodes(monkeypatch)
    assert isinstance(store, SummaryStore)
    assert session_summaries(store) == expected
    assert decoded[0] == 0


def test_a_store_without_summaries_is_summarised_from_its_turns() -> None:
    class Plain:
        def __init__(self) -> None:
            self.inner = MemoryStore()

        def load(self, session_id: str) -> tuple[list[Turn], int]:
            return self.inner.load(session_id)

        def sessions(self) -> list[str]:
            return self.inner.sessions()

    plain = Plain()
    _fill(plain.inner)
    assert not isinstance(plain, SummaryStore)
    assert session_summaries(plain) == _expected(plain.inner)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_dhrag_sessions_lists_what_it_did_without_decoding_a_turn(
        backend: str, request: pytest.FixtureRequest, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'h.db'}"
        store: HistoryStore = SQLiteStore(tmp_path / "h.db")
    else:
        url = request.getfixturevalue("clean_postgres_dsn")
        store = PostgresStore(url)
    _fill(store)
    store.close()
    # what the listing printed when it loaded every session, rebuilt from the loaded turns
    before = _listing_by_loading(url)
    assert "3 sessions in" in before and "kb-late" in before
    decoded = _count_decodes(monkeypatch)
    assert main(["sessions", "--store", url]) == 0
    assert capsys.readouterr().out == before
    assert decoded[0] == 0


def test_damaged_metadata_of_a_latest_turn_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with SQLiteStore(path) as store:
        _fill(store)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE dhrag_turns SET metadata = '{not json' WHERE session_id = 'gamma'")
    with SQLiteStore(path) as store, pytest.raises(CorruptStoreError,
                                                   match=f"{path}.*'gamma'.*metadata"):
        session_summaries(store)


# -- raw errors become the library's, naming the store -----------------------------------


def test_a_damaged_sqlite_version_floor_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with SQLiteStore(path) as store:
        _fill(store)
        store.delete_session("gamma")  # writes the version floor
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE dhrag_meta SET value = 'abc' WHERE key = 'version_floor'")
    with SQLiteStore(path) as store:
        for call in (lambda: store.apply("new", upsert=[_turn("new", 0, 1.7e9, None)]),
                     lambda: store.delete_session("alpha")):
            with pytest.raises(CorruptStoreError, match=f"{path}.*version_floor.*'abc'"):
                call()
        assert store.version("beta") == 1  # the rest reads as before


def test_a_damaged_postgres_schema_version_or_floor_names_the_store(
        clean_postgres_dsn: str) -> None:
    import psycopg

    dsn = clean_postgres_dsn
    with PostgresStore(dsn) as store:
        _fill(store)
        store.delete_session("gamma")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE dhrag_meta SET value = 'abc' WHERE key = 'version_floor'")
    with PostgresStore(dsn) as store:
        with pytest.raises(CorruptStoreError, match=f"{re.escape(dsn)}.*version_floor"):
            store.apply("new", upsert=[_turn("new", 0, 1.7e9, None)])
        with pytest.raises(CorruptStoreError, match=f"{re.escape(dsn)}.*version_floor"):
            store.delete_session("alpha")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE dhrag_meta SET value = 'x1' WHERE key = 'schema_version'")
    with PostgresStore(dsn) as store, pytest.raises(
            CorruptStoreError, match=f"{re.escape(dsn)}.*schema_version is 'x1'"):
        store.version("beta")


def test_a_lost_postgres_connection_leaves_no_stray_psycopg_warning(
        clean_postgres_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """The server ends the store's connections (a restart, an administrator) mid-use: the
    store reconnects or reports it, and psycopg's clean-up warnings stay at DEBUG."""
    import psycopg

    caplog.set_level(logging.DEBUG)
    name = "dhrag_stores4_victim"
    dsn = f"{clean_postgres_dsn}?application_name={name}"
    with PostgresStore(dsn, min_size=2, max_size=2) as store:
        db = HistoryDatabase(embedder=HashingEmbedder(32), store=store,
                             settings=Settings(limits=Limits(capacity=1_000_000),
                                               weighting=Weighting(merge_threshold=1.0)))
        db.add("s", "question 0", "r", passages=["p"])
        with psycopg.connect(clean_postgres_dsn, autocommit=True) as admin:
            for n in range(1, 40):
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE application_name = %s", (name,))
                with contextlib.suppress(StoreUnavailableError):
                    db.add("s", f"question {n}", "r", passages=["p"])
    noisy = [r.getMessage() for r in caplog.records
             if r.name.startswith("psycopg") and r.levelno >= logging.WARNING]
    demoted = [r for r in caplog.records if r.name.startswith("psycopg")]
    assert demoted, "the test ended no connection"
    assert not noisy, noisy[:5]


DROP_SCRIPT = """
import gc, sys, threading, time
from psycopg_pool.pool import MaintenanceTask
from dhrag_core import HashingEmbedder, HistoryDatabase, PostgresStore

done = threading.Event()

class CollectHere(MaintenanceTask):
    def _run(self, pool):
        time.sleep(0.3)  # the main thread drops the store meanwhile
        gc.collect()  # ... which is then collected in the pool's own worker thread
        done.set()

for cycle in (False, True):
    for n in range(3):
        store = PostgresStore(sys.argv[1])
        store.version("s")
        if cycle:
            store.me = store  # only the cyclic collector frees it
            pool = getattr(store, "_pool", None) or store._res.pool
            pool.run_task(CollectHere(pool))
            del pool
        del store
        if cycle:
            done.wait(10)
            done.clear()
        gc.collect()
db = HistoryDatabase(embedder=HashingEmbedder(32), store=PostgresStore(sys.argv[1]))
db.add("s", "q", ["p"], "r")
del db
gc.collect()
time.sleep(1.0)
print("dropped")
"""


def test_a_postgres_store_dropped_unclosed_prints_nothing(postgres_dsn: str) -> None:
    done = subprocess.run([sys.executable, "-X", "dev", "-c", DROP_SCRIPT, postgres_dsn],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0 and "dropped" in done.stdout, done.stderr[-3000:]
    assert "cannot join" not in done.stderr and "Exception ignored" not in done.stderr, (
        done.stderr[-3000:])


def test_a_closed_sqlite_store_says_so_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    store = SQLiteStore(path)
    _fill(store)
    store.close()
    store.close()  # twice is fine
    calls: list[Callable[[], object]] = [
        lambda: store.load("alpha"), lambda: store.version("alpha"),
        lambda: store.apply("alpha", delete=["alpha-0"]),
        lambda: store.changes("alpha", 0), lambda: store.sessions(),
        lambda: store.summaries(), lambda: store.delete_session("alpha"),
        lambda: store.hold_question("alpha", "q"), lambda: store.held_question("alpha"),
        lambda: store.take_question("alpha"), lambda: store.integrity_check()]
    for call in calls:
        with pytest.raises(StoreClosedError, match=f"{path} is closed.*new"):
            call()
    assert issubclass(StoreClosedError, RuntimeError)


def test_a_closed_postgres_store_says_so_naming_it(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    store.version("s")
    store.close()
    store.close()
    for call in (lambda: store.version("s"), lambda: store.sessions(),
                 lambda: store.apply("s")):
        with pytest.raises(StoreClosedError, match=f"{re.escape(postgres_dsn)} is closed"):
            call()


def test_a_postgres_writer_that_lost_a_race_writes_next(clean_postgres_dsn: str) -> None:
    """A loses a race to B; A's next version check takes the session's turn, so B's next
    write waits (seen in pg_locks) until A has written: A's retry cannot lose again."""
    import psycopg

    a, b = PostgresStore(clean_postgres_dsn), PostgresStore(clean_postgres_dsn)
    try:
        b.apply("s", upsert=[_turn("s", 0, 1.7e9, None)])
        seen = a.version("s")
        b.apply("s", upsert=[_turn("s", 1, 1.7e9, None)])
        with pytest.raises(StaleSessionError):
            a.apply("s", upsert=[_turn("s", 2, 1.7e9, None)], expected_version=seen)
        seen = a.version("s")  # the retry's check: takes the turn
        assert seen == 2
        done: list[int] = []
        writer = threading.Thread(
            target=lambda: done.append(b.apply("s", upsert=[_turn("s", 3, 1.7e9, None)])))
        writer.start()
        with psycopg.connect(clean_postgres_dsn, autocommit=True) as admin:
            for _ in range(10_000):  # until B waits for the advisory lock
                waiting = admin.execute("SELECT count(*) FROM pg_locks WHERE "
                                        "locktype = 'advisory' AND NOT granted").fetchone()
                if waiting and waiting[0]:
                    break
                assert not done, "B wrote before A's retry: A could lose again"
                threading.Event().wait(0.01)
            else:
                pytest.fail("B's write never waited for A's turn")
        assert not done
        assert a.apply("s", upsert=[_turn("s", 2, 1.7e9, None)], expected_version=seen) == 3
        writer.join(timeout=60)
        assert done == [4]
        assert [t.turn_id for t in a.load("s")[0]] == ["s-0", "s-1", "s-2", "s-3"]
    finally:
        a.close()
        b.close()

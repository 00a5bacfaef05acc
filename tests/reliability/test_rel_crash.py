"""Crash safety of the SQLite store: SIGKILL a writer at random moments, then audit the file.

A child process (``crash_writer.py``) adds numbered turns through ``HistoryDatabase`` and
prints ``committed N`` once each ``add`` has returned. The parent kills it with SIGKILL after
a random delay, ``DHRAG_CRASH_KILLS`` times (default 50) on the same file, each restart
continuing the numbering. After every kill: the file reopens, ``PRAGMA integrity_check`` is
"ok", every turn reported committed is stored intact, and at most the one in flight is
missing (if stored, it is complete).

Also: a damaged file (truncated, overwritten header) and a damaged turn row are reported as
``CorruptStoreError`` naming the file / session / turn, never used silently.

``DHRAG_CRASH_REPORT=DIR`` writes each crash run's figures to ``DIR/<test>.json`` (the runs
quoted in docs/reliability.md: ``DHRAG_CRASH_KILLS=200 DHRAG_CRASH_EVICT_KILLS=200
DHRAG_CRASH_REPORT=docs/results/crash python -m pytest -q tests/reliability/test_rel_crash.py
-k "sigkill"``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, Settings, SQLiteStore, Weighting
from dhrag_core.store import CorruptStoreError

sys.path.insert(0, str(Path(__file__).parent))
from crash_writer import DIM, SESSION, turn_text

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

WRITER = Path(__file__).with_name("crash_writer.py")
REPO = Path(__file__).resolve().parents[2]


def _audit(path: Path, last_committed: int, reopen: bool) -> int:
    """Check the file after a kill; the number of the next turn to write."""
    store = SQLiteStore(path)
    try:
        assert store.integrity_check() == "ok"
        turns, _ = store.load(SESSION)
    finally:
        store.close()
    numbers = [int(t.metadata["n"]) for t in turns]
    assert len(numbers) == len(set(numbers)), "a turn was stored twice"
    stored = set(numbers)
    committed = set(range(last_committed + 1))
    missing = committed - stored
    assert not missing, f"turns reported committed but lost: {sorted(missing)[:10]}"
    extra = stored - committed
    assert extra <= {last_committed + 1}, f"unexpected turns stored: {sorted(extra)[:10]}"
    for t in turns:  # every stored turn, the one in flight included, is complete
        query, passages, response = turn_text(int(t.metadata["n"]))
        assert (t.query, t.response) == (query, response)
        assert [p.text for p in t.passages] == passages
        assert t.query_vector.shape == (DIM,) and t.passage_vectors.shape == (3, DIM)
        assert t.response_vector is not None and np.isfinite(t.passage_vectors).all()
    if not reopen:
        return max(stored, default=-1) + 1
    # the library itself reopens it too (rebuilds indexes, clusters and chains)
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}",
                         settings=Settings(limits=Limits(capacity=1_000_000),
                                           weighting=Weighting(merge_threshold=1.0)))
    try:
        assert db.size(SESSION) == len(turns)
        if turns:
            assert db.select(SESSION, turns[-1].query)
    finally:
        db.close()
    return max(stored, default=-1) + 1


def _kill_after(proc: subprocess.Popen[str], delay: float) -> None:
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)


def test_sigkill_never_loses_a_committed_turn(tmp_path: Path) -> None:
    kills = int(os.environ.get("DHRAG_CRASH_KILLS", "50"))
    rng = random.Random(int(os.environ.get("DHRAG_CRASH_SEED", "11")))
    path = tmp_path / "crash.db"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    next_n, total_committed, mid_flight_stored = 0, 0, 0
    for kill in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(path), str(next_n)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first.strip() != "ready":
            proc.kill()
            pytest.fail(f"writer did not start: {first!r} {proc.communicate()[1][-2000:]}")
        # kill at a random moment: mostly mid-write, sometimes right away
        killer = threading.Thread(target=_kill_after, args=(proc, rng.uniform(0.0, 0.12)))
        killer.start()
        last = next_n - 1
        for line in proc.stdout:
            if line.startswith("committed "):
                last = int(line.split()[1])
        killer.join()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
        if proc.stderr is not None:
            proc.stderr.close()
        proc.stdout.close()
        total_committed += last - next_n + 1
        next_n = _audit(path, last, reopen=kill % 10 == 9 or kill == kills - 1)
        mid_flight_stored += next_n == last + 2
    assert total_committed > kills, "the writer hardly wrote; the kills tested nothing"
    print(f"{kills} kills, {total_committed} turns committed, "
          f"{mid_flight_stored} in-flight turns found complete")
    _report("sigkill", {"kills": kills, "committed_turns": total_committed,
                        "committed_turns_lost": 0, "in_flight_found_complete": mid_flight_stored,
                        "integrity_check": "ok after every kill"})


def test_sigkill_during_evictions_keeps_the_store_consistent(tmp_path: Path) -> None:
    """Capacity 6: every turn evicts one in the same transaction, so kills land in evictions.
    After each kill the session holds exactly min(capacity, turns written) complete turns,
    the newest committed one among them, and a reopened database's tree matches the rows."""
    sys.path.insert(0, str(Path(__file__).parent))
    from rel_support import check_tree

    capacity = 6
    kills = int(os.environ.get("DHRAG_CRASH_EVICT_KILLS", "25"))
    rng = random.Random(int(os.environ.get("DHRAG_CRASH_SEED", "11")) + 1)
    path = tmp_path / "evict.db"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    next_n, evicted_under_fire = 0, 0
    for kill in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(path), str(next_n), str(capacity)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        killer = threading.Thread(target=_kill_after, args=(proc, rng.uniform(0.02, 0.12)))
        killer.start()
        last = next_n - 1
        for line in proc.stdout:
            if line.startswith("committed "):
                last = int(line.split()[1])
        killer.join()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        store = SQLiteStore(path)
        try:
            assert store.integrity_check() == "ok"
            turns, _ = store.load(SESSION)
        finally:
            store.close()
        stored = {int(t.metadata["n"]) for t in turns}
        assert len(stored) == len(turns), "a turn was stored twice"
        in_flight = last + 1 in stored
        written = last + 1 + in_flight
        assert len(turns) == min(capacity, written), (len(turns), written, sorted(stored))
        assert max(stored, default=-1) == last + in_flight
        assert in_flight or last < 0 or last in stored, "the newest committed turn was lost"
        for t in turns:
            query, passages, response = turn_text(int(t.metadata["n"]))
            assert (t.query, t.response, [p.text for p in t.passages]) == (
                query, response, passages)
        evicted_under_fire += written > capacity and last >= next_n
        if kill % 5 == 4 or kill == kills - 1:
            db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}",
                                 settings=Settings(limits=Limits(capacity=capacity),
                                                   weighting=Weighting(merge_threshold=1.0)))
            try:
                assert db.size(SESSION) == len(turns)
                check_tree(db, SESSION)
            finally:
                db.close()
        next_n = last + 1 + in_flight
    assert evicted_under_fire > kills // 2, "too few kills came after evictions began"
    print(f"{kills} kills at capacity {capacity}, {next_n} turns written, "
          f"{evicted_under_fire} kills among evicting writes")
    _report("sigkill_during_evictions", {
        "kills": kills, "capacity": capacity, "turns_written": next_n,
        "kills_among_evicting_writes": evicted_under_fire,
        "integrity_check": "ok after every kill"})


def _report(name: str, figures: dict[str, object]) -> None:
    """Write a run's figures where ``DHRAG_CRASH_REPORT`` says (reached only if it passed)."""
    folder = os.environ.get("DHRAG_CRASH_REPORT")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        out = {"seed": int(os.environ.get("DHRAG_CRASH_SEED", "11")), **figures}
        (Path(folder) / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n",
                                                   encoding="utf-8")


# -- damaged files -------------------------------------------------------------------------


def _written_db(path: Path, turns: int = 5) -> None:
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}")
    for i in range(turns):
        db.add("alice", f"question {i} about topic{i}", f"answer {i}", passages=[f"passage {i}"])
    db.close()
    for suffix in ("-wal", "-shm"):  # a clean close checkpoints; nothing may be left over
        assert not Path(f"{path}{suffix}").exists() or Path(f"{path}{suffix}").stat().st_size == 0


def _open(path: Path) -> HistoryDatabase:
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}")
    db.size("alice")
    return db


@pytest.mark.parametrize("damage", ["header", "truncate-half", "truncate-100", "garbage"])
def test_damaged_file_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "hist.db"
    _written_db(path, turns=40)
    data = path.read_bytes()
    if damage == "header":
        path.write_bytes(b"X" * 100 + data[100:])
    elif damage == "truncate-half":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "truncate-100":
        path.write_bytes(data[:100])
    else:
        path.write_bytes(os.urandom(len(data)))
    damaged = path.read_bytes()
    with pytest.raises(CorruptStoreError) as err:
        _open(path)
    assert str(path) in str(err.value)
    assert isinstance(err.value, ValueError)  # the CLI reports ValueErrors as plain errors
    assert path.read_bytes() == damaged  # not "repaired" by overwriting it


def test_empty_file_is_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    db = _open(path)
    assert db.size("alice") == 0
    db.close()


def _tamper(path: Path, sql: str, *args: object) -> None:
    con = sqlite3.connect(path)
    con.execute(sql, args)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("qv", b"\x00\x00\x80?" * (DIM - 1)),  # one float short
        ("qv", b"\x00\x00\x80?" * DIM + b"\x00"),  # not a whole number of floats
        ("qv", np.full(DIM, np.nan, dtype="<f4").tobytes()),  # right length, not finite
        ("pv", b"\x00\x00\x80?" * DIM),  # one passage vector for one passage... of two
        ("rv", b"\x00\x00\x80?" * 3),
        ("passages", "{not json"),
        ("metadata", "[1, 2"),
    ],
)
def test_damaged_turn_row_names_session_and_turn(
    tmp_path: Path, column: str, value: object
) -> None:
    path = tmp_path / "hist.db"
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}")
    db.add("alice", "first question", "first answer", passages=["p1", "p2"])
    victim = db.add("alice", "second question", "second answer", passages=["p3", "p4"]).turn
    db.add("bob", "bob's question", "bob's answer", passages=["p5"])
    db.close()
    _tamper(path, f"UPDATE dhrag_turns SET {column}=? WHERE turn_id=?", value, victim.turn_id)
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}")
    with pytest.raises(CorruptStoreError) as err:
        db.select("alice", "second question")
    msg = str(err.value)
    assert "'alice'" in msg and victim.turn_id in msg and str(path) in msg
    assert db.size("bob") == 1  # other sessions stay usable
    db.close()


def test_no_index_files_on_disk(tmp_path: Path) -> None:
    """Indexes, clusters and chains are derived state rebuilt from the database: the folder
    holds the SQLite file (and its WAL companions) only, and a reopened history selects the
    same turns as the live one."""
    path = tmp_path / "hist.db"
    db = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}",
                         settings=Settings(limits=Limits(capacity=30)), clock=lambda: 1_000.0)
    for i in range(60):
        db.add("s",
               f"question {i} about topic{i % 7} thing{i % 5}",
               f"answer {i % 7}",
               passages=[f"passage {i}"])
    live = [(h.turn.turn_id, h.via) for h in db.select("s", "question about topic3 thing2")]
    db.close()
    assert {p.name for p in tmp_path.iterdir()} <= {"hist.db", "hist.db-wal", "hist.db-shm"}
    again = HistoryDatabase(embedder=HashingEmbedder(DIM), store=f"sqlite:///{path}",
                            settings=Settings(limits=Limits(capacity=30)), clock=lambda: 1_000.0)
    assert [(h.turn.turn_id, h.via) for h in again.select("s", "question about topic3 thing2")] \
        == live
    again.close()

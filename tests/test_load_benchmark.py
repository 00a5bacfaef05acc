"""``benchmarks.perf.load`` at tiny sizes: 1 and 2 worker processes (real MiniLM) on PostgreSQL.

The MTRAG benchmark is used where its KB vectors are cached; elsewhere a two-conversation
benchmark written from ``fixtures/mtrag_two_topics.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.data import (
    KB_FILE,
    TASKS_FILE,
    Message,
    Task,
    load_kb,
    write_kb,
    write_tasks,
)
from benchmarks.harness.kbcache import cache_file, kb_fingerprint
from benchmarks.harness.paths import default_cache
from benchmarks.perf.load import (
    MODEL,
    LoadRow,
    Workload,
    count_recorded,
    lost_turns,
    prepare_kb_vectors,
    run_load,
)
from dhrag_core import Passage

pytestmark = pytest.mark.model

SESSIONS, TURNS, HOT = 2, 2, 2
FIXTURE = Path(__file__).parent / "fixtures" / "mtrag_two_topics.json"


def _fixture_bench(root: Path) -> None:
    """kb.jsonl (the fixture's answers) and tasks.jsonl (its two conversations) in ``root``."""
    data = json.loads(FIXTURE.read_text())
    passages, tasks = [], []
    for topic in ("great_wall", "berlin_wall"):
        history: list[Message] = []
        for n, turn in enumerate(data[topic]):
            passages.append(Passage(text=turn["answer"], id=f"{topic}-{n}", title=topic))
            tasks.append(Task(task_id=f"{topic}::{n + 1}", conversation_id=topic, turn=n + 1,
                              history=tuple(history), question=turn["question"],
                              relevant=(f"{topic}-{n}",)))
            history += [Message("user", turn["question"]), Message("assistant", turn["answer"])]
    write_kb(passages, root / KB_FILE)
    write_tasks(tasks, root / TASKS_FILE)


def _workload(tmp: Path) -> Workload:
    mtrag = default_cache() / "benchmarks" / "mtrag"
    if (mtrag / KB_FILE).is_file() and (mtrag / TASKS_FILE).is_file() and cache_file(
        default_cache(), MODEL, kb_fingerprint(load_kb(mtrag / KB_FILE))
    ).is_file():
        return Workload(SESSIONS, TURNS, HOT)
    _fixture_bench(tmp / "bench")
    return Workload(SESSIONS, TURNS, HOT, bench_dir=tmp / "bench", cache_dir=tmp / "cache")


@pytest.fixture(scope="module")
def runs(postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> list[LoadRow]:
    from benchmarks.harness.data import load_benchmark

    workload = _workload(tmp_path_factory.mktemp("load"))
    bench = load_benchmark(workload.bench_dir)
    prepare_kb_vectors(workload, bench.kb)
    return [run_load(postgres_dsn, n, workload, bench.conversations, capacity=1000)
            for n in (1, 2)]


def test_every_turn_sent_is_recorded_and_stored(runs: list[LoadRow]) -> None:
    for row in runs:
        assert row.sent == SESSIONS * TURNS + row.workers * HOT
        assert row.turns == row.sent and row.failed == 0
        assert row.hot_turns == row.workers * HOT
        assert row.lost == 0 and row.extra == 0
        assert row.turns_per_s > 0 and 0 < row.p50_ms <= row.p99_ms
        assert row.conflicts >= 0
        assert sum(row.recorded.values()) == row.turns and len(row.recorded) == SESSIONS + 1


def test_the_sql_count_sees_a_deleted_turn(runs: list[LoadRow], postgres_dsn: str) -> None:
    import psycopg

    row = runs[-1]
    session = next(sid for sid in row.recorded if not sid.endswith("-hot"))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        deleted = conn.execute(
            "DELETE FROM dhrag_turns WHERE ctid = (SELECT ctid FROM dhrag_turns "
            "WHERE session_id = %s LIMIT 1) RETURNING hits", (session,),
        ).fetchone()
    assert deleted is not None
    stored = count_recorded(postgres_dsn, row.recorded)
    assert lost_turns(row.recorded, stored) == (int(deleted[0]), 0)
    assert lost_turns(row.recorded, stored)[0] >= 1

"""Several worker processes over one PostgreSQL history: throughput, tail latency, lost turns.

    python -m benchmarks.perf.load                           # throw-away server, 1 2 4 workers
    python -m benchmarks.perf.load --workers 1 2 4 8 --sessions 32 --json load.json --plot load.png
    python -m benchmarks.perf.load --dsn postgresql://user:pw@host/db

For each worker count N, N spawned processes each run their own engine (``DHRAG`` with
MiniLM, FAISS over the MTRAG passages and a ``PostgresStore``; torch and FAISS on one thread
each). ``--sessions`` sessions replay MTRAG conversations (the question, then the dataset's
answer as the response) through one shared job queue, like a load balancer: any worker may
serve any turn, while a session's next turn is only sent once its previous one finished. Each
worker also writes its own stream of ``--hot-turns`` turns to one shared "hot" session, with no
order between workers, which drives the stale-version retry. A turn is ``select`` + ``record``.

Per N: turns/s over the timed phase (from every worker ready, model loaded, to the last turn),
p50/p99 turn latency, conflicts retried (transactions PostgreSQL rolled back: a write that found
its session changed and was retried) and turns lost (turns the workers reported recorded minus
the times recorded that ``dhrag_turns`` holds, counted with SQL). The throw-away server runs
with ``fsync`` and ``synchronous_commit`` off; the output says what the server runs with.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import time
import traceback
import uuid
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.data import Conversation, load_benchmark
from benchmarks.harness.paths import SEED_FILE, default_cache, default_data

__all__ = [
    "LoadRow",
    "Workload",
    "count_recorded",
    "lost_turns",
    "prepare_kb_vectors",
    "rolled_back",
    "run_load",
    "server_settings",
]

MODEL = "all-MiniLM-L6-v2"
WAIT_S = 600.0
"""Longest wait for any message from the workers (a model load, a turn) before giving up."""


@dataclass(frozen=True)
class Workload:
    """What each worker count replays, and where the benchmark and its vectors are."""

    sessions: int = 16
    turns_per_session: int = 8
    hot_turns: int = 20
    bench_dir: Path = field(default_factory=lambda: default_cache() / "benchmarks" / "mtrag")
    cache_dir: Path = field(default_factory=default_cache)


@dataclass(frozen=True)
class WorkerSpec:
    wid: int
    dsn: str
    bench_dir: Path
    cache_dir: Path
    capacity: int
    hot_session: str
    hot_stream: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Job:
    session: str
    question: str
    answer: str


@dataclass(frozen=True)
class Stop:
    """No more session turns: finish the hot stream, then exit."""


@dataclass(frozen=True)
class Ready:
    wid: int


@dataclass(frozen=True)
class TurnDone:
    session: str
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class Finished:
    wid: int
    hot_seconds: tuple[float, ...]
    hot_errors: tuple[str, ...]


@dataclass(frozen=True)
class Crashed:
    wid: int
    trace: str


@dataclass(frozen=True)
class LoadRow:
    """One worker count's figures. ``sent``: turns sent to the workers; ``turns``: those
    they reported recorded (``recorded``: per session id); ``failed``: those that raised;
    ``lost``/``extra``: reported but not stored / stored but not reported."""

    workers: int
    sessions: int
    sent: int
    turns: int
    hot_turns: int
    seconds: float
    turns_per_s: float
    p50_ms: float
    p99_ms: float
    hot_p99_ms: float
    conflicts: int
    failed: int
    lost: int
    extra: int
    recorded: dict[str, int] = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """The row without the per-session counts (for JSON)."""
        out = asdict(self)
        del out["recorded"]
        return out


# -- the worker process ------------------------------------------------------------------


def _engine(spec: WorkerSpec) -> Any:
    """A ``DHRAG`` over MiniLM, FAISS on the cached KB vectors and the PostgreSQL store,
    warmed up (model, calibration, KB index, store connection) so turns time only turns."""
    import faiss
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    from benchmarks.harness.kbcache import kb_vectors
    from dhrag_core import (
        DHRAG,
        FaissKnowledgeBase,
        Limits,
        MiniLMEmbedder,
        PostgresStore,
        Settings,
    )

    kb = load_benchmark(spec.bench_dir).kb
    emb = MiniLMEmbedder()
    vectors = kb_vectors(kb, emb, MODEL, cache_dir=spec.cache_dir,
                         seed=default_data() / SEED_FILE, show_progress=False)
    rag = DHRAG(FaissKnowledgeBase(kb, emb, vectors=vectors), embedder=emb,
                store=PostgresStore(spec.dsn),
                settings=Settings(limits=Limits(capacity=spec.capacity)))
    rag.select(f"{spec.hot_session}-warm-up-{spec.wid}", "warm up")  # stores nothing
    return rag


def _turn(rag: Any, session: str, question: str, answer: str) -> float:
    """Seconds for one turn: ``select`` then ``record`` with the selection."""
    start = time.perf_counter()
    sel = rag.select(session, question)
    rag.record(session, question, answer, selection=sel)
    return time.perf_counter() - start


def _next_job(jobs: Any, wait: bool) -> Job | Stop | None:
    """The next job or ``Stop``; None when ``wait`` is off and nothing is queued."""
    try:
        item: Job | Stop = jobs.get(block=wait)
    except queue.Empty:
        return None
    return item


def _serve(rag: Any, spec: WorkerSpec, jobs: Any, outbox: Any) -> Finished:
    """Serve queued session turns, one hot turn after each, until ``Stop`` and the hot stream
    are both done."""
    hot = deque(spec.hot_stream)
    hot_seconds: list[float] = []
    hot_errors: list[str] = []
    stopping = False
    while hot or not stopping:
        if not stopping:
            job = _next_job(jobs, wait=not hot)
            if isinstance(job, Stop):
                stopping = True
            elif job is not None:
                try:
                    outbox.put(TurnDone(job.session, _turn(rag, job.session, job.question,
                                                           job.answer)))
                except Exception as exc:
                    outbox.put(TurnDone(job.session, 0.0, f"{type(exc).__name__}: {exc}"))
        if hot:
            question, answer = hot.popleft()
            try:
                hot_seconds.append(_turn(rag, spec.hot_session, question, answer))
            except Exception as exc:
                hot_errors.append(f"{type(exc).__name__}: {exc}")
    return Finished(spec.wid, tuple(hot_seconds), tuple(hot_errors))


def _worker(spec: WorkerSpec, jobs: Any, outbox: Any, go: Any) -> None:
    """A worker process: build the engine, report ready, serve from ``go`` on."""
    try:
        rag = _engine(spec)
        outbox.put(Ready(spec.wid))
        go.wait()
        try:
            outbox.put(_serve(rag, spec, jobs, outbox))
        finally:
            rag.history.close()
    except BaseException:
        outbox.put(Crashed(spec.wid, traceback.format_exc()))
        raise


# -- the parent: scheduling and measuring ----------------------------------------------------


def _replay_sessions(
    conversations: Sequence[Conversation], workload: Workload, run_id: str
) -> dict[str, deque[Job]]:
    """Per session id (unique to the run) the turns of one conversation, capped; conversations
    are reused in order when there are more sessions than conversations."""
    convs = [c for c in conversations if c.turns]
    if not convs:
        raise ValueError("the benchmark has no conversation with a turn")
    out: dict[str, deque[Job]] = {}
    for i in range(workload.sessions):
        sid = f"load-{run_id}-{i}"
        turns = convs[i % len(convs)].turns[: workload.turns_per_session]
        out[sid] = deque(Job(sid, t.question, t.answer) for t in turns)
    return out


def _hot_stream(conversation: Conversation, n: int, wid: int) -> tuple[tuple[str, str], ...]:
    """``n`` turns of ``conversation`` cycled, starting at turn ``wid`` (exact repeats are
    merged into one stored row, whose ``hits`` counts them)."""
    turns = conversation.turns
    return tuple((turns[(wid + k) % len(turns)].question, turns[(wid + k) % len(turns)].answer)
                 for k in range(n))


def _receive(outbox: Any, procs: Sequence[Any]) -> Any:
    """The next message; raises when a worker crashed or nothing came for ``WAIT_S``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            msg = outbox.get(timeout=2.0)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"worker exited with code {dead[0].exitcode}") from None
            continue
        if isinstance(msg, Crashed):
            raise RuntimeError(f"worker {msg.wid} failed:\n{msg.trace}")
        return msg
    raise RuntimeError(f"no message from the workers for {WAIT_S:g} s")


def _drive(
    sessions: dict[str, deque[Job]], jobs: Any, outbox: Any, procs: Sequence[Any]
) -> tuple[Counter[str], list[float], list[str], list[Finished]]:
    """Keep every session's next turn queued until all are done, then stop the workers.

    Returns the turns recorded per session, their latencies, the errors and each worker's
    hot-stream report."""
    recorded: Counter[str] = Counter()
    seconds: list[float] = []
    errors: list[str] = []
    finished: list[Finished] = []
    in_flight = 0
    for turns in sessions.values():
        jobs.put(turns.popleft())
        in_flight += 1
    if not in_flight:
        for _ in procs:
            jobs.put(Stop())
    while len(finished) < len(procs):
        msg = _receive(outbox, procs)
        if isinstance(msg, Finished):
            finished.append(msg)
            continue
        assert isinstance(msg, TurnDone), msg
        if msg.error is None:
            recorded[msg.session] += 1
            seconds.append(msg.seconds)
        else:
            errors.append(msg.error)
        if sessions[msg.session]:
            jobs.put(sessions[msg.session].popleft())
            continue
        in_flight -= 1
        if not in_flight:
            for _ in procs:
                jobs.put(Stop())
    return recorded, seconds, errors, finished


def _await_ready(outbox: Any, procs: Sequence[Any]) -> None:
    ready = 0
    while ready < len(procs):
        msg = _receive(outbox, procs)
        assert isinstance(msg, Ready), msg
        ready += 1


def _join(procs: Iterable[Any]) -> None:
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
            p.join(timeout=10)


def _percentile_ms(seconds: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(seconds) * 1000.0, q)) if seconds else float("nan")


# -- SQL on the server -----------------------------------------------------------------------


def server_settings(dsn: str) -> dict[str, str]:
    """``SHOW fsync``, ``synchronous_commit`` and ``full_page_writes`` on the server."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        out = {}
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            row = conn.execute(f"SHOW {name}").fetchone()
            out[name] = str(row[0]) if row else "?"
        return out


def rolled_back(dsn: str) -> int:
    """Transactions rolled back in the database so far (``pg_stat_database.xact_rollback``).

    The store's connections run in autocommit; the only transactions that roll back are
    writes that raise, and the write that finds its session at another version raises
    ``StaleSessionError``, which ``HistoryDatabase.add`` retries. The core keeps no count of
    its retries (and does not log them), so PostgreSQL's counter is read before and after.
    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT xact_rollback FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
        return int(row[0]) if row else 0


def _await_disconnect(dsn: str, application: str, timeout: float = 60.0) -> None:
    """Wait until no backend of ``application`` is left: a backend reports its statistics
    (the rollbacks) when it exits."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                               (application,)).fetchone()
            if row is None or int(row[0]) == 0:
                return
            time.sleep(0.1)
    print(f"warning: connections of {application} still open; conflicts may be undercounted",
          file=sys.stderr)


def count_recorded(dsn: str, sessions: Iterable[str]) -> dict[str, int]:
    """Per session, the times recorded that ``dhrag_turns`` holds: ``SUM(hits)``, where
    ``hits`` is 1 plus the near-duplicate turns merged into the row (``store/schema.py``);
    a session without a row counts 0."""
    import psycopg

    ids = list(sessions)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT session_id, SUM(hits) FROM dhrag_turns WHERE session_id = ANY(%s) "
            "GROUP BY session_id", (ids,),
        ).fetchall()
    found = {str(sid): int(n) for sid, n in rows}
    return {sid: found.get(sid, 0) for sid in ids}


def lost_turns(recorded: Mapping[str, int], stored: Mapping[str, int]) -> tuple[int, int]:
    """(lost, extra): turns reported recorded but not stored, and stored beyond the reports."""
    lost = sum(max(n - stored.get(sid, 0), 0) for sid, n in recorded.items())
    extra = sum(max(stored.get(sid, 0) - recorded.get(sid, 0), 0) for sid in stored)
    return lost, extra


# -- one worker count ----------------------------------------------------------------------


def needed_capacity(workload: Workload, workers: int) -> int:
    """Turns the largest session records (so that nothing is evicted)."""
    return max(workload.turns_per_session, workers * workload.hot_turns, 1)


def run_load(
    dsn: str, workers: int, workload: Workload, conversations: Sequence[Conversation],
    capacity: int,
) -> LoadRow:
    """Run the workload on ``workers`` processes against ``dsn``; count the result in SQL."""
    from psycopg.conninfo import make_conninfo

    run_id = uuid.uuid4().hex[:8]
    application = f"dhrag-load-{run_id}"
    sessions = _replay_sessions(conversations, workload, run_id)
    session_turns = sum(len(t) for t in sessions.values())
    hot_session = f"load-{run_id}-hot"
    hot_conversation = max(conversations, key=lambda c: len(c.turns))
    ctx = mp.get_context("spawn")
    jobs, outbox, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    specs = [WorkerSpec(w, make_conninfo(dsn, application_name=application), workload.bench_dir,
                        workload.cache_dir, capacity, hot_session,
                        _hot_stream(hot_conversation, workload.hot_turns, w))
             for w in range(workers)]
    procs = [ctx.Process(target=_worker, args=(s, jobs, outbox, go), daemon=True) for s in specs]
    for p in procs:
        p.start()
    try:
        _await_ready(outbox, procs)
        before = rolled_back(dsn)
        start = time.perf_counter()
        go.set()
        recorded, seconds, errors, finished = _drive(sessions, jobs, outbox, procs)
        wall = time.perf_counter() - start
    except BaseException:
        for p in procs:
            p.terminate()
        raise
    finally:
        _join(procs)
    _await_disconnect(dsn, application)
    conflicts = rolled_back(dsn) - before
    hot_seconds = [s for f in finished for s in f.hot_seconds]
    errors += [e for f in finished for e in f.hot_errors]
    recorded[hot_session] = len(hot_seconds)
    for sid in sessions:
        recorded.setdefault(sid, 0)
    lost, extra = lost_turns(recorded, count_recorded(dsn, recorded))
    for e in sorted(set(errors))[:5]:
        print(f"warning: a turn failed on {workers} workers: {e}", file=sys.stderr)
    turns = sum(recorded.values())
    all_seconds = seconds + hot_seconds
    return LoadRow(
        workers=workers, sessions=len(sessions),
        sent=session_turns + sum(len(s.hot_stream) for s in specs), turns=turns,
        hot_turns=len(hot_seconds),
        seconds=round(wall, 3), turns_per_s=round(turns / wall, 2),
        p50_ms=round(_percentile_ms(all_seconds, 50), 1),
        p99_ms=round(_percentile_ms(all_seconds, 99), 1),
        hot_p99_ms=round(_percentile_ms(hot_seconds, 99), 1),
        conflicts=conflicts, failed=len(errors), lost=lost, extra=extra, recorded=dict(recorded),
    )


def prepare_kb_vectors(workload: Workload, kb: Sequence[Any]) -> None:
    """Make sure the KB vectors are cached before the workers start (else each would embed
    the passages, and they would race on writing the cache)."""
    from benchmarks.harness.kbcache import kb_vectors
    from dhrag_core import MiniLMEmbedder

    kb_vectors(kb, MiniLMEmbedder(), MODEL, cache_dir=workload.cache_dir,
               seed=default_data() / SEED_FILE, show_progress=True)


# -- report ------------------------------------------------------------------------------


def table(rows: Sequence[LoadRow]) -> str:
    lines = ["| workers | sessions | turns | turns/s | p50 ms | p99 ms | conflicts retried "
             "| turns lost |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.workers} | {r.sessions} | {r.turns} | {r.turns_per_s:.1f} | {r.p50_ms:.0f} "
              f"| {r.p99_ms:.0f} | {r.conflicts} | {r.lost} |" for r in rows]
    return "\n".join(lines)


def plot(rows: Sequence[LoadRow], path: Path) -> Path:
    """Turns/s and p99 turn latency against the number of workers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r.workers for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.plot(xs, [r.turns_per_s for r in rows], marker="o")
    left.set_ylabel("turns/s (select + record)")
    left.set_title("Throughput")
    right.plot(xs, [r.p99_ms for r in rows], marker="o", label="p99")
    right.plot(xs, [r.p50_ms for r in rows], marker="s", linestyle="--", label="p50")
    right.set_ylabel("ms per turn")
    right.set_title("Turn latency")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.set_xlabel("worker processes")
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--turns-per-session", type=int, default=8,
                    help="turns replayed per conversation, at most")
    ap.add_argument("--hot-turns", type=int, default=20,
                    help="turns each worker writes to the shared hot session")
    ap.add_argument("--dsn", default=os.environ.get("DHRAG_POSTGRES_DSN"),
                    help="use this server (default: $DHRAG_POSTGRES_DSN, else a throw-away one)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows and settings here")
    ap.add_argument("--plot", type=Path, default=None, help="draw turns/s and p99 here (PNG)")
    args = ap.parse_args(argv)
    if min(args.workers) < 1 or args.sessions < 1 or args.turns_per_session < 1 \
            or args.hot_turns < 0:
        ap.error("--workers, --sessions and --turns-per-session must be >= 1, --hot-turns >= 0")
    return args


def _describe(settings: Mapping[str, str], given: bool, workload: Workload, workers: Sequence[int],
              capacity: int) -> None:
    origin = ("server given by --dsn (or $DHRAG_POSTGRES_DSN)" if given
              else "server: throw-away TempPostgres, not crash-safe")
    print(f"{origin}; durability: fsync={settings['fsync']}, "
          f"synchronous_commit={settings['synchronous_commit']}, "
          f"full_page_writes={settings['full_page_writes']} (SHOW on the server)")
    print(f"workers: spawned processes, each its own DHRAG (MiniLM, FAISS, PostgresStore); "
          f"torch and FAISS on one thread each; machine: {os.cpu_count()} cores")
    print(f"workload: {workload.sessions} sessions replaying MTRAG conversations (<= "
          f"{workload.turns_per_session} turns each, served by any worker, in order per "
          f"session) + {workload.hot_turns} turns per worker on one shared hot session")
    from dhrag_core import Settings

    default = " (dhrag's default)" if capacity == Settings().limits.capacity else ""
    print(f"capacity: {capacity} turns per session{default}; the largest session records at "
          f"most {needed_capacity(workload, max(workers))}: nothing is evicted")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    workload = Workload(args.sessions, args.turns_per_session, args.hot_turns)
    bench = load_benchmark(workload.bench_dir)
    prepare_kb_vectors(workload, bench.kb)
    from dhrag_core import Settings

    capacity = max(Settings().limits.capacity, needed_capacity(workload, max(args.workers)))
    server = None
    dsn = args.dsn
    if not dsn:
        from dhrag_core.testing import TempPostgres

        server = TempPostgres()
        dsn = server.start()
    try:
        settings = server_settings(dsn)
        _describe(settings, server is None, workload, args.workers, capacity)
        rows = [run_load(dsn, n, workload, bench.conversations, capacity) for n in args.workers]
    finally:
        if server is not None:
            server.stop()
    print()
    print(table(rows))
    if args.json:
        payload = {"settings": {
            "sessions": workload.sessions, "turns_per_session_cap": workload.turns_per_session,
            "hot_turns_per_worker": workload.hot_turns, "capacity": capacity,
            "server": {"given_by_dsn": server is None, **settings},
            "threads_per_worker": 1, "cpu_count": os.cpu_count(),
        }, "rows": [r.summary() for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

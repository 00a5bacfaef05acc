"""Long sessions of interleaved conversations: topic switches and returns, from real data.

A user who talks about several things in one session leaves a thread and comes back to it. This
module builds such sessions from any neutral-format benchmark: ``threads`` real conversations
per session, their turns interleaved in blocks of ``block`` turns (questions, answers and gold
passages unchanged, each thread's turns in their own order). Every turn is tagged with its
``thread`` (the original conversation), its ``thread_turn`` and its ``kind``:

- ``first``: the thread's first turn in the session;
- ``continue``: the session's previous turn belongs to the same thread;
- ``return``: the thread resumes after turns of other threads.

Continue and return turns also say whether the question ``names_thread`` (``yes`` / ``no``):
whether it holds a content word that its own thread's earlier turns used (question or answer)
and no other thread of the session has used so far. A question that does not ("How is it
calculated?") leaves its thread to be told by meaning alone; where several threads were
about similar things, by nothing in its words.

Example:
    >>> out = interleave_benchmark(bench, threads=3, block=(2, 4), seed=0)  # doctest: +SKIP
    >>> write_interleaved(bench_dir, out_dir, threads=3, block=(2, 4), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.data import (
    KB_FILE,
    TASKS_FILE,
    Conversation,
    ConversationTurn,
    Message,
    Task,
    load_benchmark,
    write_tasks,
)
from dhrag_core.embedding import token_set

__all__ = ["KINDS", "interleave_benchmark", "interleave_order", "write_interleaved"]

KINDS = ("first", "continue", "return")


def interleave_order(
    lengths: Sequence[int], block: tuple[int, int], rng: random.Random
) -> list[tuple[int, int]]:
    """``(thread, position)`` pairs: every turn of every thread once, each thread in order.

    Blocks of ``block[0]..block[1]`` consecutive turns of one thread alternate with blocks of
    another thread (chosen at random among those with turns left); when a single thread is left
    it runs to its end.
    """
    low, high = block
    if low < 1 or high < low:
        raise ValueError(f"block must be (min, max) with 1 <= min <= max, got {block!r}")
    nxt = [0] * len(lengths)
    order: list[tuple[int, int]] = []
    current = -1
    while True:
        open_ = [t for t, n in enumerate(lengths) if nxt[t] < n]
        if not open_:
            return order
        others = [t for t in open_ if t != current]
        current = rng.choice(others) if others else current
        for _ in range(rng.randint(low, high)):
            if nxt[current] >= lengths[current]:
                break
            order.append((current, nxt[current]))
            nxt[current] += 1


def _session_tasks(session_id: str, threads: Sequence[Conversation],
                   order: Sequence[tuple[int, int]]) -> list[Task]:
    tasks: list[Task] = []
    history: list[Message] = []
    said: dict[int, set[str]] = {}
    previous = -1
    for n, (t, pos) in enumerate(order, 1):
        turn: ConversationTurn = threads[t].turns[pos]
        kind = "first" if t not in said else "continue" if t == previous else "return"
        previous = t
        src = turn.task
        tags = dict(src.tags) if src is not None else {}
        tags.update(thread=threads[t].conversation_id, thread_turn=str(turn.turn), kind=kind)
        words = token_set(turn.question)
        if kind != "first":
            others = set().union(*(w for u, w in said.items() if u != t))
            tags["names_thread"] = "yes" if (words & said[t]) - others else "no"
        said.setdefault(t, set()).update(words, token_set(turn.answer or ""))
        tasks.append(Task(
            task_id=f"{session_id}::{n}", conversation_id=session_id, turn=n,
            history=tuple(history), question=turn.question,
            relevant=src.relevant if src is not None else (),
            rewrite=src.rewrite if src is not None else None, tags=tags,
        ))
        history.append(Message("user", turn.question))
        if turn.answer:
            history.append(Message("assistant", turn.answer))
    return tasks


def interleave_benchmark(
    conversations: Sequence[Conversation], *, threads: int, block: tuple[int, int], seed: int
) -> list[Task]:
    """Tasks of sessions of ``threads`` conversations each, interleaved in blocks.

    Conversations are shuffled by ``seed`` and grouped ``threads`` at a time (the last session
    may hold fewer); every original turn appears exactly once. Deterministic per seed.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    rng = random.Random(seed)
    convs = list(conversations)
    rng.shuffle(convs)
    tasks: list[Task] = []
    for s, start in enumerate(range(0, len(convs), threads)):
        group = convs[start : start + threads]
        order = interleave_order([len(c.turns) for c in group], block, rng)
        tasks.extend(_session_tasks(f"s{seed}-{threads}x{s:03d}", group, order))
    return tasks


def write_interleaved(
    bench_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, threads: int,
    block: tuple[int, int], seed: int,
) -> Path:
    """Write an interleaved copy of a neutral-format benchmark (the KB file is linked, not
    copied, where the file system allows); returns ``out_dir``."""
    src, out = Path(bench_dir).expanduser(), Path(out_dir).expanduser()
    bench = load_benchmark(src)
    out.mkdir(parents=True, exist_ok=True)
    kb_out = out / KB_FILE
    if kb_out.exists() or kb_out.is_symlink():
        kb_out.unlink()
    try:
        os.link(src / KB_FILE, kb_out)
    except OSError:
        kb_out.write_bytes((src / KB_FILE).read_bytes())
    write_tasks(interleave_benchmark(bench.conversations, threads=threads, block=block,
                                     seed=seed), out / TASKS_FILE)
    return out

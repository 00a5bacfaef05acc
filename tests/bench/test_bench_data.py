"""The neutral data format, MTRAG's conversion and interleaved sessions."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import (
    MTRAG_IDS,
    _conversation,
    _kb,
    _many_conversations,
    _tasks,
    _write_mtrag,
)

from benchmarks.__main__ import main as cli_main
from benchmarks.harness.convert_mtrag import convert
from benchmarks.harness.data import (
    Benchmark,
    Message,
    Task,
    build_conversations,
    load_benchmark,
    load_tasks,
    write_kb,
    write_tasks,
)
from benchmarks.harness.interleave import interleave_benchmark
from benchmarks.harness.metrics import (
    TaskScore,
    score_task,
)
from dhrag_core import Passage


def test_convert_mtrag_builds_kb_and_tasks(tmp_path: Path) -> None:
    _write_mtrag(tmp_path / "src")
    summary = convert(tmp_path / "src", tmp_path / "out")
    assert (summary.n_passages, summary.n_tasks, summary.n_evaluated) == (4, 3, 2)
    bench = load_benchmark(tmp_path / "out")
    kb = {p.key: p for p in bench.kb}
    assert sorted(kb) == ["d1", "d2", "d3", "d9"]
    assert (kb["d1"].text, kb["d1"].title) == ("Alpha ctx", "Alpha")  # contexts win
    assert (kb["d2"].text, kb["d2"].title) == ("Beta ctx", "Beta title")  # title falls back
    assert kb["d9"].text == "pool only"
    t1, t2, t3 = bench.tasks
    assert t1.task_id == "h7<::>1" and t1.conversation_id == "h7" and t1.history == ()
    assert t2.relevant == ("d2", "d3") and t2.rewrite == "What follows alpha?"
    assert t2.history == (
        Message("user", "What is alpha?"), Message("assistant", "Alpha is first."))
    assert t2.tags == {"domain": "dom", "multi_turn": "Follow-up", "answerability": "ANSWERABLE",
                       "question_type": "Factoid"}
    assert not t3.evaluated and t3.rewrite is None
    (conv,) = bench.conversations
    assert [(t.question, t.answer) for t in conv.turns] == [
        ("What is alpha?", "Alpha is first."), ("And its successor?", "Beta."), ("Why?", "")]


def test_convert_reports_missing_input(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"conversations\.jsonl"):
        convert(tmp_path, tmp_path / "out")


def test_tasks_round_trip_and_validation(tmp_path: Path) -> None:
    tasks = _tasks()
    write_tasks(tasks, tmp_path / "tasks.jsonl")
    assert load_tasks(tmp_path / "tasks.jsonl") == tasks
    bad = Task("x", "c1", 3, (), "q", ())  # turn 3 with no earlier user message
    with pytest.raises(ValueError, match="does not match"):
        build_conversations([bad])


def test_interleaving_is_causal_complete_and_keeps_gold_passages() -> None:
    original = _many_conversations()
    by_question = {t.question: t for t in original}
    last = {c: max(t.turn for t in original if t.conversation_id == c)
            for c in {t.conversation_id for t in original}}
    # the answer after a conversation's last question is not in the data
    answer_of = {t.question: f"{t.conversation_id} answer {t.turn}" for t in original
                 if t.turn < last[t.conversation_id]}
    tasks = interleave_benchmark(build_conversations(original), threads=3, block=(2, 3), seed=4)
    assert sorted(t.question for t in tasks) == sorted(by_question)
    conversations = build_conversations(tasks)  # the transcripts are consistent
    assert len(conversations) == 3
    last_thread: dict[str, str] = {}
    seen: dict[str, set[str]] = {}
    for task in tasks:
        src = by_question[task.question]
        thread = task.tags["thread"]
        assert thread == src.conversation_id and task.tags["thread_turn"] == str(src.turn)
        assert task.relevant == src.relevant and task.rewrite == src.rewrite
        assert task.tags["domain"] == src.tags["domain"]
        # the history is exactly the session's earlier turns, each with its own answer
        earlier = [t for t in tasks if t.conversation_id == task.conversation_id
                   and t.turn < task.turn]
        expected = [m for t in earlier for m in (
            Message("user", t.question),
            *([Message("assistant", answer_of[t.question])] if t.question in answer_of else []))]
        assert list(task.history) == expected
        assert all(by_question[t.question].turn < src.turn for t in earlier
                   if t.tags["thread"] == thread), "each thread keeps its order"
        threads_seen = seen.setdefault(task.conversation_id, set())
        kind = ("first" if thread not in threads_seen
                else "continue" if last_thread.get(task.conversation_id) == thread
                else "return")
        assert task.tags["kind"] == kind
        threads_seen.add(thread)
        last_thread[task.conversation_id] = thread
    assert {t.tags["kind"] for t in tasks} == {"first", "continue", "return"}


def test_interleaving_is_deterministic_per_seed() -> None:
    convs = build_conversations(_many_conversations())

    def order(seed: int) -> list[tuple[str, str]]:
        return [(t.task_id, t.question)
                for t in interleave_benchmark(convs, threads=3, block=(2, 4), seed=seed)]

    assert order(1) == order(1)
    assert order(1) != order(2)
    with pytest.raises(ValueError, match="block"):
        interleave_benchmark(convs, threads=3, block=(3, 2), seed=0)


def test_interleave_command_writes_a_benchmark(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_kb(_kb(), src / "kb.jsonl")
    write_tasks(_many_conversations(), src / "tasks.jsonl")
    assert cli_main(["interleave", "--bench", str(src), "--out", str(tmp_path / "out"),
                     "--threads", "2", "--seed", "3"]) == 0
    bench = load_benchmark(tmp_path / "out")
    assert len(bench.tasks) == len(_many_conversations()) and len(bench.kb) == len(_kb())
    assert all("kind" in t.tags for t in bench.tasks)


def test_a_conversation_and_its_interleaved_copies_are_one_cluster_and_one_fold() -> None:
    """MTRAG's ids join conversation and turn with ``<::>``: the key is the conversation id
    itself, the ``thread`` its interleaved copies carry (not ``id<``, as ``split("::")`` had)."""
    from benchmarks.harness import report
    from benchmarks.harness.crossval import conversation_of, fold_of, task_fold
    from benchmarks.studies import text_path, tune_dhrag

    assert report.conversation_of is conversation_of  # one function for every caller
    assert tune_dhrag.conversation_of is conversation_of
    assert text_path.conversation_of is conversation_of
    tasks = []
    for first, domain in MTRAG_IDS.items():
        cid = first.split("<::>")[0]
        history: list[Message] = []
        for turn in range(1, 4):
            tasks.append(Task(f"{cid}<::>{turn}", cid, turn, tuple(history), f"q{turn} {cid}",
                              (f"p-{cid}-{turn}",), tags={"domain": domain}))
            history += [Message("user", f"q{turn} {cid}"), Message("assistant", "a")]
    assert tasks[0].task_id in MTRAG_IDS
    woven = interleave_benchmark(build_conversations(tasks), threads=2, block=(1, 2), seed=0)
    scores = [score_task(t.task_id, t.turn, [], t.relevant, t.tags) for t in tasks + woven]
    keys = {s.task_id: conversation_of(s) for s in scores}
    assert keys["dd6b6ffd177f2b311abe676261279d2f<::>2"] == "dd6b6ffd177f2b311abe676261279d2f"
    assert set(keys.values()) == {t.conversation_id for t in tasks}  # 4 clusters, not 8
    by_conversation: dict[str, set[int]] = {}
    for s in scores:
        by_conversation.setdefault(keys[s.task_id], set()).add(task_fold(s, 5))
    assert by_conversation == {c: {fold_of(c, 5)} for c in keys.values()}
    # the neutral format's "::" (the scenario set's "sw01::2") and an id without a turn
    assert conversation_of(TaskScore("sw01::2", 2, {})) == "sw01"
    assert conversation_of(TaskScore("lone", 1, {})) == "lone"


def test_interleaving_says_whether_a_question_names_its_thread() -> None:
    nile = _conversation("nile", [
        ("Where does the Nile flow?", "North through Egypt."),
        ("How long is the Nile?", "About 6,650 km."),   # "nile": only this thread said it
        ("Is there a bank in Egypt?", "Many."),  # "egypt": said by both threads before
        ("Who explored it first?", "Several expeditions."),  # no word said before
    ])
    ira = _conversation("ira", [
        ("What is a Roth IRA?", "A retirement account."),
        ("Can I open one in Egypt?", "Ask a bank there."),  # "egypt": the other's word
        ("What are the retirement account limits?", "They change yearly."),  # its own words
    ])
    tasks = interleave_benchmark(build_conversations(nile + ira), threads=2, block=(1, 1),
                                 seed=0)
    named = {t.question: t.tags.get("names_thread") for t in tasks}
    order = [t.question for t in tasks]
    assert order.index("Can I open one in Egypt?") < order.index("Is there a bank in Egypt?")
    assert named == {
        "Where does the Nile flow?": None, "What is a Roth IRA?": None,  # first turns
        "How long is the Nile?": "yes", "Is there a bank in Egypt?": "no",
        "Who explored it first?": "no",
        "Can I open one in Egypt?": "no", "What are the retirement account limits?": "yes",
    }


def test_data_stats_count_gold_length_and_gold_shared_with_the_previous_turn() -> None:
    from dataclasses import replace as with_

    from benchmarks.studies.data_stats import stats

    tasks = _tasks("c1")
    tasks[2] = with_(tasks[2], relevant=("gold-c1-2",))  # turn 3 reuses turn 2's gold
    kb = [Passage(text="a gold passage of ten words about alpha city here", id=p.id)
          if p.id == "gold-c1-1" else p for p in _kb()]
    bench = Benchmark(kb=kb, tasks=tasks, conversations=build_conversations(tasks))
    out = stats(bench)
    assert out["gold_in_kb"] == 1.0 and out["later_turns"] == len(tasks) - 1
    assert out["share_gold_with_previous_turn"] == pytest.approx(1 / (len(tasks) - 1))
    # gold: 10 and 4 words; the rest: 6, 6, 3 and four of 4
    assert out["gold_median_words"] == 7.0 and out["other_median_words"] == 4.0


"""One run, its report, the command line and rerun."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_support import (
    _kb,
    _tasks,
)

from benchmarks.__main__ import main as cli_main
from benchmarks.harness.data import (
    Benchmark,
    build_conversations,
    write_kb,
    write_tasks,
)
from benchmarks.harness.metrics import TaskScore
from benchmarks.harness.paths import REPO_ROOT, default_data
from benchmarks.harness.report import markdown, summarise, write_report
from benchmarks.harness.runner import RunConfig, run_benchmark
from dhrag_core import HashingEmbedder


def test_run_and_report_with_hashing_embedder(tmp_path: Path) -> None:
    tasks = _tasks("c1") + _tasks("c2")
    bench = Benchmark(kb=_kb(), tasks=tasks, conversations=build_conversations(tasks))
    config = RunConfig(bench_dir=tmp_path, cache_dir=tmp_path / "cache", model_name="hash",
                       systems=("all-questions", "interp-0.3-*", "rewrite-ref", "dhrag"),
                       show_progress=False)
    result = run_benchmark(config, embedder=HashingEmbedder(), bench=bench)
    names = [s.name for s in result.systems]
    assert names[0] == "last-turn" and "rewrite-ref" in names  # the baseline is always run
    summary = summarise(result)
    first = summary["systems"][0]
    assert first["overall"]["n"] == 6 and set(first["by_depth"]) == {"1", "2", "3-4"}
    assert summary["tuning"]["interp-N-N"]["best"].startswith("interp-0.3-")
    by_name = {s["name"]: s for s in summary["systems"]}
    # the history work is reported for the memory system only, and is part of its turn
    dh = by_name["dhrag"]["latency_ms"]
    assert 0 < dh["history_p50"] <= dh["turn_p95"] and dh["history_p50"] <= dh["history_p95"]
    assert "history_p50" not in first["latency_ms"]
    assert summary["meta"]["timings_s"]["peak_rss_mib"] > 10
    assert by_name["dhrag"]["peak_rss_mib"] >= first["peak_rss_mib"]
    text = markdown(summary)
    assert "rewrite-ref (reference)" in text and "MRR@10 by turn depth" in text
    assert "history p50 ms" in text and "peak RSS of the run" in text
    paths = write_report(summary, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["meta"]["n_evaluated"] == 6
    assert paths["plot"].stat().st_size > 0


def test_cli_runs_on_a_neutral_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = _tasks()
    write_kb(_kb(), tmp_path / "bench" / "kb.jsonl")
    write_tasks(tasks, tmp_path / "bench" / "tasks.jsonl")
    assert cli_main(["list"]) == 0
    assert "rewrite-ref" in capsys.readouterr().out
    assert cli_main(["run", "--bench", str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 2


def test_a_data_folder_given_must_exist_even_with_a_cached_conversion(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cached = tmp_path / "cache" / "benchmarks" / "mtrag"
    write_kb(_kb(), cached / "kb.jsonl")
    write_tasks(_tasks(), cached / "tasks.jsonl")
    (cached / "manifest.json").write_text(json.dumps({"source": str(tmp_path / "raw")}))
    code = cli_main(["run", "--quick", "--data", str(tmp_path / "typo"), "--cache",
                     str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    assert code == 2 and "typo does not exist" in capsys.readouterr().err


@pytest.mark.model
def test_quick_run_end_to_end(tmp_path: Path) -> None:
    data = default_data()
    if not (data / "conversations.jsonl").is_file():
        pytest.skip(f"MTRAG data not found at {data} (set DHRAG_DATA)")
    out = tmp_path / "results"
    code = cli_main(["run", "--quick", "--data", str(data), "--cache", str(tmp_path / "cache"),
                     "--out", str(out), "--no-progress"])
    assert code == 0
    summary = json.loads((out / "quick.json").read_text())
    assert summary["meta"]["n_evaluated"] > 5
    by_name = {s["name"]: s for s in summary["systems"]}
    assert {"last-turn", "rewrite-ref"} <= set(by_name)
    for s in by_name.values():
        assert 0.0 <= s["overall"]["MRR@10"] <= 1.0
    assert by_name["last-turn"]["overall"]["MRR@10"] > 0.2  # the retriever finds gold passages
    assert (out / "quick.md").is_file() and (out / "quick_depth.png").is_file()
    # `rerun` makes the same report again from the config stored in it, in place
    assert summary["meta"]["imports"] == []
    (out / "quick.json").rename(out / "before.json")
    assert cli_main(["rerun", str(out / "before.json")]) == 2, "a renamed report is refused"
    (out / "before.json").rename(out / "quick.json")
    assert cli_main(["rerun", str(out / "quick.json")]) == 0
    again = json.loads((out / "quick.json").read_text())
    assert again["meta"]["config"] == {**summary["meta"]["config"], "show_progress": False}
    assert {s["name"]: s["overall"] for s in again["systems"]} == {
        name: s["overall"] for name, s in by_name.items()}


def test_rerun_rebuilds_the_run_command_of_a_committed_report() -> None:
    from benchmarks.__main__ import rerun_argv

    report = REPO_ROOT / "docs/results/report/benchmark_interleaved_3_report.json"
    argv = rerun_argv(report)
    assert argv[:5] == ["run", "--systems",
                        "last-turn,last-turn-lex,interp-qa-*-gated-lex,thread-oracle,dhrag",
                        "--out", str(report.parent)]
    joined = " ".join(argv)
    for part in ("--split report", "--interleave 3", "--seeds 0,1,2", "--block 2 4",
                 "--embedder minilm", "--answers dataset"):
        assert part in joined
    assert "--bench" not in argv and "--quick" not in argv


def test_rerun_refuses_what_run_did_not_write(tmp_path: Path) -> None:
    other = tmp_path / "one_knob.json"
    other.write_text(json.dumps({"rows": []}))
    assert cli_main(["rerun", "--dry-run", str(other)]) == 2
    report = REPO_ROOT / "docs/results/adapters/benchmark.json"
    assert cli_main(["rerun", "--jobs", "0", str(report)]) == 2


def test_rerun_passes_a_plug_in_to_each_run(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    report = REPO_ROOT / "docs/results/adapters/benchmark.json"
    assert cli_main(["rerun", "--dry-run", "--jobs", "2", "--import",
                     "benchmarks.harness.adapter_systems", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "--import benchmarks.harness.adapter_systems" in printed and "lc-vector" in printed
    # a report naming the plug-in by its path before benchmarks/ was sorted by kind
    old = json.loads(report.read_text(encoding="utf-8"))
    old["meta"]["imports"] = ["benchmarks.adapter_systems"]
    (tmp_path / "benchmark.json").write_text(json.dumps(old), encoding="utf-8")
    assert cli_main(["rerun", "--dry-run", str(tmp_path / "benchmark.json")]) == 0
    moved = capsys.readouterr().out
    assert printed.count("--import") == moved.count("--import") == 1
    assert "--import benchmarks.harness.adapter_systems" in moved


def test_scaling_plot_is_written(tmp_path: Path) -> None:
    from benchmarks.harness.report import plot_scaling

    rows = [{"triples": n, "turn_p50_ms": 0.1 * n ** 0.3, "turn_p95_ms": 0.2 * n ** 0.3,
             "naive_turn_p50_ms": 0.001 * n} for n in (100, 1000, 10000)]
    path = plot_scaling(rows, tmp_path / "scaling.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with_rss = [{**r, "naive_turn_p95_ms": 0.002 * r["triples"], "peak_rss_mib": 300.0,
                 "naive_peak_rss_mib": 310.0} for r in rows]
    wide = plot_scaling(with_rss, tmp_path / "scaling_rss.png")
    assert wide.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_history_micro_benchmark_runs_small_with_one_and_two_workers() -> None:
    from benchmarks.perf.history_micro import run_naive, run_size

    one = run_size(200, 20)
    two = run_size(200, 20, workers=2)
    for row in (one, two):
        assert row["triples"] == 200 and 0 < row["turn_p50_ms"] <= row["turn_p95_ms"]
        assert row["model_rss_mib"] is None and row["peak_rss_mib"] > 0
    assert one["workers"] == 1 and two["workers"] == 2
    varied = run_size(400, 20, topics="varied", sessions=4)
    assert varied["topics"] == 40 and varied["sessions"] == 4 and varied["triples"] == 400
    assert 0 < varied["add_p99_ms"] <= varied["add_max_ms"]
    with pytest.raises(ValueError, match="--topics"):
        run_size(200, 20, topics="many")
    naive = run_naive(200, 20, model=False)
    assert 0 < naive["naive_turn_p50_ms"] <= naive["naive_turn_p95_ms"]
    assert naive["naive_peak_rss_mib"] > 0


def test_naive_baseline_evicts_the_lowest_weight_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import benchmarks.perf.history_micro as micro

    seen: list[np.ndarray] = []
    real_unit = micro._unit

    def unit(*args: Any, **kwargs: Any) -> np.ndarray:
        out = real_unit(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(micro, "_unit", unit)
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, micro.DIM))
    times = micro._naive(50, 5, rng, centres)
    assert len(times) == 5
    stored, new_queries = seen[0], seen[1]
    # every new query overwrote one row of the preallocated matrix: the 5 rows are there
    assert stored.shape == (50, micro.DIM)
    for q in new_queries:
        assert (np.abs(stored - q).max(axis=1) == 0).sum() == 1


def test_report_paths_are_portable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.harness.report import portable_path

    home = tmp_path / "home"
    work = home / "work" / "repo"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert portable_path(work / ".." / "shared" / "kb.npz") == "../shared/kb.npz"
    assert portable_path(home / ".cache" / "dhrag") == "~/.cache/dhrag"
    assert portable_path(Path("/opt/elsewhere/data")) == "/opt/elsewhere/data"


def test_report_splits_return_turns_by_naming() -> None:
    from benchmarks.harness.report import _naming, _subsets

    def score(kind: str, named: str | None) -> TaskScore:
        tags = {"kind": kind} | ({"names_thread": named} if named else {})
        return TaskScore(task_id=f"{kind}{named}", turn=2, tags=tags, values={"MRR@10": 1.0})

    scores = [score("first", None), score("continue", "yes"), score("return", "yes"),
              score("return", "no")]
    assert [_naming(s) for s in scores] == [
        None, "continue (named)", "return (named)", "return (unnamed)"]
    subsets = dict(_subsets(scores))
    assert [s.task_id for s in scores if subsets["return (unnamed)"](s)] == ["returnno"]
    assert [s.task_id for s in scores if subsets["return (named)"](s)] == ["returnyes"]


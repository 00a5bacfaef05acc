"""The results tree: every file under docs/results is listed by a manifest with a command of
this repository and a known commit, its index is current, and ``rerun`` reads the manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import main as cli_main
from benchmarks.__main__ import rerun_commands
from benchmarks.tools import results_index
from benchmarks.tools.results_index import RESULTS


def test_every_result_file_is_listed_once_with_a_real_command_and_commit() -> None:
    assert results_index.check(RESULTS) == []


def test_the_results_index_is_current_and_names_every_file() -> None:
    assert results_index.held() == results_index.render(RESULTS), (
        "the index in docs/README.md is stale: python -m benchmarks.tools.results_index --write")
    page = results_index.PAGE.read_text(encoding="utf-8")
    docs = results_index.PAGE.parent
    unnamed = [str(p.relative_to(docs)) for p in RESULTS.rglob("*")
               if p.is_file() and f"({p.relative_to(docs).as_posix()})" not in page]
    assert not unnamed, f"docs/README.md does not name {unnamed}"


def _tree(tmp_path: Path, runs: list[dict[str, object]], files: list[str]) -> Path:
    root = tmp_path / "results"
    study = root / "study"
    study.mkdir(parents=True)
    (study / "notes.md").write_text("notes\n", encoding="utf-8")
    for name in files:
        (study / name).write_text("[]", encoding="utf-8")
    manifest = {"title": "a study", "page": "notes.md", "runs": runs}
    (study / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


GOOD = {"files": ["a.json"], "command": "python -m benchmarks.perf.soak --turns 10",
        "commit": "HEAD"}


def test_the_check_names_each_kind_of_fault(tmp_path: Path) -> None:
    assert results_index.check(_tree(tmp_path / "ok", [GOOD], ["a.json"])) == []
    faults = {
        "listed in no manifest.json": ([GOOD], ["a.json", "stray.json"]),
        "does not exist": ([{**GOOD, "files": ["a.json", "gone.json"]}], ["a.json"]),
        "runs no module of this repository": (
            [{**GOOD, "command": "python -m benchmarks.no_such_study"}], ["a.json"]),
        "unknown commit": ([{**GOOD, "commit": "0" * 40}], ["a.json"]),
        "also listed": ([GOOD, {**GOOD, "command": "python -m benchmarks.perf.load"}],
                        ["a.json"]),
    }
    for i, (fault, (runs, files)) in enumerate(faults.items()):
        problems = results_index.check(_tree(tmp_path / str(i), runs, files))
        assert len(problems) == 1 and fault in problems[0], (fault, problems)


def test_rerun_reads_a_manifest_for_files_that_are_not_reports_of_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    soak = RESULTS / "perf" / "soak.json"
    (argv,) = rerun_commands(soak)
    assert argv[:3] == ["python", "-m", "benchmarks.perf.soak"]
    # a report of `run` is still made from its stored config
    report = RESULTS / "report" / "benchmark_report.json"
    assert rerun_commands(report)[0][3] == "run"
    # a folder: every run of its manifests, each once
    folder = rerun_commands(RESULTS / "perf")
    assert len(folder) == len({tuple(a) for a in folder}) >= 8
    assert cli_main(["rerun", "--dry-run", str(RESULTS)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) >= len(results_index.runs(RESULTS)) - 5  # runs sharing a command
    assert all(line.startswith(("python -m ", "DHRAG_")) for line in printed)


def test_rerun_refuses_a_file_nothing_says_how_to_make(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    stray = tmp_path / "stray.json"
    stray.write_text("[]", encoding="utf-8")
    assert cli_main(["rerun", "--dry-run", str(stray)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_rerun_runs_a_manifest_command_in_a_process_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "made.json"
    root = _tree(tmp_path, [{
        "files": ["a.json"], "commit": "HEAD",
        "command": f"DHRAG_PROBE=1 python -m benchmarks.perf.soak --turns 20 --capacity 5 "
                   f"--every 10 --json {out} --png ''"}], ["a.json"])
    assert cli_main(["rerun", str(root / "study" / "a.json")]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["turns"] == 20

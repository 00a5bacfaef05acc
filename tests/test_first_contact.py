"""What a newcomer meets first: missing benchmark data is one line and exit 2; the docs
agree with the shipped demo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.__main__ import main as bench_main
from benchmarks.studies.rewriters import main as rewriters_main


@pytest.mark.parametrize("command", ["run", "convert", "interleave"])
def test_benchmark_without_data_says_where_to_get_it(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--out", str(tmp_path / "out")] if command != "convert" else []
    rc = bench_main([command, "--data", str(tmp_path / "nowhere"),
                     "--cache", str(tmp_path / "cache"), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "nowhere does not exist" in err
    assert "github.com/IBM/mt-rag-benchmark" in err and "Apache-2.0" in err
    assert "--data" in err and "docs/layout.md 'Benchmark data'" in err
    # the page it names exists and explains the layout
    layout = (Path(__file__).parents[1] / "docs" / "layout.md").read_text(encoding="utf-8")
    assert "**Benchmark data**" in layout and "conversations.jsonl" in layout
    assert not (tmp_path / "cache").exists()


def test_benchmark_names_the_missing_mtrag_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "conversations.jsonl").write_text("")
    rc = bench_main(["convert", "--data", str(tmp_path), "--cache", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2 and "has no tasks.jsonl, corpus_pool.jsonl, retrieval_tasks" in err, err


def test_benchmark_explicit_bench_folder_without_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = bench_main(["run", "--bench", str(tmp_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "has no kb.jsonl and tasks.jsonl" in err and err.count("\n") == 1


def test_rewriter_benchmark_without_canard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = rewriters_main(["--data", str(tmp_path / "dev.json"), "--no-llm",
                         "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "github.com/aagohary/canard" in err and "--data" in err
    assert not (tmp_path / "out").exists()


def test_every_demo_passage_count_in_the_docs_is_the_real_one() -> None:
    root = Path(__file__).resolve().parents[1]
    real = len((root / "dhrag_core" / "data" / "demo_kb.jsonl").read_text("utf-8").splitlines())
    files = [root / "README.md", *sorted((root / "examples").glob("*.py"))]
    said = {(f.name, int(n)) for f in files for n in re.findall(
        r"\b(\d+) (?:demo passages|passages of real Wikipedia)", f.read_text("utf-8"))}
    assert said and all(n == real for _, n in said), (real, said)

"""Every results table in README.md that is generated from a run's JSON matches that JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import readme_tables
from benchmarks.paths import REPO_ROOT


@pytest.mark.parametrize("name", sorted(readme_tables.TABLES))
def test_readme_table_matches_its_run(name: str) -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    held, fresh = readme_tables.render(readme)[name]
    assert held, f"README.md has no <!-- table:{name} --> block"
    assert held == fresh, (f"README table {name!r} differs from its JSON: run "
                           "python -m benchmarks.readme_tables --write")


def test_a_changed_figure_in_the_json_is_caught(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    title, report, whole = readme_tables.CONFIGS[0]
    run = json.loads(report.read_text(encoding="utf-8"))
    dhrag = next(s for s in run["systems"] if s["name"] == "dhrag")
    dhrag["overall"]["MRR@10"] += 0.01
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(run), encoding="utf-8")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    monkeypatch.setattr(readme_tables, "CONFIGS",
                        ((title, stale, whole), *readme_tables.CONFIGS[1:]))
    held, fresh = readme_tables.render(readme)["headline"]
    assert held != fresh

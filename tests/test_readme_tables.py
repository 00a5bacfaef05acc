"""Every results table generated from a run's JSON (README.md and docs/) matches that JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.paths import REPO_ROOT
from benchmarks.tools import readme_tables


@pytest.mark.parametrize("page", readme_tables.pages(),
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_table_on_a_page_matches_its_run(page: Path) -> None:
    for name, (held, fresh) in readme_tables.render(page.read_text("utf-8")).items():
        assert held == fresh, (f"{page.name}: table {name!r} differs from its JSON: run "
                               "python -m benchmarks.tools.readme_tables --write")


def test_every_table_is_shown_somewhere_and_the_headline_in_the_readme() -> None:
    shown = {name for page in readme_tables.pages()
             for name in readme_tables.render(page.read_text("utf-8"))}
    assert shown == set(readme_tables.TABLES)
    assert "headline" in readme_tables.render((REPO_ROOT / "README.md").read_text("utf-8"))


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


def test_docs_holds_pages_and_one_results_tree_whose_index_names_every_page() -> None:
    docs = REPO_ROOT / "docs"
    top = sorted(p.name for p in docs.iterdir())
    assert [n for n in top if not n.endswith(".md")] == ["results"], top
    index = (docs / "README.md").read_text("utf-8")
    missing = [n for n in top if n != "README.md" and f"({n})" not in index
               and f"]({n}/" not in index]
    assert not missing, f"docs/README.md does not name {missing}"


def test_every_relative_link_in_the_pages_resolves() -> None:
    import re

    pages = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md",
             *sorted((REPO_ROOT / "docs").rglob("*.md")),
             *sorted((REPO_ROOT / "benchmarks").rglob("*.md"))]
    broken = [f"{page.relative_to(REPO_ROOT)}: {m.group(1)}" for page in pages
              for m in re.finditer(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text("utf-8"))
              if not m.group(1).startswith(("http:", "https:", "mailto:"))
              and not (page.parent / m.group(1)).exists()]
    assert not broken, broken

"""The results tree (``docs/results/``): each folder's ``manifest.json`` names its runs, and the
index page is rendered from them.

    python -m benchmarks.tools.results_index --write   # its section of docs/README.md
    python -m benchmarks.tools.results_index --check   # every file listed, every command real

A manifest holds a ``title``, the ``page`` that discusses its runs (relative to the folder) and
``runs``: each with its ``files`` (relative to the folder), the ``command`` that makes them from
the repository root (a string, or a list run in order), the ``commit`` whose code made them and,
where needed, a ``note`` (a command rebuilt from the file's rows, a file assembled by hand).
``python -m benchmarks rerun`` reads them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import REPO_ROOT

__all__ = ["MANIFEST", "PAGE", "RESULTS", "Run", "check", "find_run", "held", "render", "runs",
           "write"]

RESULTS = REPO_ROOT / "docs" / "results"
MANIFEST = "manifest.json"
INDEX = "README.md"
"""A study's notes beside its runs (also a page a manifest may name)."""
PAGE = REPO_ROOT / "docs" / "README.md"
"""The page whose marked section is the index of the tree."""
BEGIN, END = "<!-- results-index -->", "<!-- /results-index -->"


@dataclass(frozen=True)
class Run:
    """One run of a manifest: the folder it lives in and what its manifest says of it."""

    folder: Path
    files: tuple[str, ...]
    commands: tuple[str, ...]
    commit: str
    note: str = ""


def _manifests(root: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(root.rglob(MANIFEST)):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from exc
        yield path.parent, doc


def runs(root: Path = RESULTS) -> list[Run]:
    """Every run of every manifest under ``root``, folder by folder."""
    out = []
    for folder, doc in _manifests(root):
        for r in doc.get("runs", []):
            command = r["command"]
            commands = (command,) if isinstance(command, str) else tuple(command)
            out.append(Run(folder, tuple(r["files"]), commands, str(r.get("commit", "")),
                           str(r.get("note", ""))))
    return out


def find_run(path: Path, root: Path = RESULTS) -> Run | None:
    """The run whose manifest lists the file ``path``, if any."""
    path = path.resolve()
    for run in runs(path.parent if path.parent.is_dir() else root):
        if run.folder.resolve() == path.parent and path.name in run.files:
            return run
    return None


def _module(command: str) -> str | None:
    words = [w for w in shlex.split(command) if "=" not in w or w.startswith("-")]
    if len(words) >= 3 and words[0] == "python" and words[1] == "-m":
        return words[2]
    return None


def _known_commit(commit: str) -> bool:
    try:
        done = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO_ROOT,
                              capture_output=True, check=False)
    except OSError:
        return True  # no git here: nothing to check against
    return done.returncode == 0


def check(root: Path = RESULTS, *, commits: bool = True) -> list[str]:
    """What is wrong with the tree under ``root``: a file no manifest lists (other than the
    pages: the index, a study's notes), a listed file missing or listed twice, a command
    naming no module of this repository, an unknown commit, a manifest without a title or
    whose page does not exist."""
    problems = []
    listed: dict[Path, Path] = {}
    pages: set[Path] = set()
    for folder, doc in _manifests(root):
        where = folder / MANIFEST
        if not doc.get("title"):
            problems.append(f"{where}: no title")
        page = doc.get("page")
        if not page or not (folder / page).is_file():
            problems.append(f"{where}: page {page!r} does not exist")
        else:
            pages.add((folder / page).resolve())
        for run in doc.get("runs", []):
            for name in run.get("files", []):
                path = (folder / name).resolve()
                if path in listed:
                    problems.append(f"{where}: {name} is also listed in {listed[path]}")
                listed[path] = where
                if not path.is_file():
                    problems.append(f"{where}: {name} does not exist")
            command = run.get("command")
            commands = [command] if isinstance(command, str) else list(command or [])
            if not commands:
                problems.append(f"{where}: {run.get('files')} has no command")
            for c in commands:
                module = _module(c)
                if module is None or importlib.util.find_spec(module) is None:
                    problems.append(f"{where}: {c!r} runs no module of this repository")
            if commits and not _known_commit(str(run.get("commit", ""))):
                problems.append(f"{where}: unknown commit {run.get('commit')!r}")
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in (MANIFEST, INDEX) \
                and path.resolve() not in listed and path.resolve() not in pages:
            problems.append(f"{path.relative_to(root)}: listed in no {MANIFEST}")
    return problems


def render(root: Path = RESULTS) -> str:
    """The index of the tree (the marked section of docs/README.md): each folder's title,
    its page and manifest, and each run's command, commit and files."""
    base = root.resolve().parent
    lines = ["Rendered from each folder's `manifest.json` (`python -m benchmarks.tools."
             "results_index --write`; a test fails when it is out of date or a file is listed "
             "nowhere). `python -m benchmarks rerun docs/results/FOLDER` runs a folder's commands "
             "again (`--dry-run` prints them).", ""]
    for folder, doc in _manifests(root):
        rel = folder.resolve().relative_to(base).as_posix()
        page = (folder / doc["page"]).resolve()
        link = os.path.relpath(page, base)
        shown = page.relative_to(REPO_ROOT.resolve()) if page.is_relative_to(REPO_ROOT.resolve()) \
            else page
        lines += [f"### {rel}/", "", f"{doc['title']}: discussed in [{shown.as_posix()}]({link}); "
                  f"[manifest]({rel}/{MANIFEST}).", ""]
        for run in doc["runs"]:
            files = ", ".join(f"[{f}]({rel}/{f})" for f in run["files"])
            command = run["command"]
            commands = "; ".join(f"`{c}`" for c in ([command] if isinstance(command, str)
                                                    else command))
            note = f" {run['note']}." if run.get("note") else ""
            lines.append(f"- {files}: {commands} (commit {run['commit']}).{note}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def held(page: Path = PAGE) -> str:
    """The index section as the page holds it now."""
    text = page.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n") + "\n"


def write(root: Path = RESULTS, page: Path = PAGE) -> None:
    """Render the index into the page's marked section."""
    text = page.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    page.write_text(text[:start] + "\n" + render(root) + text[end:], encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """``--write`` renders the index, ``--check`` lists what is wrong (exit 1 if anything)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tools.results_index",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--root", type=Path, default=RESULTS)
    ap.add_argument("--write", action="store_true", help="write the index into docs/README.md")
    ap.add_argument("--check", action="store_true", help="report what is wrong")
    args = ap.parse_args(argv)
    status = 0
    if args.check:
        problems = check(args.root)
        for p in problems:
            print(p, file=sys.stderr)
        status = 1 if problems else 0
    if args.write:
        write(args.root)
        print(f"wrote the index in {PAGE}")
    if not (args.check or args.write):
        print(render(args.root))
    return status


if __name__ == "__main__":
    raise SystemExit(main())

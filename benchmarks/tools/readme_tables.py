"""The results tables of README.md and docs/, rendered from the committed run JSON.

Each table sits between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` in README.md or
a page under docs/; ``tests/test_readme_tables.py`` renders every one from its JSON and
compares, so a stale figure fails.

    python -m benchmarks.tools.readme_tables            # print every table
    python -m benchmarks.tools.readme_tables --write    # rewrite them where they are
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import REPO_ROOT

__all__ = ["TABLES", "pages", "render", "rewrite"]

DOCS = REPO_ROOT / "docs"
REPORT = DOCS / "results" / "report"
WHOLE = DOCS / "results" / "whole_set"

#: (column title, run JSON of the report half, run JSON of the whole set or None)
CONFIGS: tuple[tuple[str, Path, Path | None], ...] = (
    ("plain", REPORT / "benchmark_report.json", WHOLE / "benchmark.json"),
    ("3 threads", REPORT / "benchmark_interleaved_3_report.json",
     WHOLE / "benchmark_interleaved_3.json"),
    ("10 threads", REPORT / "benchmark_interleaved_10_report.json",
     WHOLE / "benchmark_interleaved_10.json"),
    ("5 threads, blocks of 5-8 turns",
     REPORT / "blocks_5_8" / "benchmark_interleaved_5_report.json", None),
)
TOP_PASSAGE_ANSWERS = REPORT / "benchmark_report_top_passage_answers.json"
"""The plain report half replayed with ``--answers top-passage``."""
BASELINE = "interp-qa-*-gated-lex"
"""The strongest simple baseline: answer-aware interpolation with dhrag's gate and lexical
term; the best of its settings in each run (chosen on the data reported: favours it)."""
ROWS = (("the question alone (last turn)", "last-turn"),
        ("last turn + dhrag's lexical term", "last-turn-lex"),
        ("best answer-aware interpolation + gate + lexical term", BASELINE),
        ("**dhrag, defaults**", "dhrag"),
        ("perfect thread tracking (reference)", "thread-oracle"))
"""(row label, system name or glob)."""


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _system(run: Mapping[str, Any], pattern: str) -> Mapping[str, Any] | None:
    """The run's system named ``pattern`` (a glob: the best MRR@10 among its matches)."""
    found = [s for s in run["systems"] if fnmatch.fnmatchcase(s["name"], pattern)]
    if not found:
        return None
    best: Mapping[str, Any] = max(found, key=lambda s: s["overall"]["MRR@10"])
    return best


def _vs_dhrag(run: Mapping[str, Any], name: str, subset: str,
              metric: str = "MRR@10") -> tuple[float, float] | None:
    """dhrag's ``metric`` minus ``name``'s on ``subset`` and the p-value (signs flipped per
    original conversation)."""
    for row in run.get("focus", {}).get("rows", []):
        if row["system"] == name and f"{metric}_{subset}_delta" in row:
            return float(row[f"{metric}_{subset}_delta"]), float(row[f"{metric}_{subset}_p"])
    return None


def _p(p: float) -> str:
    return "<.001" if p < 0.001 else f"{p:.3f}".lstrip("0")


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + f"{abs(x):.3f}".lstrip("0")


def _mrr(system: Mapping[str, Any], subset: str) -> float | None:
    part = _part(system, subset)
    return None if part is None else float(part["MRR@10"])


def _cell(run: Mapping[str, Any], pattern: str, subset: str) -> str:
    s = _system(run, pattern)
    mrr = None if s is None else _mrr(s, subset)
    if s is None or mrr is None:
        return "-"
    text = f"{mrr:.3f}".lstrip("0")
    vs = _vs_dhrag(run, s["name"], subset) if s["name"] != "dhrag" else None
    if vs is not None:
        text += f" ({_signed(vs[0])}, {_p(vs[1])})"
    return text


def _columns(runs: Sequence[tuple[str, Mapping[str, Any]]], returns: bool = True,
             ) -> list[tuple[str, Mapping[str, Any], str]]:
    """(title, run, subset) per column: every turn, and for interleaved runs return turns."""
    out = []
    for title, run in runs:
        n = run["meta"]["n_evaluated"]
        out.append((f"{title}: all ({n:,})", run, "all"))
        if returns and run["meta"]["config"].get("interleave"):
            out.append((f"{title}: returns", run, "return"))
    return out


def _table(runs: Sequence[tuple[str, Mapping[str, Any]]],
           rows: Sequence[tuple[str, str]] = ROWS, returns: bool = True) -> str:
    columns = _columns(runs, returns)
    lines = ["| MRR@10 | " + " | ".join(t for t, _, _ in columns) + " |",
             "|" + "---|" * (len(columns) + 1)]
    for label, pattern in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(r, pattern, sub)
                                                   for _, r, sub in columns) + " |")
    lines += ["", "Each baseline: its MRR@10 (dhrag minus it, p: paired sign flips per "
              "original conversation)."]
    chosen = sorted({found["name"] for _, r in runs if (found := _system(r, BASELINE))})
    if any(pattern == BASELINE for _, pattern in rows) and chosen:
        lines[-1] += (" The interpolation is the best of its settings in each run, chosen on "
                      "the data shown: " + ", ".join(f"`{c}`" for c in chosen) + ".")
    return "\n".join(lines)


FRAMEWORK_ROWS = (
    ("the question alone", "last-turn"),
    ("the previous question + the question (a one-turn buffer)", "last-1-q"),
    ("the last 3 questions and answers + the question (a window buffer; the question comes "
     "last, so MiniLM's 256-token limit cuts it away in most texts: it measures truncation)",
     "last-3-qa"),
    ("every question so far (a whole-history buffer)", "all-questions"),
    ("MTRAG's own rewrite of each question + dhrag's lexical term (MTRAG's LLM rewrites, not "
     "an oracle; reference)", "rewrite-ref-lex"),
    ("**dhrag, defaults (no LLM call)**", "dhrag"),
)
"""What the frameworks' default memories put into retrieval, as the benchmark replays it."""


def frameworks() -> str:
    """Retrieval with the history fed to it as the frameworks' default memories feed it."""
    return _table([(title, _load(whole)) for title, _, whole in CONFIGS if whole is not None],
                  FRAMEWORK_ROWS, returns=False)


def headline() -> str:
    """dhrag against the baselines on the report half of the conversations, per setting."""
    return _table([(title, _load(report)) for title, report, _ in CONFIGS])


TUNE = DOCS / "results" / "tune_half"
TUNE_RUNS = (("plain", TUNE / "benchmark_tune.json"),
             ("3 threads", TUNE / "benchmark_interleaved_3_tune.json"),
             ("10 threads", TUNE / "benchmark_interleaved_10_tune.json"),
             ("5 threads, blocks of 5-8 turns",
              TUNE / "blocks_5_8" / "benchmark_interleaved_5_tune.json"))
"""The same runs on the tuning half (the conversations the defaults were checked on)."""


def tune_half() -> str:
    """dhrag against the baselines on the tuning half, beside the report half's table."""
    return _table([(title, _load(path)) for title, path in TUNE_RUNS])


def whole_set() -> str:
    """The same on every conversation (the half defaults were chosen on included)."""
    return _table([(title, _load(whole)) for title, _, whole in CONFIGS if whole is not None])


def top_passage_answers() -> str:
    """Plain report half, the history recording the dataset's answers or, without them, the
    first sentence of the passage each system ranked first."""
    return _table([("the dataset's answers", _load(CONFIGS[0][1])),
                   ("first sentence of the top passage", _load(TOP_PASSAGE_ANSWERS))])


ABLATIONS = (
    ("dhrag without cues (`use_cues=False`)", "dhrag-no-cues"),
    ("dhrag without the lexical term (`lexical_weight=0`)", "dhrag-no-lexical"),
    ("dhrag without the clarity gate (`clarity_threshold=None`)", "dhrag-no-clarity-gate"),
    ("dhrag without the thread's opening turn (`root_weight=0`)", "dhrag-no-root"),
    ("dhrag searching with T*'s query only (`thread_variants=1`)", "dhrag-one-thread"),
    ("dhrag hedging however clear the choice (`hedge_margin=None`)", "dhrag-hedge-always"),
    ("dhrag without threads (`use_chains=False`)", "dhrag-no-chains"),
    ("dhrag without recency (`use_recency=False`)", "dhrag-no-recency"),
    ("dhrag without integration (`use_integration=False`)", "dhrag-no-integration"),
    ("dhrag without query reconstruction (`use_rewrite=False`)", "dhrag-no-rewrite"),
    ("dhrag without hierarchy (flat scan, `use_hierarchy=False`)", "dhrag-no-hierarchy"),
    ("dhrag without clustering (`use_clustering=False`)", "dhrag-no-clustering"),
)
"""Each ablation switch of the whole-set runs: (row label, system name)."""
REFERENCES = (
    ("MTRAG LLM rewrite (reference: an LLM's rewrites from the data)", "rewrite-ref"),
    ("the same + the lexical term on the rewrite's words (reference)", "rewrite-ref-lex"),
)
INTERPOLATIONS = (
    ("interpolation of the questions only{name} (best of {n}, tuned)", "interp-[0-9]*"),
    ("answer-aware interpolation{name} (best of {n}, tuned)", "interp-qa-*[0-9]"),
    ("the same with dhrag's clarity gate{name} (best of {n}, tuned)", "interp-qa-*-gated"),
    ("answer-aware interpolation + dhrag's lexical term{name} (best of {n}, tuned)",
     "interp-qa-*[0-9]-lex"),
    ("answer-aware interpolation + clarity gate + lexical term{name} (best of {n}, tuned)",
     BASELINE),
)
"""The interpolation baselines, each the best of its grid in each run; ``{name}`` is filled
with the setting chosen where the table has one run, ``{n}`` with the grid's size."""
PLAIN_ROWS = (
    ("last turn", "last-turn"),
    ("last turn re-ranked by a length prior (best of {n}, tuned)", "last-turn-length-*"),
    ("last turn, re-ranked with dhrag's lexical term", "last-turn-lex"),
    ("all questions joined", "all-questions"),
    ("best last-N questions + the question (no answers)", "last-[0-9]-q"),
    ("best last-N turns with answers + the question", "last-[0-9]-qa"),
    *INTERPOLATIONS,
    ("**dhrag** (defaults, light rewriter, no LLM)", "dhrag"),
    *ABLATIONS,
    *REFERENCES,
)
INTERLEAVED_ROWS = (
    ("last turn", "last-turn"),
    ("last turn, re-ranked with dhrag's lexical term", "last-turn-lex"),
    *INTERPOLATIONS,
    ("**dhrag** (defaults)", "dhrag"),
    *ABLATIONS,
    ("thread oracle (reference: dhrag with one session per conversation)", "thread-oracle"),
    *REFERENCES,
)
NAMING_ROWS = (
    ("last turn, re-ranked with dhrag's lexical term", "last-turn-lex"),
    ("best answer-aware interpolation + clarity gate + lexical term (tuned)", BASELINE),
    ("dhrag without cues (`use_cues=False`)", "dhrag-no-cues"),
    ("dhrag without threads (`use_chains=False`)", "dhrag-no-chains"),
    ("dhrag searching with T*'s query only (`thread_variants=1`)", "dhrag-one-thread"),
    ("dhrag without the thread's opening turn (`root_weight=0`)", "dhrag-no-root"),
    ("**dhrag** (defaults)", "dhrag"),
    ("thread oracle (reference)", "thread-oracle"),
    ("MTRAG LLM rewrite + lexical term (reference)", "rewrite-ref-lex"),
)


def _part(system: Mapping[str, Any], subset: str) -> Mapping[str, Any] | None:
    """The figures of ``system`` on a subset: all, 5+ (turn depth), a kind of interleaved turn
    (first / continue / return), a naming split (``return (named)``) or a scenario pattern."""
    part: Mapping[str, Any] | None
    if subset == "all":
        part = system["overall"]
    elif subset == "5+":
        part = system.get("by_depth", {}).get("5+")
    else:
        for split in ("by_kind", "by_naming", "by_pattern"):
            part = (system.get(split) or {}).get(subset)
            if part is not None:
                break
    return part


def _delta(run: Mapping[str, Any], name: str, metric: str, subset: str) -> str:
    """dhrag minus ``name`` on ``metric`` and ``subset``, with its p-value, as a cell."""
    vs = _vs_dhrag(run, name, subset, metric)
    return "" if vs is None else f"{_signed(vs[0])} ({_p(vs[1])})"


def _label(label: str, run: Mapping[str, Any] | None, pattern: str) -> str:
    """``label`` with ``{n}`` (the grid's size) and ``{name}`` (the chosen setting, when the
    table shows one run) filled."""
    if run is None:
        return label.format(n="", name="").replace("best of , ", "best in each run, ")
    n = sum(fnmatch.fnmatchcase(s["name"], pattern) for s in run["systems"])
    chosen = _system(run, pattern)
    name = f" `{chosen['name']}`" if chosen is not None and chosen["name"] != pattern else ""
    return label.format(n=n, name=name)


def _grid(runs: Sequence[tuple[str, Mapping[str, Any]]],
          columns: Sequence[tuple[str, str, str]],
          rows: Sequence[tuple[str, str]]) -> str:
    """A table of systems (rows) by columns, for each run: (title, metric, subset) where
    metric ``delta:M`` is dhrag minus the system on M. A row of a system no run holds is left
    out; ``{n}``/``{name}`` in a label are filled from the only run, if there is one."""
    head = ["system"] + [f"{t} {c}".strip() if i == 0 else c
                         for t, _ in runs for i, (c, _, _) in enumerate(columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, pattern in rows:
        cells = []
        held = False
        for _, run in runs:
            s = _system(run, pattern)
            held = held or s is not None
            for _, metric, subset in columns:
                part = None if s is None else _part(s, subset)
                if s is None or part is None:
                    cells.append("-")
                elif metric.startswith("delta:"):
                    cells.append(_delta(run, s["name"], metric[6:], subset)
                                 if s["name"] != "dhrag" else "")
                else:
                    text = f"{float(part[metric]):.3f}".lstrip("0")
                    cells.append(f"**{text}**" if s["name"] == "dhrag" else text)
        if held:
            one = runs[0][1] if len(runs) == 1 else None
            lines.append(f"| {_label(label, one, pattern)} | " + " | ".join(cells) + " |")
    if len(runs) > 1:
        chosen = [f"{title.rstrip(':')}: " + ", ".join(
            f"`{found['name']}`" for _, pattern in rows if pattern.startswith("interp")
            and (found := _system(run, pattern)) is not None) for title, run in runs]
        if any(c.endswith("`") for c in chosen):
            lines += ["", "The interpolations chosen (best of their settings in each run): "
                      + "; ".join(chosen) + "."]
    return "\n".join(lines)


def plain_systems() -> str:
    """Every system of the whole-set plain run, with dhrag's difference and p-values."""
    columns = (("MRR@10", "MRR@10", "all"), ("nDCG@10", "nDCG@10", "all"),
               ("R@10", "R@10", "all"), ("MRR@10, turn 5+", "MRR@10", "5+"),
               ("dhrag vs it: dMRR@10 (p)", "delta:MRR@10", "all"),
               ("dnDCG@10 (p)", "delta:nDCG@10", "all"))
    return _grid([("", _load(WHOLE / "benchmark.json"))], columns, PLAIN_ROWS)


def interleaved_kinds() -> str:
    """Every system of the whole-set interleaved runs, by kind of turn."""
    columns = (("all", "MRR@10", "all"), ("first", "MRR@10", "first"),
               ("continue", "MRR@10", "continue"), ("return", "MRR@10", "return"),
               ("dhrag vs it, return (p)", "delta:MRR@10", "return"))
    runs = [(title + ":", _load(whole)) for title, _, whole in CONFIGS[1:3] if whole is not None]
    return _grid(runs, columns, INTERLEAVED_ROWS)


def naming() -> str:
    """Return turns of the whole-set interleaved runs split by whether the question names its
    thread (``names_thread`` of ``benchmarks.harness.interleave``)."""
    runs = [(title + ":", _load(whole)) for title, _, whole in CONFIGS[1:3] if whole is not None]
    columns = (("named", "MRR@10", "return (named)"),
               ("dhrag vs it (p)", "delta:MRR@10", "return (named)"),
               ("unnamed", "MRR@10", "return (unnamed)"),
               ("dhrag vs it (p)", "delta:MRR@10", "return (unnamed)"))
    sizes = []
    for title, run in runs:
        d = _system(run, "dhrag")
        parts = [(_part(d, c[2]) or {}).get("n", 0) if d else 0 for c in columns[::2]]
        sizes.append(f"{title.rstrip(':')} {int(parts[0]):,} named, {int(parts[1]):,} unnamed")
    return _grid(runs, columns, NAMING_ROWS) + "\n\nReturn turns: " + "; ".join(sizes) + "."


SCENARIOS = DOCS / "results" / "scenarios" / "benchmark.json"


def at_a_glance() -> str:
    """dhrag, the thread oracle, the strongest simple baseline and the last turn on each
    whole-set run and on the hand-written scenarios."""
    def fig(run: Mapping[str, Any], pattern: str, kinds: Sequence[str]) -> str:
        s = _system(run, pattern)
        if s is None:
            return "(= dhrag)" if pattern == "thread-oracle" else "-"
        cells = [_part(s, k) for k in kinds]
        return " / ".join(f"{float(c['MRR@10']):.3f}".lstrip("0") if c else "-" for c in cells)

    sets = [("plain MTRAG (one conversation a session)", _load(WHOLE / "benchmark.json"), ["all"])]
    for _, _, whole in CONFIGS[1:3]:
        if whole is not None:
            n = _load(whole)["meta"]["config"]["interleave"]
            sets.append((f"{n} conversations interleaved: all / return turns", _load(whole),
                         ["all", "return"]))
    scen = _load(SCENARIOS)
    sets.append((f"hand-written topic switches ({scen['meta']['n_conversations']} "
                 "conversations, a development set, below)", scen, ["all"]))
    lines = ["| set | dhrag | thread oracle | best simple baseline (answer-aware interpolation + "
             "dhrag's gate and lexical term, tuned) | last turn |", "|---|---|---|---|---|"]
    for label, run, kinds in sets:
        best = _system(run, BASELINE)
        chosen = f" (`{best['name']}`)" if best is not None else ""
        lines.append(f"| {label} | {fig(run, 'dhrag', kinds)} | "
                     f"{fig(run, 'thread-oracle', kinds)} | {fig(run, BASELINE, kinds)}{chosen} | "
                     f"{fig(run, 'last-turn', kinds)} |")
    return "\n".join(lines)


SCENARIO_ROWS = (
    ("last turn", "last-turn"),
    ("last turn + dhrag's lexical term", "last-turn-lex"),
    ("best answer-aware interpolation (best of {n} on this development set, its grid widened "
     "until the best lay inside{name})", "interp-qa-*"),
    ("dhrag without cues (`use_cues=False`)", "dhrag-no-cues"),
    ("dhrag without threads (`use_chains=False`)", "dhrag-no-chains"),
    ("dhrag without recency (`use_recency=False`)", "dhrag-no-recency"),
    ("**dhrag** (defaults)", "dhrag"),
    ("thread oracle (reference: one session per topic)", "thread-oracle"),
)
PATTERNS = (("cue switch", "cue-switch"), ("named return", "named-return"),
            ("unnamed return", "unnamed-return"), ("comparison", "comparison"),
            ("drill-down", "drill-down"), ("unrelated, specified", "unrelated-specified"))


def scenarios() -> str:
    """The hand-written topic-switch scenarios by pattern (``--bench benchmarks/scenarios``)."""
    run = _load(SCENARIOS)
    dhrag = _system(run, "dhrag") or {}
    sizes = {k: int(v["n"]) for k, v in (dhrag.get("by_pattern") or {}).items()}
    columns = [(f"all ({run['meta']['n_evaluated']})", "MRR@10", "all")]
    columns += [(f"{title} ({sizes.get(key, 0)})", "MRR@10", key) for title, key in PATTERNS]
    columns.append(("dhrag vs it (p)", "delta:MRR@10", "all"))
    return _grid([("", run)], columns, SCENARIO_ROWS).replace(
        " lay inside `", " lay inside: `")


MPNET = DOCS / "results" / "mpnet_whole"
MPNET_RUNS = (("plain", MPNET / "benchmark.json"),
              ("3 threads", MPNET / "benchmark_interleaved_3.json"),
              ("plain, report half", DOCS / "results" / "mpnet_report" / "benchmark_report.json"))
"""all-mpnet-base-v2: the whole-set runs and the report half's (``--embedder mpnet``)."""
MPNET_ROWS = (("the question alone (last turn)", "last-turn"),
              ("last turn + a length prior (best of 3, tuned)", "last-turn-length-*"),
              ("last turn + dhrag's lexical term", "last-turn-lex"),
              ("best answer-aware interpolation + gate + lexical term (tuned)", BASELINE),
              ("**dhrag, defaults (0.4 / 0.6 and the answer rule chosen partly on mpnet's tuning "
               "runs)**", "dhrag"))


def mpnet() -> str:
    """dhrag with a second real embedder against the same baselines, every one of them run
    with that embedder."""
    return _table([(title, _load(path)) for title, path in MPNET_RUNS], MPNET_ROWS)


HISTORY_VARIED = DOCS / "results" / "perf" / "history_micro_varied.json"
HISTORY_SESSIONS = DOCS / "results" / "perf" / "history_micro_varied_10k_sessions.json"


def history_varied() -> str:
    """The history work at thousands of topics (``history_micro --topics varied``), in one
    session per size and spread over many sessions."""
    rows = json.loads(HISTORY_VARIED.read_text("utf-8"))
    rows += json.loads(HISTORY_SESSIONS.read_text("utf-8"))
    lines = ["| stored triples | topics | clusters / chains | select p50 / p99 ms "
             "| add p50 / p99 / slowest ms | turn p50 / p99 ms | peak RSS MiB "
             "| naive p50 ms / peak RSS MiB |", "|" + "---|" * 8]
    for r in rows:
        many = r.get("sessions", 1) > 1
        where = f" in {r['sessions']:,} sessions" if many else ""
        shape = (f"{r['clusters']:,} / {r['chains']:,}" + (" per session" if many else ""))
        naive = "-" if many else f"{r['naive_turn_p50_ms']:.2f} / {r['naive_peak_rss_mib']:.0f}"
        lines.append(
            f"| {r['triples']:,}{where} | {r['topics']:,} | {shape} "
            f"| {r['search_p50_ms']:.2f} / {r['select_p99_ms']:.2f} "
            f"| {r['add_p50_ms']:.2f} / {r['add_p99_ms']:.2f} / {r['add_max_ms']:.1f} "
            f"| {r['turn_p50_ms']:.2f} / {r['turn_p99_ms']:.2f} | {r['peak_rss_mib']:.0f} "
            f"| {naive} |")
    return "\n".join(lines)


REWRITERS = DOCS / "results" / "rewriters" / "rewriters_canard.json"
REWRITER_ROWS = (("raw question", "question (raw)"),
                 ("former appender (`LightRewriter(mode=\"append\")`)", "append (former light)"),
                 ("**light** (`LightRewriter()`, as the engine runs it)", "light"),
                 ("LLM (`LLMRewriter`)", "llm"))


def rewriters() -> str:
    """The rewriters on CANARD dev against the human rewrites (``benchmarks.studies.rewriters``)."""
    run = _load(REWRITERS)["results"]
    lines = ["| rewriter | BLEU-4 | ROUGE-L F1 | added P | added R | added F1 | changed "
             "| queries/s |", "|---|---|---|---|---|---|---|---|"]
    depth: list[str] = []
    for label, key in REWRITER_ROWS:
        r = run.get(key)
        if r is None or r.get("skipped"):
            lines.append(f"| {label} | skipped: no endpoint configured here | | | | | | |")
            continue
        raw = key == "question (raw)"
        lines.append(
            f"| {label} | {r['bleu4']:.1f} | {_f3(r['rougel_f1'])} | "
            f"{'-' if raw else _f3(r['added_precision'])} | "
            f"{0 if raw else _f3(r['added_recall'])} | {0 if raw else _f3(r['added_f1'])} | "
            f"{r['changed']:.0%} | {'-' if raw else format(round(r['queries_per_s']), ',')} |")
        if not depth:
            depth = ["| ROUGE-L F1 by earlier question/answer turns | " + " | ".join(
                f"{d} ({n:,})" for d, n in r["depth_n"].items()) + " |",
                "|---" * (len(r["depth_n"]) + 1) + "|"]
        depth.append(f"| {label.split(' (')[0].strip('*')} | " + " | ".join(
            _f3(v) for v in r["rougel_by_depth"].values()) + " |")
    return "\n".join([*lines, "", *depth])


def _f3(x: float) -> str:
    return f"{x:.3f}".lstrip("0") if 0 <= x < 1 else f"{x:.3f}"


BACKENDS = (DOCS / "results" / "backends" / "one_worker.json",
            DOCS / "results" / "backends" / "two_workers.json")
BACKEND_NAMES = {"memory": "memory", "sqlite": "SQLite", "postgres": "PostgreSQL"}


def backends() -> str:
    """Turn latency per history store, one worker and two alternating
    (``benchmarks.perf.history_micro --backends ...``)."""
    one, two = (json.loads(p.read_text(encoding="utf-8")) for p in BACKENDS)
    key = ("triples", "backend")
    two_by = {tuple(r[k] for k in key): r for r in two}
    lines = ["| stored triples | backend | 1 worker: turn p50 / p95 ms | 2 alternating workers: "
             "turn p50 / p95 ms | a full reload (s) |", "|---|---|---|---|---|"]
    for r in one:
        t = two_by.get(tuple(r[k] for k in key))
        pair = f"{t['turn_p50_ms']:.2f} / {t['turn_p95_ms']:.2f}" if t else "-"
        lines.append(f"| {r['triples']:,} | {BACKEND_NAMES.get(r['backend'], r['backend'])} | "
                     f"{r['turn_p50_ms']:.2f} / {r['turn_p95_ms']:.2f} | {pair} | "
                     f"{r['load_s']:.2f} |")
    return "\n".join(lines)


CRASH = DOCS / "results" / "crash"


def crash() -> str:
    """The long SIGKILL runs of ``tests/reliability/test_rel_crash.py`` (``DHRAG_CRASH_REPORT``)."""
    kill = json.loads((CRASH / "sigkill.json").read_text(encoding="utf-8"))
    evict = json.loads((CRASH / "sigkill_during_evictions.json").read_text(encoding="utf-8"))
    return "\n".join([
        "| run | kills | turns | found after every kill |", "|---|---|---|---|",
        f"| SIGKILL a writer at random moments, one SQLite file | {kill['kills']} | "
        f"{kill['committed_turns']:,} committed | every reopen and `integrity_check` ok, "
        f"{kill['committed_turns_lost']} committed turns lost, in-flight turns absent or "
        f"complete ({kill['in_flight_found_complete']} found complete) |",
        f"| SIGKILL during evictions (capacity {evict['capacity']}) | {evict['kills']} | "
        f"{evict['turns_written']:,} written, {evict['kills_among_evicting_writes']} kills "
        "inside evicting writes | exactly min(capacity, written) complete turns, the newest "
        "committed one kept, `integrity_check` ok, a reopened tree matches the rows |",
    ])


ADAPTERS = DOCS / "results" / "adapters" / "benchmark.json"
ADAPTER_ROWS = (("the question alone", "last-turn"),
                ("LangChain, vector store searched by vector (`lc-vector`)", "lc-vector"),
                ("LangChain, retriever searched by text (`lc-text`)", "lc-text"),
                ("LlamaIndex, vector index searched by vector (`li-vector`)", "li-vector"),
                ("LlamaIndex, retriever searched by text (`li-text`)", "li-text"),
                ("**the core** (`DHRAG` over FAISS)", "dhrag"))


def adapters() -> str:
    """The core against the same engine through each adapter's vector and text paths
    (``--import benchmarks.harness.adapter_systems``)."""
    return _table([("plain MTRAG", _load(ADAPTERS))], ADAPTER_ROWS, returns=False)


def settings() -> str:
    """Every ``Settings`` knob by group (the group's field and option object first), with its
    default, valid values and description (rendered from the declarations, not from a run)."""
    from dhrag_core.settings import GROUPS, Settings

    lines = []
    for group, title in GROUPS.items():
        name, what = title.split(": ", 1)
        lines += ["", f"**`{group}`: `{name}`** -- {what}", "",
                  "| setting | default | valid | what it does |", "|---|---|---|---|"]
        for k in Settings.knobs():
            if k.group == group:
                doc = k.doc.replace("|", "\\|")
                lines.append(f"| `{k.name}` | `{k.default!r}` | {k.valid()} | {doc} |")
    return "\n".join(lines[1:])


TOPICS = DOCS / "results" / "topics"


def topics() -> str:
    """History selection on TopiOCQA's report half (``python -m benchmarks topics``): the
    fitted thread decision, the former one (``thread_scores/``) and the rules, by turn kind."""
    fitted = json.loads((TOPICS / "topics_report.json").read_text("utf-8"))["summary"]
    former = json.loads((TOPICS / "thread_scores" / "topics_report.json").read_text("utf-8"))[
        "summary"]
    rows = [("the previous turn", fitted, "previous"),
            ("the nearest earlier turn (question cosine)", fitted, "nearest"),
            ("dhrag, thread scores (`thread_decision=\"scores\"`, before)", former, "dhrag"),
            ("**dhrag, fitted thread decision (default)**", fitted, "dhrag"),
            ("topic oracle (every earlier turn of the topic; reference)", fitted, "oracle")]

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}".lstrip("0").replace("-0.", "-.")

    head = (f"| TopiOCQA report half | same topic ({fitted['same']['turns']:,}): P@1 | "
            f"precision | return ({fitted['return']['turns']:,}): P@1 | precision | "
            f"new topic ({fitted['new']['turns']:,}): given history | turns given |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for label, summary, key in rows:
        same, back, new = (summary[k][key] for k in ("same", "return", "new"))
        lines.append(f"| {label} | {f(same['P@1'])} | {f(same['precision'])} | "
                     f"{f(back['P@1'])} | {f(back['precision'])} | "
                     f"{f(new['given history'])} | {new['selected per turn']:.2f} |")
    p = fitted["return"]["p (dhrag vs rule, P@1)"]["nearest"]
    gap = fitted["return"]["dhrag"]["P@1"] - fitted["return"]["nearest"]["P@1"]
    lines += ["", f"{fitted['conversations']:,} conversations. P@1: the first turn handed on "
              "has the question's topic; precision: the share of all turns handed on that have "
              f"it. On returns the fitted decision is {f(gap)} against the nearest earlier "
              f"turn (p {'< .001' if p < 0.001 else '= ' + f(p)}, paired sign flips by "
              "conversation)."]
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {"headline": headline, "whole_set": whole_set,
                                        "top_passage_answers": top_passage_answers,
                                        "history_varied": history_varied,
                                        "frameworks": frameworks, "settings": settings,
                                        "rewriters": rewriters, "backends": backends,
                                        "crash": crash, "tune_half": tune_half,
                                        "adapters": adapters,
                                        "plain_systems": plain_systems,
                                        "interleaved_kinds": interleaved_kinds,
                                        "naming": naming, "at_a_glance": at_a_glance,
                                        "mpnet": mpnet, "scenarios": scenarios,
                                        "topics": topics}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- table:{name} -->)\n(.*?)\n?(<!-- /table:{name} -->)", re.DOTALL)


def pages() -> list[Path]:
    """The files that may hold tables: README.md and every page under docs/."""
    return [REPO_ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def render(text: str) -> dict[str, tuple[str, str]]:
    """Table name -> (what ``text`` holds, what the JSON renders), for the tables it holds."""
    out = {}
    for name, make in TABLES.items():
        found = _block(name).search(text)
        if found:
            out[name] = (found.group(2), make())
    return out


def rewrite(path: Path) -> list[str]:
    """Rewrite every table block in ``path`` from its JSON; the names of those changed."""
    text = path.read_text(encoding="utf-8")
    changed = []
    for name, (held, fresh) in render(text).items():
        if held != fresh:
            def put(m: re.Match[str], table: str = fresh) -> str:
                return f"{m.group(1)}\n{table}\n{m.group(3)}"

            text = _block(name).sub(put, text)
            changed.append(name)
    if changed:
        path.write_text(text, encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the tables in README.md")
    args = ap.parse_args(argv)
    if args.write:
        for page in pages():
            for name in rewrite(page):
                print(f"rewritten: {page.relative_to(REPO_ROOT)}: {name}")
        return
    for name, make in TABLES.items():
        print(f"<!-- table:{name} -->\n{make()}\n<!-- /table:{name} -->\n")


if __name__ == "__main__":
    main()

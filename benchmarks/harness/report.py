"""Summaries of a run: a JSON-ready dict, a markdown report and a plot of MRR@10 by turn depth.

Example:
    >>> summary = summarise(result)  # doctest: +SKIP
    >>> paths = write_report(summary, Path("results"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.crossval import conversation_of
from benchmarks.harness.metrics import (
    DEPTH_BUCKETS,
    METRICS,
    TaskScore,
    depth_bucket,
    mean_scores,
    paired_randomisation_test,
    split_scores,
)
from benchmarks.harness.runner import RunResult, SystemRun

__all__ = [
    "conversation_of", "family", "latency_ms", "markdown", "plot_depth", "plot_scaling",
    "summarise", "write_report",
]

log = logging.getLogger(__name__)

KB_NOTE = (
    "Scores are comparable between systems of this run only: the knowledge base is the "
    "benchmark's own (for MTRAG: corpus_pool.jsonl + every passage of the conversations' "
    "contexts, 36,639 passages), not the full corpora of the MTRAG paper."
)


def _naming(s: TaskScore) -> str | None:
    """``return (named)`` / ``return (unnamed)`` (and the same for ``continue``): whether the
    question names its thread (``interleave``'s ``names_thread`` tag)."""
    named = s.tags.get("names_thread")
    if named is None:
        return None
    return f"{s.tags.get('kind')} ({'named' if named == 'yes' else 'unnamed'})"


SPLITS: dict[str, Callable[[TaskScore], str | None]] = {
    "by_depth": lambda s: depth_bucket(s.turn),
    "by_domain": lambda s: s.tags.get("domain"),
    "by_multi_turn": lambda s: s.tags.get("multi_turn"),
    "by_kind": lambda s: s.tags.get("kind"),
    "by_naming": _naming,
    "by_pattern": lambda s: s.tags.get("pattern"),
}
PVALUE_METRIC = "MRR@10"


def family(name: str) -> str:
    """A system's family: its name with numbers replaced by ``N`` (``interp-0.3-0.2`` ->
    ``interp-N-N``); members of a family differ only in a tuned knob."""
    return re.sub(r"\d+(\.\d+)?", "N", name)


def latency_ms(run: SystemRun) -> dict[str, float]:
    """Per-turn latency percentiles in ms: retrieve, observe, the whole turn (both), and the
    history work (``history_p50``/``p95``) for systems that report it."""
    r = np.array([t.retrieve_s for t in run.runs]) * 1000
    o = np.array([t.observe_s for t in run.runs]) * 1000
    out: dict[str, float] = {}
    parts = [("retrieve", r), ("observe", o), ("turn", r + o)]
    h = [t.history_s for t in run.runs]
    if h and all(x is not None for x in h):
        parts.append(("history", np.array(h, dtype=np.float64) * 1000))
    for label, values in parts:
        for q in (50, 95):
            out[f"{label}_p{q}"] = float(np.percentile(values, q)) if len(values) else 0.0
    return out


def _p_value(
    run: SystemRun, base: SystemRun | None, metric: str = PVALUE_METRIC,
    keep: Callable[[TaskScore], bool] = lambda s: True,
) -> float | None:
    if base is None or base.name == run.name:
        return None
    ours = {s.task_id: s.values[metric] for s in run.scores if keep(s)}
    theirs = {s.task_id: s.values[metric] for s in base.scores if keep(s)}
    common = [t for t in ours if t in theirs]
    origin = {s.task_id: conversation_of(s) for s in run.scores}
    return paired_randomisation_test([ours[t] for t in common], [theirs[t] for t in common],
                                     clusters=[origin[t] for t in common])


FOCUS = "dhrag"
"""The system compared with every other one in its own section, when it ran."""


def _deep(s: TaskScore) -> bool:
    return depth_bucket(s.turn) == "5+"


def _subsets(scores: Sequence[TaskScore]) -> list[tuple[str, Callable[[TaskScore], bool]]]:
    """Where the focus system is compared: all tasks, turn depth 5+, and the kinds of turn of
    interleaved sessions when the tasks carry them."""
    out: list[tuple[str, Callable[[TaskScore], bool]]] = [("all", lambda s: True), ("5+", _deep)]
    kinds = {s.tags.get("kind") for s in scores}
    for kind in ("continue", "return"):
        if kind in kinds:
            out.append((kind, lambda s, k=kind: s.tags.get("kind") == k))
    if "return" in kinds and any(s.tags.get("names_thread") for s in scores):
        for label in ("return (named)", "return (unnamed)"):
            out.append((label, lambda s, n=label: _naming(s) == n))
    for pattern in sorted({s.tags["pattern"] for s in scores if s.tags.get("pattern")}):
        out.append((pattern, lambda s, p=pattern: s.tags.get("pattern") == p))
    return out


def _focus(result: RunResult) -> dict[str, Any] | None:
    """The focus system against each other system: deltas and paired p-values."""
    focus = next((s for s in result.systems if s.name == FOCUS), None)
    if focus is None:
        return None
    subsets = _subsets(focus.scores)
    rows = []
    for other in result.systems:
        if other.name == FOCUS:
            continue
        row: dict[str, Any] = {"system": other.name, "reference": other.reference}
        for metric in ("MRR@10", "nDCG@10"):
            for label, keep in subsets:
                a = [s.values[metric] for s in focus.scores if keep(s)]
                b = [s.values[metric] for s in other.scores if keep(s)]
                row[f"{metric}_{label}_delta"] = (
                    float(np.mean(a) - np.mean(b)) if a and b else float("nan"))
                row[f"{metric}_{label}_p"] = _p_value(focus, other, metric, keep)
        rows.append(row)
    return {"system": FOCUS, "subsets": [label for label, _ in subsets], "rows": rows}


def _system_summary(run: SystemRun, base: SystemRun | None) -> dict[str, Any]:
    lat = latency_ms(run)
    base_lat = latency_ms(base) if base is not None else {}
    return {
        "name": run.name,
        "reference": run.reference,
        "description": run.description,
        "family": family(run.name),
        "overall": mean_scores(run.scores),
        **{name: split_scores(run.scores, key) for name, key in SPLITS.items()},
        f"p_{PVALUE_METRIC}_vs_baseline": _p_value(run, base),
        "latency_ms": lat,
        "latency_ratio": {k: lat[k] / base_lat[k] for k in ("turn_p50", "turn_p95")
                          if base_lat.get(k)},
        "coverage": run.coverage,
        "wall_s": run.wall_s,
        "rss_growth_mib": run.rss_growth_mib,
        "peak_rss_mib": run.peak_rss_mib,
        "comparisons": run.comparisons,
        "comparisons_per_turn": (run.comparisons / len(run.runs)
                                 if run.comparisons is not None and run.runs else None),
    }


def _tuning(systems: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """For each family with several members: every member's MRR@10 and the best one."""
    groups: dict[str, dict[str, float]] = {}
    for s in systems:
        groups.setdefault(s["family"], {})[s["name"]] = s["overall"]["MRR@10"]
    return {fam: {"best": max(members, key=lambda n: members[n]), "MRR@10": members}
            for fam, members in groups.items() if len(members) > 1}


def portable_path(path: Path) -> str:
    """``path`` as a report can show it on any machine: relative to the working folder when
    inside it or next to it (``../shared/...``), else under ``~`` when in the home folder,
    else absolute."""
    resolved = path.expanduser().resolve()
    try:
        rel = os.path.relpath(resolved, Path.cwd().resolve())
    except ValueError:  # another drive (Windows)
        rel = os.path.join(os.pardir, os.pardir)
    if not rel.startswith(os.path.join(os.pardir, os.pardir)):
        return rel
    home = Path.home().resolve()
    if resolved.is_relative_to(home):
        return str(Path("~") / resolved.relative_to(home))
    return str(resolved)


def summarise(result: RunResult) -> dict[str, Any]:
    """Every figure of a run, JSON-ready."""
    base = next((s for s in result.systems if s.name == result.config.baseline), None)
    systems = [_system_summary(s, base) for s in result.systems]
    config = {k: portable_path(v) if isinstance(v, Path) else v
              for k, v in asdict(result.config).items()}
    return {
        "meta": {
            "note": KB_NOTE,
            "config": config,
            "n_passages": result.n_passages,
            "n_conversations": result.n_conversations,
            "n_turns": result.n_turns,
            "n_evaluated": result.n_evaluated,
            "timings_s": result.timings,
            "p_value_test": f"paired randomisation (sign-flip), 10,000 resamples, {PVALUE_METRIC}, "
                            "signs flipped per original conversation",
        },
        "systems": systems,
        "tuning": _tuning(systems),
        "focus": _focus(result),
    }


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:.{digits}f}"


def _label(s: Mapping[str, Any]) -> str:
    return f"{s['name']} (reference)" if s["reference"] else str(s["name"])


def _overall_table(summary: Mapping[str, Any]) -> list[str]:
    base = summary["meta"]["config"]["baseline"]
    head = ["system", *METRICS, f"p vs {base}", "turn p50 ms", "p95 ms", "p50 x base",
            "p95 x base", "history p50 ms", "p95 ms", "RSS +MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary["systems"]:
        lat, ratio = s["latency_ms"], s["latency_ratio"]
        cells = [_label(s), *(_fmt(s["overall"][m]) for m in METRICS),
                 _fmt(s[f"p_{PVALUE_METRIC}_vs_baseline"], 4),
                 _fmt(lat["turn_p50"], 1), _fmt(lat["turn_p95"], 1),
                 _fmt(ratio.get("turn_p50"), 2), _fmt(ratio.get("turn_p95"), 2),
                 _fmt(lat.get("history_p50"), 2), _fmt(lat.get("history_p95"), 2),
                 _fmt(s.get("rss_growth_mib"), 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _split_table(summary: Mapping[str, Any], split: str, metric: str = "MRR@10") -> list[str]:
    groups: list[str] = []
    for s in summary["systems"]:
        groups.extend(g for g in s[split] if g not in groups)
    if split == "by_depth":
        groups = [g for g in DEPTH_BUCKETS if g in groups]
    first = summary["systems"][0][split] if summary["systems"] else {}
    head = ["system", *(f"{g} (n={int(first[g]['n'])})" if g in first else g for g in groups)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary["systems"]:
        cells = [_label(s), *(_fmt(s[split][g][metric]) if g in s[split] else "-"
                              for g in groups)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _coverage_table(summary: Mapping[str, Any]) -> list[str]:
    lines = ["| system | n | query | history | either |", "|---|---|---|---|---|"]
    for s in summary["systems"]:
        c = s["coverage"]
        if c:
            lines.append(f"| {_label(s)} | {int(c['n'])} | {_fmt(c['query'])} | "
                         f"{_fmt(c['history'])} | {_fmt(c['either'])} |")
    return lines


def markdown(summary: Mapping[str, Any]) -> str:
    """The report as markdown: overall table, tuned knobs, MRR@10 splits."""
    meta = summary["meta"]
    cfg = meta["config"]
    out = [
        "# Conversational retrieval benchmark",
        "",
        f"Data: `{cfg['bench_dir']}`{' (quick subset)' if cfg['quick'] else ''}"
        + (f", the {cfg['split']} half of the conversations (benchmarks.harness.crossval.half_of)"
           if cfg.get("split", "all") != "all" else "")
        + (", each turn recording as its answer the first sentence of the passage the system "
           "ranked first (not the dataset's answer)"
           if cfg.get("answers", "dataset") != "dataset" else "") + ": "
        f"{meta['n_passages']:,} passages, {meta['n_conversations']} conversations, "
        f"{meta['n_turns']} turns, {meta['n_evaluated']} evaluated tasks; "
        f"retriever {cfg['model_name']}"
        + (f" with cosines shifted to {cfg['shift']} + {1 - cfg['shift']:.2f} x cos"
           if cfg.get("shift") else "")
        + f" + exact inner product, k={cfg['k']}. "
        "Systems replay each conversation causally (earlier turns only).",
        "",
        meta["note"],
        "",
        f"p: {meta['p_value_test']}, against {cfg['baseline']}. Latency: retrieve + observe "
        "per turn, over all turns; x base = ratio to the baseline. History: the memory's own "
        "work per turn (selection, rewriting, integration, update; not embedding or the KB "
        "search), for systems that report it. RSS +MiB: resident memory the system added "
        f"while replaying; peak RSS of the run: {_fmt(meta['timings_s'].get('peak_rss_mib'), 0)}"
        " MiB.",
        "",
        *_overall_table(summary),
    ]
    compared = [(s["name"], s["comparisons_per_turn"]) for s in summary["systems"]
                if s.get("comparisons_per_turn") is not None]
    if compared:
        out += ["", "Vectors compared by the history tree's matching, per turn: "
                + ", ".join(f"{n} {c:.1f}" for n, c in compared) + "."]
    if summary["tuning"]:
        out += ["", "## Tuned knobs (tuned on this data, by MRR@10)", ""]
        for fam, t in summary["tuning"].items():
            out.append(f"- `{fam}`: best `{t['best']}` ({_fmt(t['MRR@10'][t['best']])}) "
                       f"among {len(t['MRR@10'])} settings")
    if summary.get("focus"):
        subsets = summary["focus"].get("subsets", ["all", "5+"])
        head = [f"d{m}{'' if d == 'all' else ' ' + d} | p" for d in subsets
                for m in ("MRR@10", "nDCG@10")]
        out += ["", f"## {summary['focus']['system']} against each system", "",
                "Difference of means (focus minus other) with the paired randomisation p-value "
                "(signs flipped per original conversation), "
                f"on: {', '.join(subsets)}.", "",
                "| other | " + " | ".join(head) + " |",
                "|---|" + "---|---|" * len(head)]
        for r in summary["focus"]["rows"]:
            cells = [f"{r[f'{m}_{d}_delta']:+.3f} | {_fmt(r[f'{m}_{d}_p'], 4)}"
                     for d in subsets for m in ("MRR@10", "nDCG@10")]
            name = r["system"] + (" (reference)" if r["reference"] else "")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    out += ["", "## Where the gold passages are (evaluated tasks at turn >= 2)", "",
            "Share of tasks with a gold passage in the system's own top-k (query), among the "
            "passages it retrieved at earlier turns (history), or in either.", "",
            *_coverage_table(summary)]
    titles = {"by_depth": "turn depth", "by_domain": "domain", "by_multi_turn": "Multi-Turn type",
              "by_kind": "kind of turn (interleaved sessions: first / continue / return)",
              "by_naming": "continue and return turns by whether the question names its thread "
                           "(a word only its thread used before)",
              "by_pattern": "scenario pattern (benchmarks/scenarios)"}
    for split, title in titles.items():
        if any(s[split] for s in summary["systems"]):
            out += ["", f"## MRR@10 by {title}", "", *_split_table(summary, split)]
    return "\n".join(out) + "\n"


def _plotted(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Systems to plot: singletons and the best member of each tuned family; ablations whose
    curve is identical to the full system's are left out (they would hide under it)."""
    best = {t["best"] for t in summary["tuning"].values()}
    tuned = set(summary["tuning"])
    full = {s["name"]: s["by_depth"] for s in summary["systems"]}
    return [s for s in summary["systems"]
            if (s["family"] not in tuned or s["name"] in best)
            and not ("-no-" in s["name"] and full.get(s["name"].split("-no-")[0]) == s["by_depth"])]


def plot_depth(summary: Mapping[str, Any], path: Path) -> Path:
    """Line plot of MRR@10 by turn depth per system (tuned families: best member only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    for s in _plotted(summary):
        xs = [g for g in DEPTH_BUCKETS if g in s["by_depth"]]
        ax.plot(xs, [s["by_depth"][g]["MRR@10"] for g in xs], marker="o", label=_label(s),
                linestyle="--" if s["reference"] else ":" if s["name"].startswith("bm25") else "-")
    ax.set_xlabel("turn depth")
    ax.set_ylabel("MRR@10")
    ax.set_title("MRR@10 by turn depth")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_scaling(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Log-log plot of history work per turn (p50, p95) against the number of stored triples,
    with the naive baseline's, and (when the rows have it) peak RSS beside it; ``rows`` are
    the micro-benchmark's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["triples"])
    xs = [r["triples"] for r in rows]
    with_rss = all("naive_peak_rss_mib" in r for r in rows)
    fig, axes = plt.subplots(1, 2 if with_rss else 1, figsize=(12 if with_rss else 7, 4.5),
                             squeeze=False)
    ax = axes[0][0]
    ax.plot(xs, [r["turn_p50_ms"] for r in rows], marker="o", label="dhrag history work, p50")
    ax.plot(xs, [r["turn_p95_ms"] for r in rows], marker="o", linestyle="--",
            label="dhrag history work, p95")
    if all("naive_turn_p50_ms" in r for r in rows):
        ax.plot(xs, [r["naive_turn_p50_ms"] for r in rows], marker="s", linestyle=":",
                color="grey", label="naive (preallocated matrix, argpartition), p50")
    if all("naive_turn_p95_ms" in r for r in rows):
        ax.plot(xs, [r["naive_turn_p95_ms"] for r in rows], marker="s", linestyle="-.",
                color="silver", label="naive, p95")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("stored triples (session at capacity: every turn also evicts)")
    ax.set_ylabel("ms per turn (select + add)")
    ax.set_title("History work per turn vs history size")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if with_rss:
        ax = axes[0][1]
        ax.plot(xs, [r["peak_rss_mib"] for r in rows], marker="o", label="dhrag")
        ax.plot(xs, [r["naive_peak_rss_mib"] for r in rows], marker="s", linestyle=":",
                color="grey", label="naive")
        ax.set_xscale("log")
        ax.set_xlabel("stored triples")
        ax.set_ylabel("peak RSS, MiB (model loaded)")
        ax.set_title("Peak resident memory")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _finite(obj: Any) -> Any:
    """``obj`` with NaN and infinities replaced by ``None`` (strict JSON)."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_report(summary: Mapping[str, Any], out_dir: Path, stem: str = "benchmark") -> dict[
    str, Path
]:
    """Write ``<stem>.md``, ``<stem>.json`` and ``<stem>_depth.png`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / f"{stem}.md", "json": out_dir / f"{stem}.json",
             "plot": out_dir / f"{stem}_depth.png"}
    paths["markdown"].write_text(markdown(summary), encoding="utf-8")
    text = json.dumps(_finite(summary), indent=2, default=str, allow_nan=False)
    paths["json"].write_text(text + "\n", encoding="utf-8")
    plot_depth(summary, paths["plot"])
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    return paths

"""NumPy MiniLM against the torch one: same vectors?, encode speed, process memory.

    python -m benchmarks.perf.numpy_embedder [--texts 300] [--rounds 3] [--json out.json]

Encodes the first ``--texts`` user queries of MTRAG (``tasks.jsonl``) and as many passages
of its corpus (``corpus_pool.jsonl``) with ``MiniLMEmbedder`` (sentence-transformers, torch)
and ``NumpyMiniLMEmbedder``: the cosine of each pair of vectors; ms per text, batched and one
text at a time (as a turn encodes its query), the two embedders timed alternately, median of
``--rounds``; and, each in a fresh process, RSS after importing dhrag_core and after loading
the model and encoding once, and the peak.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("torch", "numpy")


def make_embedder(kind: str) -> Any:
    """``MiniLMEmbedder`` (``torch``) or ``NumpyMiniLMEmbedder`` (``numpy``)."""
    if kind == "numpy":
        from dhrag_core.numpy_minilm import NumpyMiniLMEmbedder

        return NumpyMiniLMEmbedder()
    from dhrag_core import MiniLMEmbedder

    return MiniLMEmbedder()


def texts(data: Path, n: int) -> tuple[list[str], list[str]]:
    """The first ``n`` user queries and ``n`` corpus passages of MTRAG."""
    queries: list[str] = []
    with open(data / "tasks.jsonl", encoding="utf-8") as f:
        for line in f:
            queries.append(json.loads(line)["record"]["user"]["text"])
            if len(queries) == n:
                break
    passages: list[str] = []
    with open(data / "corpus_pool.jsonl", encoding="utf-8") as f:
        for line in f:
            passages.append(json.loads(line)["text"])
            if len(passages) == n:
                break
    return queries, passages


def _status_mib(field: str) -> float:
    """A ``/proc/self/status`` memory field in MiB (``VmHWM``, unlike ``ru_maxrss``, starts
    again at exec, so a child's peak is its own)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def memory(kind: str) -> dict[str, float]:
    """RSS MiB of this process after importing dhrag_core, after loading ``kind`` (one
    encode), and its peak."""
    import dhrag_core  # noqa: F401

    base = _status_mib("VmRSS")
    make_embedder(kind).encode(["load the model"])
    return {"rss_import_mib": base, "rss_model_mib": _status_mib("VmRSS"),
            "peak_rss_mib": _status_mib("VmHWM")}


def _ms_per_text(embedder: Any, items: list[str], one_by_one: bool) -> float:
    start = time.perf_counter()
    if one_by_one:
        for t in items:
            embedder.encode([t])
    else:
        embedder.encode(items)
    return (time.perf_counter() - start) / len(items) * 1e3


def compare(data: Path, n: int, rounds: int) -> dict[str, Any]:
    """Cosines of the two embedders' vectors and their encode speeds."""
    queries, passages = texts(data, n)
    emb = {kind: make_embedder(kind) for kind in KINDS}
    out: dict[str, Any] = {"texts": n}
    for name, items in (("queries", queries), ("passages", passages)):
        a, b = (emb[k].encode(items) for k in KINDS)
        cos = (a * b).sum(axis=1)
        out[f"{name}_cos_min"] = float(cos.min())
        out[f"{name}_cos_mean"] = float(cos.mean())
        for mode, one in (("batch", False), ("one", True)):
            part = items[: max(1, n // 6)] if one else items
            times: dict[str, list[float]] = {k: [] for k in KINDS}
            for _ in range(rounds):
                for k in KINDS:
                    times[k].append(_ms_per_text(emb[k], part, one))
            for k in KINDS:
                out[f"{name}_{mode}_{k}_ms"] = float(np.median(times[k]))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", type=Path, default=None, help="MTRAG folder (default as the "
                    "benchmark: $DHRAG_DATA or ../shared/data/mtrag)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--memory", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory:
        print(json.dumps(memory(args.memory)))
        return
    from benchmarks.harness.paths import default_data

    mem: dict[str, float] = {}
    for kind in KINDS:
        out = subprocess.run([sys.executable, "-m", "benchmarks.perf.numpy_embedder", "--memory",
                              kind], capture_output=True, text=True, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        mem.update({f"{k}_{kind}": v for k, v in got.items()})
    row = compare(args.data or default_data(), args.texts, args.rounds)
    row.update(mem)
    print("| | MiniLMEmbedder (torch) | NumpyMiniLMEmbedder |")
    print("|---|---|---|")
    for name in ("queries", "passages"):
        for mode, label in (("batch", "batched"), ("one", "one at a time")):
            print(f"| {name}, {label}: ms per text | {row[f'{name}_{mode}_torch_ms']:.2f} "
                  f"| {row[f'{name}_{mode}_numpy_ms']:.2f} |")
    for key, label in (("rss_import_mib", "RSS after importing dhrag_core, MiB"),
                       ("rss_model_mib", "RSS after loading + one encode, MiB"),
                       ("peak_rss_mib", "peak RSS, MiB")):
        print(f"| {label} | {row[f'{key}_torch']:.0f} | {row[f'{key}_numpy']:.0f} |")
    print(f"cosine numpy vs torch over {args.texts} queries: min {row['queries_cos_min']:.7f}, "
          f"passages: min {row['passages_cos_min']:.7f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(row, f, indent=2)


if __name__ == "__main__":
    main()

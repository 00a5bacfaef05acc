"""A fresh process's first turn: how long after the model has loaded, with calibration shipped,
kept on disk, or measured in the process (as before it was kept).

    python -m benchmarks.perf.first_turn [--rounds 3] [--json docs/first_turn.json]

Each round of each case is a new process: it imports dhrag, loads the default embedder
(``NumpyMiniLMEmbedder``: one encode), builds the demo knowledge base (its shipped vectors)
and a ``DHRAG`` over it, then times its first two turns (``select`` then ``record``, the
demo's first two questions). Cases:

- ``shipped``: the default model, its calibration read from the package (what a user gets);
- ``measured``: the same, the calibration measured in the process (551 probe texts), as every
  process did before it was shipped;
- ``other, first run`` / ``other, cached``: another embedder (the default model with its
  cosines shifted, ``benchmarks.harness.embedders.ShiftedEmbedder``, under a model name of its own):
  measured and kept on disk by the first process, read back by the next.

Figures are medians over ``--rounds`` processes; the load average is read at the start and
the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES = ("shipped", "measured", "other, first run", "other, cached")
_SHIFT = 0.5


def one_process(case: str) -> dict[str, float]:
    """The timings of one fresh process (run in a child by ``main``)."""
    t0 = time.perf_counter()
    from benchmarks.harness.embedders import ShiftedEmbedder, shift
    from dhrag_core import DHRAG, FaissKnowledgeBase, calibrate
    from dhrag_core.app.demo import DEMO_TURNS, load_demo_kb
    from dhrag_core.embedding import default_embedder

    t1 = time.perf_counter()
    model = default_embedder()
    model.encode(["load the model"])
    t2 = time.perf_counter()
    kb = load_demo_kb(model)
    if case.startswith("other"):
        other = ShiftedEmbedder(model, _SHIFT)
        other.model_name = f"all-MiniLM-L6-v2 shifted {_SHIFT}"  # type: ignore[attr-defined]
        kb = FaissKnowledgeBase(kb.passages, other, vectors=shift(kb.vectors, _SHIFT))
    t3 = time.perf_counter()
    # "measured": the calibration measured in the process, counted in the first turn (before it
    # was shipped, the first turn measured it); otherwise that turn finds it, shipped or kept
    start = t3
    measured = calibrate(model, cached=False) if case == "measured" else None
    rag = DHRAG(kb, calibration=measured)
    turns = []
    for question in DEMO_TURNS[:2]:
        sel = rag.select("s", question)
        rag.record("s", question, sel.passages[0].text[:200], selection=sel)
        now = time.perf_counter()
        turns.append(now - start)
        start = now
    return {"import_s": t1 - t0, "model_load_s": t2 - t1, "kb_s": t3 - t2,
            "first_turn_s": turns[0], "second_turn_s": turns[1]}


def _run(case: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.perf.first_turn", "--one", case],
                         capture_output=True, text=True, env=env, check=True)
    row: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--one", choices=CASES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one_process(args.one)))
        return
    load_start = os.getloadavg()[0]
    rows: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            env = {**os.environ, "DHRAG_CALIBRATION_CACHE": str(Path(tmp) / f"calib{n}")}
            for case in CASES:  # "other, cached" reads what "other, first run" kept
                rows[case].append(_run(case, env))
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds,
        "cpus": os.cpu_count(), "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0], "python": sys.version.split()[0],
        "cases": {case: {key: statistics.median(r[key] for r in got) for key in got[0]}
                  for case, got in rows.items()},
    }
    print("| case | import s | model load s | first turn s | second turn s |")
    print("|---|---|---|---|---|")
    for case, m in result["cases"].items():
        print(f"| {case} | {m['import_s']:.2f} | {m['model_load_s']:.2f} | "
              f"{m['first_turn_s']:.2f} | {m['second_turn_s']:.2f} |")
    print(f"load average {load_start:.2f} at the start, {result['load_average_end']:.2f} at "
          f"the end; {args.rounds} processes per case, medians")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()

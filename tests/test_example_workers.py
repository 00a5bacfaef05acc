"""``examples/several_workers.py``: two processes, real MiniLM, one PostgreSQL history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "several_workers.py"


def test_a_follow_up_on_one_worker_uses_the_turn_another_worker_stored(
    clean_postgres_dsn: str,
) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--dsn", clean_postgres_dsn, "--json"],
        capture_output=True, text=True, timeout=600, check=True,
    )
    records = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["worker"] for r in records[:4]] == ["worker-0", "worker-1"] * 2
    first, follow_up = records[0], records[1]
    assert first["history"] == []
    # worker-1 never saw turn 1 itself: it reached it through PostgreSQL
    assert follow_up["history"][0] == [0, first["question"]]
    assert "wall" in follow_up["rewritten"].lower()
    assert follow_up["top"] == "Great Wall of China"
    # the guinea-pig follow-up, also on worker-1, selects the guinea-pig turn of worker-0
    assert records[3]["history"][0] == [2, records[2]["question"]]

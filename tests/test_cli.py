"""The ``dhrag`` command runs the real stack end to end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dhrag_core.cli import build_parser


def test_parser_rejects_unknown_commands() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fly"])


@pytest.mark.model
def test_demo_runs_offline_and_completes_follow_ups(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "dhrag_core.cli", "demo", "--store", f"sqlite:///{db}"],
        capture_output=True, text=True, check=True, timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    ).stdout
    turns = re.split(r"\n\[\d\] user: ", out)
    assert len(turns) == 9, out
    follow_up = turns[2]  # "How long is it?"
    assert "reconstructed query: How long is " in follow_up
    assert "wall" in follow_up.split("reconstructed query:")[1].split("\n")[0].lower()
    assert "[Great Wall of China]" in follow_up.split("context:")[1]
    assert "Top passage per turn" in out and db.exists()

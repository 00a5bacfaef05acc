"""The 7-turn topic-switch chat (``tests/topic_chat.py``) through ``dhrag chat``: a real
process over ``tests/fixtures/topic_switch_kb`` (one file per topic, ``--min-words 1``: one
passage per paragraph), real MiniLM, ``--k 4``, no LLM (the labelled extractive answers), each
question followed by ``/trace``. The checks read the printed trace: the selected history (what
an LLM would be given: ``LLMAnswerer.messages`` sends ``Selection.history``), the rewritten
query and the first context passage."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from topic_chat import (
    ALL_TURNS,
    CHAT,
    KB_DIR,
    MIN_WORDS,
    K,
    Seen,
    check_seen,
    check_turn,
    passages,
    report,
)

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[1]
_HISTORY_LINE = re.compile(r"^ {4}turn (\d+) (['\"])(.*?)\2(?: -> .*)?  weight=", re.M)
_FIRST_CONTEXT = re.compile(
    r"^ +1\. weight=\S+ similarity=\S+ (?:kb|history)(?: \(turn \d+\))? \[[^\]]*\] (\S+)$", re.M)
_REWRITTEN = re.compile(r"^  rewritten query: (.*)$", re.M)


def traces(out: str) -> list[str]:
    """The ``/trace`` blocks of the output, in order."""
    starts = [m.start() for m in re.finditer(r"^trace of ", out, re.M)]
    return [out[s: out.index("  answered by:", s)] for s in starts]


def seen_in_trace(n: int, trace: str) -> Seen:
    turn = CHAT[n - 1]
    assert trace.startswith(f"trace of {turn.question!r}"), trace
    numbers = []
    for m in _HISTORY_LINE.finditer(trace):  # best first
        number, query = int(m.group(1)), m.group(3)
        assert query == CHAT[number - 1].question, trace  # the trace numbers turns from 1
        numbers.append(number)
    history = [CHAT[number - 1].question for number in sorted(numbers)]  # oldest first
    if not history:
        assert "selected history: (none)" in trace, trace
    rewritten = _REWRITTEN.search(trace)
    top = _FIRST_CONTEXT.search(trace)
    assert rewritten is not None and top is not None, trace
    selected = "\n".join("    " + line.strip() for line in trace.splitlines()
                         if _HISTORY_LINE.match(line))
    return Seen(n, history, top.group(1), rewritten.group(1), selected)


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> list[Seen]:
    tmp = tmp_path_factory.mktemp("topic_chat")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp / "home"),
           "DHRAG_CACHE": str(tmp / "cache"), "XDG_DATA_HOME": str(tmp / "data"),
           "HF_HUB_OFFLINE": "1"}
    stdin = "".join(f"{t.question}\n/trace\n" for t in CHAT)
    cmd = [sys.executable, "-m", "dhrag_core.app.cli", "chat", "--kb", str(KB_DIR),
           "--min-words", str(MIN_WORDS), "--k", str(K), "--embedder", "minilm",
           "--store", "memory"]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300,
                          env=env, cwd=REPO)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr + out
    assert f"dhrag chat: {len(passages())} passages from {KB_DIR}" in out, out
    assert "answers: extracts (no LLM)" in out, out
    assert len([line for line in out.splitlines() if line.startswith("dhrag> ")]) == len(CHAT)
    blocks = traces(out)
    assert len(blocks) == len(CHAT), out
    found = [seen_in_trace(n, b) for n, b in enumerate(blocks, 1)]
    check_seen(found)
    report("dhrag chat --kb tests/fixtures/topic_switch_kb", found)
    return found


@pytest.mark.parametrize("turn", ALL_TURNS)
def test_turn_is_on_topic(seen: list[Seen], turn: int) -> None:
    check_turn(seen, turn)

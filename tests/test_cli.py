"""The ``dhrag`` command runs the real stack end to end."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dhrag_core.app.chat import default_session
from dhrag_core.app.chat_cli import run_chat
from dhrag_core.app.cli import build_parser, main


def test_parser_rejects_unknown_commands() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fly"])


@pytest.mark.model
def test_demo_runs_offline_and_completes_follow_ups(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "dhrag_core.app.cli", "demo", "--store", f"sqlite:///{db}"],
        capture_output=True, text=True, check=True, timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    ).stdout
    turns = re.split(r"\n\[\d\] user: ", out)
    assert len(turns) == 9, out
    follow_up = turns[2]  # "How long is it?"
    assert "reconstructed query: How long is " in follow_up
    assert "wall" in follow_up.split("reconstructed query:")[1].split("\n")[0].lower()
    assert "[Great Wall of China]" in follow_up.split("context:")[1]
    assert "clear on its own" not in follow_up
    for switch in (turns[3], turns[6]):  # guinea pigs, then the Berlin Wall: a new topic
        assert "history selected: (none)" in switch and "reconstructed query" not in switch
    assert "the Berlin Wall" in turns[7].split("reconstructed query:")[1].split("\n")[0]
    assert "Top passage per turn" in out and db.exists()


def test_version_and_verbose_after_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and re.fullmatch(r"dhrag \S+\n", capsys.readouterr().out)
    parser = build_parser()
    for argv in (["chat", "-v", "--kb", "x"], ["-v", "chat", "--kb", "x"],
                 ["demo", "--verbose"], ["sessions", "-v"]):
        assert parser.parse_args(argv).verbose is True, argv
    assert parser.parse_args(["chat", "--kb", "x"]).verbose is False


def test_subcommand_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    for command, words in (("chat", "Chat over a folder"), ("demo", "scripted"),
                           ("sessions", "List the conversations")):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        assert words in " ".join(capsys.readouterr().out.split()), command


def _chat(kb: Path, store: str, questions: str) -> None:
    args = build_parser().parse_args(["chat", "--kb", str(kb), "--embedder", "hashing",
                                      "--store", store])
    assert run_chat(args, io.StringIO(questions), io.StringIO()) == 0


def test_sessions_lists_and_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    db = tmp_path / "data" / "dhrag" / "chat.db"
    assert main(["sessions"]) == 0
    assert f"no sessions: SQLite file {db} does not exist yet" in capsys.readouterr().out
    assert not db.exists()  # listing creates nothing
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("The Great Wall is about 21,196 km long.")
    b.write_text("Guinea pigs sleep in burrows.")
    _chat(a, f"sqlite:///{db}", "How long is the wall?\nWhat is it made of?\n")
    _chat(b, f"sqlite:///{db}", "Where do they sleep?\n")
    capsys.readouterr()
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert f"2 sessions in SQLite file {db}" in out
    assert re.search(rf"  {default_session(a)}: 2 turns, last \d{{4}}-\d\d-\d\d \d\d:\d\d, "
                     rf"knowledge base {re.escape(str(a.resolve()))}\n", out), out
    assert f"  {default_session(b)}: 1 turn, " in out
    # a wrong name deletes nothing
    assert main(["sessions", "--delete", default_session(a), "nope"]) == 2
    err = capsys.readouterr().err
    assert "dhrag sessions: error: no session 'nope'" in err and "lists them" in err
    assert main(["sessions"]) == 0 and "2 sessions" in capsys.readouterr().out
    assert main(["sessions", "--delete", default_session(a)]) == 0
    assert f"deleted session '{default_session(a)}'" in capsys.readouterr().out
    assert main(["sessions", "--store", f"sqlite:///{db}"]) == 0
    out = capsys.readouterr().out
    assert "1 session in" in out and default_session(a) not in out and default_session(b) in out
    assert main(["sessions", "--store", "redis://x"]) == 2
    assert "unknown store url" in capsys.readouterr().err


@pytest.mark.model
def test_ctrl_c_during_start_up_exits_quietly(tmp_path: Path) -> None:
    """SIGINT while the command imports, the model loads or the chat waits: one line, status
    130, no traceback."""
    kb = tmp_path / "kb.txt"
    kb.write_text("The Great Wall is about 21,196 km long.")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
           "DHRAG_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data")}
    # from the imports (after the interpreter's own start, which no code can guard) to the
    # chat prompt; the demo runs a few seconds only
    for command, delay in ((["chat", "--kb", str(kb)], 0.3), (["chat", "--kb", str(kb)], 0.6),
                           (["chat", "--kb", str(kb)], 2.5), (["demo"], 0.3), (["demo"], 0.8)):
        proc = subprocess.Popen(
            [sys.executable, "-m", "dhrag_core.app", *command], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        # -2: killed by SIGINT after the message (what a shell also reports as 130)
        assert proc.returncode in (130, -signal.SIGINT), (command, delay, err)
        # at the chat's prompt, Ctrl-C leaves the chat as /quit does
        assert "Traceback" not in err and (err.rstrip().endswith("interrupted")
                                           or out.rstrip().endswith("bye")), (err, out)


def test_exit_on_interrupt_leaves_at_once_and_restores_the_handler_after() -> None:
    script = (
        "import os, signal, time\n"
        "from dhrag_core.app.interrupt import exit_on_interrupt\n"
        "with exit_on_interrupt('x'):\n"
        "    pass\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    print('restored')\n"
        "with exit_on_interrupt('dhrag x'):\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
        "print('not reached')\n"
    )
    # SIGINT at its default in the child, even under a runner that ignores it (a background job)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == "restored\n"
    assert proc.stderr == "dhrag x: interrupted\n"

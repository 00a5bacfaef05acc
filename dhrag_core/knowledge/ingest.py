"""Knowledge bases from files: a folder of ``.txt``/``.md`` documents or a JSONL of passages.

Documents are split on paragraph boundaries into passages of about 120-200 words. Passage
embeddings are cached outside the repository, in ``$DHRAG_CACHE/kb`` (default
``~/.cache/dhrag/kb``), one file per source document keyed by the SHA-1 of the embedder's
identity and the document's passage texts: a second start skips the encoding, and after an
edit only new or changed files are embedded (the vectors of their old text are deleted).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dhrag_core.embedding import Embedder, default_embedder
from dhrag_core.knowledge.base import MAX_PASSAGE_CHARS, FaissKnowledgeBase
from dhrag_core.knowledge.embed_cache import default_cache_dir, embed_by_file
from dhrag_core.records import Passage
from dhrag_core.validation import CLEANED_KEY, clean_passage, clean_text, one_line

__all__ = ["DOCUMENT_SUFFIXES", "load_kb", "load_passages", "split_passages"]

log = logging.getLogger(__name__)

DOCUMENT_SUFFIXES = (".txt", ".md")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _pieces(paragraph: str, max_words: int) -> Iterator[str]:
    """A paragraph cut at sentence ends (at word counts if need be) into <= max_words."""
    words = paragraph.split()
    if len(words) <= max_words:
        yield paragraph
        return
    cur: list[str] = []
    for sentence in _SENTENCE.split(paragraph):
        sw = sentence.split()
        while len(sw) > max_words:  # one huge "sentence": cut at words
            if cur:
                yield " ".join(cur)
                cur = []
            yield " ".join(sw[:max_words])
            sw = sw[max_words:]
        if cur and len(cur) + len(sw) > max_words:
            yield " ".join(cur)
            cur = []
        cur.extend(sw)
    if cur:
        yield " ".join(cur)


def split_passages(text: str, min_words: int = 120, max_words: int = 200) -> list[str]:
    """Passages of ``min_words``-``max_words`` words made of whole paragraphs.

    Paragraphs (blank-line separated) are joined until a passage has ``min_words``; none
    exceeds ``max_words`` (longer paragraphs are cut at sentence ends). A short tail is merged
    into the previous passage when the two fit in ``max_words``.
    """
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    paragraphs = [" ".join(p.split()) for p in _PARAGRAPH.split(text.replace("\r\n", "\n"))]
    chunks: list[list[str]] = []
    cur: list[str] = []
    n = 0
    for para in filter(None, paragraphs):
        for piece in _pieces(para, max_words):
            w = len(piece.split())
            if cur and (n >= min_words or n + w > max_words):
                chunks.append(cur)
                cur, n = [], 0
            cur.append(piece)
            n += w
    if cur:
        tail_fits = chunks and n < min_words and (
            sum(len(p.split()) for p in chunks[-1]) + n <= max_words
        )
        if tail_fits:
            chunks[-1].extend(cur)
        else:
            chunks.append(cur)
    return ["\n\n".join(c) for c in chunks]


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _documents(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*")
        if p.suffix.lower() in DOCUMENT_SUFFIXES and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


_MD_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", re.M)


def _heading_sentence(m: re.Match[str]) -> str:
    text = m.group(1).strip()
    return text if not text or text[-1] in ".!?:" else text + "."


def _document_passages(path: Path, relative: str, min_words: int, max_words: int) -> list[Passage]:
    heading = re.sub(r"[_-]+", " ", path.stem).strip() or path.name
    text = _read_text(path)
    if path.suffix.lower() == ".md":  # "# Title" -> "Title." so it reads as its own sentence
        text = _MD_HEADING.sub(_heading_sentence, text)
    return [
        _cleaned(Passage(text=f"{heading}\n{body}", id=f"{relative}#{n}", title=path.name,
                         metadata={"source": relative}), f"{path} passage {n}")
        for n, body in enumerate(split_passages(text, min_words, max_words))
    ]


def _cleaned(p: Passage, where: str) -> Passage:
    """``p`` as the history will store it (NULs, lone surrogates, cut to the limit)."""
    out = clean_passage(p, MAX_PASSAGE_CHARS)
    if out is not p:
        log.warning("%s: %s", one_line(where), one_line(out.metadata[CLEANED_KEY]))
    return out


def _jsonl_passages(path: Path) -> list[Passage]:
    out: list[Passage] = []
    seen: dict[str, int] = {}
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)"
                ) from None
            if not line.strip():
                continue
            try:
                row: Any = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise ValueError(f"{where}: JSON nested too deeply to read") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected an object with 'id' and 'text'")
            pid, text, title = row.get("id"), row.get("text"), row.get("title", "")
            if isinstance(pid, int) and not isinstance(pid, bool):
                pid = str(pid)
            if not isinstance(pid, str) or not pid:
                raise ValueError(f"{where}: 'id' must be a non-empty string")
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where}: 'text' must be a non-empty string")
            if not isinstance(title, str):
                raise ValueError(f"{where}: 'title' must be a string")
            if "\x00" in pid or clean_text(pid)[1]:
                raise ValueError(f"{where}: 'id' holds a NUL or a lone surrogate; ids are kept "
                                 "exactly, so fix it in the file")
            if pid in seen:
                raise ValueError(f"{where}: duplicate id {pid!r} (first on line {seen[pid]})")
            seen[pid] = lineno
            meta = {k: v for k, v in row.items() if k not in ("id", "text", "title")}
            out.append(_cleaned(Passage(text=text, id=pid, title=title, metadata=meta), where))
    return out


def load_passages(path: str | Path, min_words: int = 120, max_words: int = 200) -> list[Passage]:
    """Passages from a folder of ``.txt``/``.md`` files (recursively), one such file, or a
    ``.jsonl`` of ``{"id", "text", "title"?}`` objects.

    Document passages get ``id = "relative/path#n"`` (n from 0), ``title`` = the file name, and
    text = a heading line made from the file name, then the passage. Every passage is cleaned
    as the history stores it (NULs removed, lone surrogates replaced, cut to
    ``MAX_PASSAGE_CHARS``; said in ``metadata["dhrag_cleaned"]`` and logged).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: No passages, an unsupported file type, a non-UTF-8 file, or a bad JSONL
            line (an id with a NUL or a lone surrogate too; the message names the line).
    """
    root = Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"knowledge base path {root} does not exist")
    if root.is_dir():
        files = _documents(root)
        if not files:
            raise ValueError(f"knowledge base folder {root} has no .txt or .md files")
        passages = [p for f in files
                    for p in _document_passages(f, f.relative_to(root).as_posix(),
                                                min_words, max_words)]
    elif root.suffix.lower() == ".jsonl":
        passages = _jsonl_passages(root)
    elif root.suffix.lower() in DOCUMENT_SUFFIXES:
        passages = _document_passages(root, root.name, min_words, max_words)
    else:
        raise ValueError(f"knowledge base {root} must be a folder, a .jsonl, .txt or .md file")
    if not passages:
        raise ValueError(f"knowledge base {root} holds no text")
    return passages


def load_kb(
    path: str | Path,
    embedder: Embedder | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    min_words: int = 120,
    max_words: int = 200,
) -> FaissKnowledgeBase:
    """A ``FaissKnowledgeBase`` over ``load_passages(path)``, with cached embeddings.

    Args:
        path: Folder of ``.txt``/``.md`` files, one such file, or a ``.jsonl`` of passages.
        embedder: Default: offline MiniLM.
        cache_dir: Embedding cache folder (default ``$DHRAG_CACHE/kb`` or ``~/.cache/dhrag/kb``).
        progress: Progress bar while embedding (default: when stderr is a terminal, else one
            line on stderr saying how many passages are embedded). Vectors are cached per file
            of a folder (a .jsonl is one file): only new or changed files are embedded, and the
            cache files of their old text are deleted.
        min_words: Passage size target, lower end.
        max_words: Passage size limit.

    Example:
        >>> kb = load_kb("docs/", HashingEmbedder())  # doctest: +SKIP
        >>> kb.search("how do I install it?", 3)[0].id  # doctest: +SKIP
        'install.md#0'
    """
    passages = load_passages(path, min_words, max_words)
    emb: Embedder = embedder if embedder is not None else default_embedder()
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    vectors = embed_by_file(passages, emb, folder, progress, Path(path).expanduser().resolve())
    return FaissKnowledgeBase(passages, emb, vectors=vectors)

"""Turn <-> plain values (JSON text and float32 bytes) for the durable stores."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from dhrag_core.records import Passage, Turn, Vector
from dhrag_core.store.base import CorruptStoreError

__all__ = ["decode_turn", "encode_turn", "vector_from_bytes", "vector_to_bytes"]


def vector_to_bytes(v: npt.NDArray[np.floating[Any]] | None) -> bytes | None:
    return None if v is None else np.ascontiguousarray(v, dtype="<f4").tobytes()


def vector_from_bytes(b: bytes | None, dim: int, rows: int | None = None) -> Vector | None:
    if b is None:
        return None
    if len(b) % 4:
        raise ValueError(f"stored vector has {len(b)} bytes, not a whole number of float32s")
    a = np.frombuffer(b, dtype="<f4").astype(np.float32)
    if not np.isfinite(a).all():
        raise ValueError("stored vector holds NaN or infinity")
    if rows is None:
        if a.size != dim:
            raise ValueError(f"stored vector has {a.size} values, expected {dim}")
        return a
    if a.size != rows * dim:
        raise ValueError(f"stored matrix has {a.size} values, expected {rows}x{dim}")
    return a.reshape(rows, dim)


def _passage_to_json(p: Passage) -> dict[str, Any]:
    return {"text": p.text, "id": p.id, "title": p.title, "score": p.score,
            "metadata": dict(p.metadata)}


def encode_turn(t: Turn) -> dict[str, Any]:
    """Column values of one stored turn; vectors as little-endian float32 bytes."""
    return {
        "session_id": t.session_id,
        "turn_id": t.turn_id,
        "idx": t.index,
        "query": t.query,
        "response": t.response,
        "ts": t.timestamp,
        "hits": t.merges + 1,  # the column counts the times recorded (before: Turn.hits)
        "cluster_id": t.cluster_id,
        "chain_id": t.chain_id,
        "metadata": json.dumps(dict(t.metadata), ensure_ascii=False),
        "passages": json.dumps([_passage_to_json(p) for p in t.passages], ensure_ascii=False),
        "dim": int(t.query_vector.shape[0]),
        "qv": vector_to_bytes(t.query_vector),
        "rv": vector_to_bytes(t.response_vector),
        "pv": vector_to_bytes(t.passage_vectors),
    }


def decode_turn(row: dict[str, Any]) -> Turn:
    """The turn of one stored row.

    Raises:
        CorruptStoreError: The row is damaged (a vector of the wrong length or not finite,
            unreadable JSON); the message names the session and the turn.
    """
    try:
        return _decode_turn(row)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptStoreError(
            f"stored turn {row.get('turn_id')!r} of session {row.get('session_id')!r} is "
            f"damaged: {exc}"
        ) from exc


def _decode_turn(row: dict[str, Any]) -> Turn:
    dim = int(row["dim"])
    passages = tuple(
        Passage(text=p["text"], id=p["id"], title=p["title"], score=p["score"],
                metadata=p["metadata"])
        for p in json.loads(row["passages"])
    )
    qv = vector_from_bytes(row["qv"], dim)
    pv = vector_from_bytes(row["pv"], dim, rows=len(passages))
    assert qv is not None and pv is not None
    return Turn(
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        index=int(row["idx"]),
        query=row["query"],
        passages=passages,
        response=row["response"],
        timestamp=float(row["ts"]),
        query_vector=qv,
        response_vector=vector_from_bytes(row["rv"], dim),
        passage_vectors=pv,
        metadata=json.loads(row["metadata"]),
        merges=int(row["hits"]) - 1,
        cluster_id=int(row["cluster_id"]),
        chain_id=int(row["chain_id"]),
    )

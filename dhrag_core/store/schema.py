"""The tables of the durable stores, defined once and written as SQLite or PostgreSQL DDL.

Columns carry a portable type (``TEXT``, ``INT``, ``FLOAT``, ``BYTES``) that each dialect
spells its own way, so the SQLite and PostgreSQL stores cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SCHEMA_VERSION", "TABLES", "TURN_COLUMNS", "Dialect", "Table", "ddl"]

SCHEMA_VERSION = 3
"""Version 1 lacked ``dhrag_log``, version 2 ``dhrag_questions``; a store of an older version
gains the missing tables when opened for writing. An unused ``dhrag_state`` table of earlier
versions is no longer created; where it exists it is left as it is (nothing reads or writes
it)."""

Dialect = Literal["sqlite", "postgresql"]

TEXT, INT, FLOAT, BYTES = "text", "int", "float", "bytes"

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {TEXT: "TEXT", INT: "INTEGER", FLOAT: "REAL", BYTES: "BLOB"},
    "postgresql": {TEXT: "TEXT", INT: "BIGINT", FLOAT: "DOUBLE PRECISION", BYTES: "BYTEA"},
}


@dataclass(frozen=True)
class Table:
    """One table: ``(name, portable type)`` columns, the primary key, named indexes; every
    column is NOT NULL except those in ``nullable``."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...] = ()
    indexes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    nullable: frozenset[str] = frozenset()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)


TURNS = Table(
    "dhrag_turns",
    (
        ("session_id", TEXT), ("turn_id", TEXT), ("idx", INT), ("query", TEXT),
        ("response", TEXT), ("ts", FLOAT),
        ("hits", INT),  # times recorded: 1, plus one per near-duplicate merged into it
        ("cluster_id", INT), ("chain_id", INT), ("metadata", TEXT), ("passages", TEXT),
        ("dim", INT), ("qv", BYTES), ("rv", BYTES), ("pv", BYTES),
    ),
    key=("session_id", "turn_id"),
    indexes=(("dhrag_turns_by_idx", ("session_id", "idx")),),
    nullable=frozenset({"rv"}),
)

TABLES = (
    Table("dhrag_meta", (("key", TEXT), ("value", TEXT)), key=("key",)),
    Table("dhrag_sessions", (("session_id", TEXT), ("version", INT)), key=("session_id",)),
    TURNS,
    Table(
        "dhrag_log",
        (("session_id", TEXT), ("ver", INT), ("turn_id", TEXT), ("op", INT)),
        indexes=(("dhrag_log_by_ver", ("session_id", "ver")),),
    ),
    Table("dhrag_questions", (("session_id", TEXT), ("question", TEXT)), key=("session_id",)),
)
"""Every table a store creates: ``dhrag_meta`` (schema version, version floor),
``dhrag_sessions`` (one version per session), ``dhrag_turns``, ``dhrag_log`` (change log),
``dhrag_questions`` (each session's unanswered question, ``base.QuestionStore``)."""

TURN_COLUMNS = TURNS.column_names
"""The columns of a stored turn, in table order (the keys of ``codec.encode_turn``)."""


def ddl(dialect: Dialect) -> str:
    """``CREATE ... IF NOT EXISTS`` statements for every table and index, in ``dialect``."""
    types = _TYPES[dialect]
    out = []
    for t in TABLES:
        cols = [f"    {name} {types[kind]}{'' if name in t.nullable else ' NOT NULL'}"
                for name, kind in t.columns]
        if t.key:
            cols.append(f"    PRIMARY KEY ({', '.join(t.key)})")
        out.append(f"CREATE TABLE IF NOT EXISTS {t.name} (\n" + ",\n".join(cols) + "\n);")
        out += [f"CREATE INDEX IF NOT EXISTS {name} ON {t.name} ({', '.join(cols_)});"
                for name, cols_ in t.indexes]
    return "\n".join(out) + "\n"

"""The storage protocol every history backend implements, and its errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from dhrag_core.records import Turn

__all__ = ["CorruptStoreError", "HistoryStore", "StaleSessionError"]


class StaleSessionError(RuntimeError):
    """Another writer changed the session since it was read; reload and retry."""


class CorruptStoreError(ValueError):
    """The store's file, or a turn stored in it, is damaged; the message names which.

    Nothing is repaired or overwritten: move the file aside (or restore a backup) and start
    again, or delete the named session.
    """


@runtime_checkable
class HistoryStore(Protocol):
    """Durable per-session storage of turns and of derived state.

    Every call names one session, and nothing of one session is visible through another.
    Each session has a version that every successful ``apply`` increments, so a process that
    caches derived state (indexes, clusters) can tell when another writer changed the session.
    """

    def load(self, session_id: str) -> tuple[list[Turn], int]:
        """The session's turns ordered by ``index``, and its version (0 if never written)."""
        ...

    def version(self, session_id: str) -> int:
        """The session's current version (0 if never written)."""
        ...

    def apply(
        self,
        session_id: str,
        *,
        upsert: Sequence[Turn] = (),
        delete: Sequence[str] = (),
        state: Mapping[str, bytes] | None = None,
        expected_version: int | None = None,
    ) -> int:
        """Atomically insert/replace turns, delete turn ids and set state blobs.

        Raises:
            StaleSessionError: ``expected_version`` is given and differs from the stored one;
                nothing is written then.

        Returns:
            The new version.
        """
        ...

    def get_state(self, session_id: str, key: str) -> bytes | None:
        """A derived-state blob saved with ``apply(state=...)``, or None."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Remove the session's turns and state; other sessions are untouched."""
        ...

    def sessions(self) -> list[str]:
        """Ids of the sessions that hold at least one turn or state blob."""
        ...

    def close(self) -> None: ...

"""Sessions held in memory, kept in step with a store that other workers may write too.

Each use compares a session's version with the store's; on a difference it applies only what
changed (stores with a change log) or reloads the session.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from dhrag_core.embedding import Embedder
from dhrag_core.history.session import SessionState
from dhrag_core.records import Turn
from dhrag_core.settings import Settings
from dhrag_core.store import HistoryStore

__all__ = ["SessionCache"]

log = logging.getLogger(__name__)


class SessionCache:
    """At most ``Settings.limits.max_sessions_in_memory`` sessions' state, least recently used
    first.

    A session with no stored turn is not kept, so reading unknown session ids allocates
    nothing lasting.
    """

    def __init__(self, store: HistoryStore, embedder: Embedder, settings: Settings) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> SessionState:
        """The session's state, brought up to date with the store."""
        with self._lock:
            s = self.sessions.get(session_id)
            if s is not None:
                self.sessions.move_to_end(session_id)
        if s is None:
            s = SessionState(self.embedder.dimension, self.settings)
        with s.lock:
            if s.version != self.store.version(session_id) and not self.catch_up(session_id, s):
                self.reload(session_id, s)
            if s.turns:
                self.keep(session_id, s)
        return s

    def keep(self, session_id: str, s: SessionState) -> None:
        """Cache ``s`` (unless the session is cached already) within the bound."""
        with self._lock:
            if session_id in self.sessions:
                return
            self.sessions[session_id] = s
            while len(self.sessions) > self.settings.limits.max_sessions_in_memory:
                self.sessions.popitem(last=False)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self.sessions.pop(session_id, None)

    def catch_up(self, session_id: str, s: SessionState) -> bool:
        """Apply only what another process changed since ``s.version`` (stores with a change
        log); False when the whole session must be reloaded instead."""
        changes = getattr(self.store, "changes", None)
        if s.version < 0 or not callable(changes):
            return False
        got = changes(session_id, s.version)
        if got is None:
            return False
        turns, deleted, version = got
        self._check_dimensions(session_id, turns)
        s.apply_changes(turns, deleted, version)
        log.debug("caught up session %r: %d written, %d deleted, version %d", session_id,
                  len(turns), len(deleted), version)
        return True

    def reload(self, session_id: str, s: SessionState) -> None:
        """Rebuild ``s`` from the session's stored turns."""
        turns, version = self.store.load(session_id)
        self._check_dimensions(session_id, turns)
        s.reset_from(turns, version)
        log.debug("loaded session %r: %d turns, version %d", session_id, len(turns), version)

    def _check_dimensions(self, session_id: str, turns: Sequence[Turn]) -> None:
        dimension = self.embedder.dimension
        for t in turns:
            if t.query_vector.shape[0] != dimension:
                raise ValueError(
                    f"session {session_id!r} was stored with {t.query_vector.shape[0]}-d "
                    f"vectors but the embedder gives {dimension}-d; use the "
                    "embedder the session was written with"
                )

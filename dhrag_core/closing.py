"""``with`` blocks for the objects that hold a store's connections."""

from __future__ import annotations

from typing import Self

__all__ = ["Closeable", "ClosedError"]


class ClosedError(RuntimeError):
    """An engine, history database or store used after its ``close()``."""


class Closeable:
    """Leaving a ``with`` block calls ``close()``, which the subclass defines."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

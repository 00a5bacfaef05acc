"""Tests that need torch skip, saying so, where the ``dhrag[sentence-transformers]`` extra is
not installed (the default install has no torch).

A test, or its fixture, that meets ``MiniLMEmbedder``'s ``ImportError`` naming the extra is
reported as skipped with that reason (``-ra`` lists it) rather than failed; any other error
fails as usual. Tests written since can say it themselves with ``pytest.importorskip(
"sentence_transformers", reason=...)``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

_EXTRA = "dhrag[sentence-transformers]"
REASON = f"needs torch: pip install '{_EXTRA}' (the torch-free default install lacks it)"


def _needs_torch(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is the missing extra's ``ImportError``."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ImportError) and _EXTRA in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and _needs_torch(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {REASON}")

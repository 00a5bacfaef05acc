"""Every test of this folder carries the ``reliability`` marker: ``-m "not reliability"`` leaves
out the long runs (crashes, soaks, contention) when iterating; CI runs them all."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.reliability)

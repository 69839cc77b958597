"""The long fault run (marked `faults`) runs only when asked for: `pytest -m faults`.

A default `pytest` skips it (reported as skipped, nothing deselected); the short form,
unmarked, runs every time and writes nothing.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "faults" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the long fault run: pytest -m faults")
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(skip)

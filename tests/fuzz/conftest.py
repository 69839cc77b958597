"""The long fuzz run (marked `fuzz`) runs only when asked for: `pytest -m fuzz`.

A default `pytest` skips it (it is reported as skipped, nothing is deselected); the short
run, unmarked, runs every time.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "fuzz" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the long fuzz run: pytest -m fuzz")
    for item in items:
        if item.get_closest_marker("fuzz") is not None:
            item.add_marker(skip)

"""The long fault run (marked `faults`) and the soak (marked `soak`) run only when asked for:
`pytest -m faults`, `pytest -m soak`.

A default `pytest` skips them (reported as skipped, nothing deselected); the short forms,
unmarked, run every time.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = config.getoption("markexpr") or ""
    for marker, reason in (
        ("faults", "the long fault run: pytest -m faults"),
        ("soak", "the 30-minute soak: pytest -m soak"),
    ):
        if marker in selected:
            continue
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))

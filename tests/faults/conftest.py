"""The long fault run (marked `faults`) and the soak (marked `soak`) run only when asked for:
`pytest -m faults`, `pytest -m soak`.

A default `pytest` skips them (reported as skipped, nothing deselected); the short forms,
unmarked, run every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.nemesis import ProxiedCluster


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


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[ProxiedCluster]:
    """Three nats-servers whose routes each run through a proxy the test can cut."""
    cluster = ProxiedCluster(tmp_path / "cluster")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()

"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.integration_stack import Stack, start_stack


@pytest.fixture(scope="session")
def ledger_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One `reminders up` shared by the runtime adapters' tests (each uses its own sessions)."""
    data_dir: Path = tmp_path_factory.mktemp("integrations-up")
    yield from start_stack(data_dir)

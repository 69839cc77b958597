"""A pytest plugin only the mutmut run loads (`-p tests.unit.mutmut_order` in pyproject).

mutmut hands pytest the tests that cover a mutated function as an unordered set and stops at
the first failure (`-x`). Running the quick example tests before the hypothesis properties
lets most mutants die in milliseconds instead of after seconds of generated scripts.
"""

from __future__ import annotations

import pytest


def _is_property(item: pytest.Item) -> bool:
    return bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Example tests first, properties last; otherwise in collection order."""
    items.sort(key=_is_property)

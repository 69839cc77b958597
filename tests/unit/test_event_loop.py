"""The services' event loop (`REMINDERS_EVENT_LOOP`): uvloop where it is installed, asyncio's
own when asked for or when uvloop is missing, and a refusal when uvloop is insisted on and
missing."""

from __future__ import annotations

import asyncio
import sys

import pytest
from pydantic import ValidationError

from services.adapters.settings import EventLoopChoice, Settings
from services.runtime import event_loop_factory


def test_the_setting_defaults_to_auto_and_takes_only_the_three_choices() -> None:
    assert Settings.from_env({}).event_loop == "auto"
    assert Settings.from_env({"REMINDERS_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"
    assert Settings.from_env({"REMINDERS_EVENT_LOOP": "uvloop"}).event_loop == "uvloop"
    with pytest.raises(ValidationError):
        Settings.from_env({"REMINDERS_EVENT_LOOP": "trio"})


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not a dependency on Windows")
@pytest.mark.parametrize("choice", ["auto", "uvloop"])
def test_a_service_runs_on_uvloop_where_it_is_installed(choice: EventLoopChoice) -> None:
    factory = event_loop_factory(choice)
    assert factory is not None

    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(loop_module()).startswith("uvloop")


def test_asyncio_s_own_loop_when_asked_for_or_when_uvloop_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert event_loop_factory("asyncio") is None
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` fail
    assert event_loop_factory("auto") is None
    with pytest.raises(ImportError):
        event_loop_factory("uvloop")

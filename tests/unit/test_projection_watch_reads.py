"""How the headers-only projection watch reads a waited key's value after an update
(`ProjectionWatch._fetch`), with the direct get replaced: a value older than the update (a
replica behind) is read again; a newer update during a read is read at once; nobody waiting,
nothing read."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from services.adapters import projection
from services.adapters.projection import ProjectionWatch


def update(token: str, seq: int) -> Any:
    """A headers-only watch message of `token` at bucket stream sequence `seq`."""
    return SimpleNamespace(
        subject=f"$KV.b.{token}",
        metadata=SimpleNamespace(sequence=SimpleNamespace(stream=seq)),
    )


def value(session_seq: int) -> bytes:
    return orjson.dumps({"session_id": "s", "session_seq": session_seq, "stream_seq": 1})


def answering(monkeypatch: pytest.MonkeyPatch, answers: list[tuple[bytes, int]]) -> list[str]:
    """Direct gets answered from `answers` in turn; returns the keys asked for."""
    asked: list[str] = []

    async def read_last_entry(_nc: Any, _bucket: str, token: str) -> tuple[bytes, int]:
        asked.append(token)
        return answers.pop(0)

    monkeypatch.setattr(projection, "read_last_entry", read_last_entry)
    monkeypatch.setattr(projection, "FETCH_RETRY_S", 0.001)
    return asked


async def settle(watch: ProjectionWatch) -> None:
    while watch._fetches:
        await asyncio.gather(*watch._fetches)


def at_least(seq: int) -> Any:
    return lambda record: record.session_seq >= seq


async def test_a_value_from_a_replica_behind_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = answering(monkeypatch, [(value(2), 10), (value(3), 11)])
    watch = ProjectionWatch(None, "b", 10, 5)  # type: ignore[arg-type]
    waiter = watch.register("k", at_least(3))
    await watch._on_update(update("k", 11))
    await settle(watch)
    assert asked == ["k", "k"]
    assert waiter.done.done() and waiter.done.result().session_seq == 3


async def test_an_update_during_a_read_is_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = ProjectionWatch(None, "b", 10, 5)  # type: ignore[arg-type]
    waiter = watch.register("k", at_least(5))
    asked: list[int] = []

    async def read_last_entry(_nc: Any, _bucket: str, _token: str) -> tuple[bytes, int]:
        asked.append(len(asked))
        if len(asked) == 1:  # while the first read is out, the next update arrives
            await watch._on_update(update("k", 21))
            return value(4), 20
        return value(5), 21

    monkeypatch.setattr(projection, "read_last_entry", read_last_entry)
    await watch._on_update(update("k", 20))
    await settle(watch)
    assert len(asked) == 2 and waiter.done.result().session_seq == 5
    assert watch._latest == {}


async def test_updates_of_keys_nobody_waits_on_are_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = answering(monkeypatch, [])
    watch = ProjectionWatch(None, "b", 10, 5)  # type: ignore[arg-type]
    watch.register("k", at_least(1))
    await watch._on_update(update("other", 3))
    await settle(watch)
    assert asked == []


async def test_a_replica_that_stays_behind_is_asked_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = answering(monkeypatch, [(value(1), 5)] * 10)
    watch = ProjectionWatch(None, "b", 10, 5)  # type: ignore[arg-type]
    waiter = watch.register("k", at_least(2))
    await watch._on_update(update("k", 9))
    await settle(watch)
    assert len(asked) == projection.FETCH_ATTEMPTS
    assert not waiter.done.done()  # the wait reads again itself at its deadline

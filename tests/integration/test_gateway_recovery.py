"""The gateway's recovery paths, deterministically, against a real server: a commit whose
ack was lost while another writer appended, and a forget racing another replica."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from contracts.decode import decode
from services.adapters.append import SessionAppend
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.gateway.committer import CommitUncertain, GroupCommitter
from services.gateway.service import CommandService


class LostAckCommitter(GroupCommitter):
    """Stores the batch, lets another writer append, then reports the outcome as unknown."""

    def __init__(self, nc: Client, other: CommandService | None = None) -> None:
        super().__init__(nc)
        self.other = other
        self.lost = 0

    async def commit(self, append: SessionAppend, timeout_s: float | None = None) -> list[int]:
        seqs = await super().commit(append, timeout_s)
        if self.lost == 0 and self.other is not None:
            self.lost += 1
            body = {"session_id": append.session_id, "reminder": {"body": "someone else"}}
            assert (await self.other.handle("inject", orjson.dumps(body)))["ok"]
            raise CommitUncertain("PubAck lost")
        return seqs


def service(nc: Client, settings: Settings, committer: GroupCommitter) -> CommandService:
    committer.start()
    return CommandService(nc, settings, committer)


async def test_a_commit_whose_ack_was_lost_is_answered_from_the_log_and_not_applied_twice(
    nc: Client, provisioned: Settings
) -> None:
    other = service(nc, provisioned, GroupCommitter(nc))
    flaky = LostAckCommitter(nc, other)
    gateway = service(nc, provisioned, flaky)
    await gateway.handle("inject", orjson.dumps({"session_id": "lost", "reminder": {"body": "a"}}))
    reply = await gateway.handle(
        "render", orjson.dumps({"session_id": "lost", "turn": 0, "user_text": "hi"})
    )
    assert flaky.lost == 1
    assert reply["ok"] is True
    assert reply["envelope"]["directive_ids"]
    assert reply["inline"]["text"].startswith("hi\n\n")
    events = [decode(i.envelope) for i in await read_session(nc, provisioned.stream, "lost")]
    assert [e.kind for e in events].count("delivered") == 1
    for committer in (flaky, other._committer):
        await committer.stop()


async def test_forget_purges_what_another_replica_appended_while_it_waited(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = service(nc, provisioned, GroupCommitter(nc))
    other = service(nc, provisioned, GroupCommitter(nc))
    await gateway.handle("inject", orjson.dumps({"session_id": "race", "reminder": {"body": "a"}}))
    forgetter = gateway._forgetter
    original = forgetter._consumers_settled
    calls: list[int] = []

    async def settle_while_another_replica_writes(last_seq: int, timeout_s: float = 10.0) -> Any:
        calls.append(last_seq)
        if len(calls) == 1:
            body = {"session_id": "race", "reminder": {"body": "late"}}
            assert (await other.handle("inject", orjson.dumps(body)))["ok"]
        return await original(last_seq, timeout_s)

    monkeypatch.setattr(forgetter, "_consumers_settled", settle_while_another_replica_writes)
    reply = await gateway.handle("forget", orjson.dumps({"session_id": "race"}))
    assert reply["ok"] is True and reply["purged_count"] == 2
    assert await read_session(nc, provisioned.stream, "race") == []
    assert len(calls) >= 2

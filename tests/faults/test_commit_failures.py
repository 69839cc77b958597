"""How the gateway answers each kind of commit failure, deterministically: only a wrong
expected sequence is a conflict; a stream that is away is retried, then `unavailable`."""

from __future__ import annotations

import orjson
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from contracts.decode import decode
from services.adapters.append import SessionAppend
from services.adapters.append_errors import AppendFailure, append_failure
from services.adapters.jetstream import JetStreamApiError
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.gateway.committer import CommitUnavailable, CommitUncertain, GroupCommitter
from services.gateway.service import CommandService


def test_only_a_wrong_last_sequence_is_a_conflict() -> None:
    def api(code: int, err_code: int) -> JetStreamApiError:
        return JetStreamApiError({"code": code, "err_code": err_code, "description": "x"})

    assert append_failure(api(400, 10071)) is AppendFailure.CONFLICT
    assert append_failure(api(503, 10008)) is AppendFailure.UNAVAILABLE
    assert append_failure(api(400, 10176)) is AppendFailure.UNAVAILABLE
    assert append_failure(api(500, 0)) is AppendFailure.UNAVAILABLE
    assert append_failure(api(400, 10201)) is AppendFailure.UNCERTAIN
    assert append_failure(api(400, 10199)) is AppendFailure.REFUSED
    assert append_failure(NoRespondersError()) is AppendFailure.UNAVAILABLE
    assert append_failure(NatsTimeoutError()) is AppendFailure.UNCERTAIN
    assert append_failure(TimeoutError()) is AppendFailure.UNCERTAIN


class Flaky(GroupCommitter):
    """Fails the first `failures` commits with `error`, then commits (optionally storing the
    batch first, as a leader that committed just before it stepped down would)."""

    def __init__(self, nc: Client, failures: int, error: Exception, store: bool = False):
        super().__init__(nc)
        self.failures = failures
        self.error = error
        self.store = store
        self.calls = 0

    async def commit(self, append: SessionAppend, timeout_s: float | None = None) -> list[int]:
        self.calls += 1
        if self.calls <= self.failures:
            if self.store:
                await super().commit(append, timeout_s)
            raise self.error
        return await super().commit(append, timeout_s)


def gateway(nc: Client, settings: Settings, committer: GroupCommitter) -> CommandService:
    committer.start()
    return CommandService(nc, settings, committer)


INJECT = orjson.dumps({"session_id": "away", "reminder": {"body": "b"}})


async def test_an_election_longer_than_the_conflict_retries_is_ridden_out(
    nc: Client, provisioned: Settings
) -> None:
    flaky = Flaky(nc, provisioned.conflict_retries + 3, CommitUnavailable("no responders"))
    reply = await gateway(nc, provisioned, flaky).handle("inject", INJECT)
    assert reply["ok"] is True and reply["session_seq"] == 1
    assert flaky.calls == provisioned.conflict_retries + 4
    await flaky.stop()


async def test_a_stream_away_past_the_deadline_is_unavailable_with_retry_after(
    nc: Client, provisioned: Settings
) -> None:
    quick = provisioned.model_copy(update={"request_timeout_s": 0.5})
    flaky = Flaky(nc, 10_000, CommitUnavailable("JetStream system temporarily unavailable"))
    reply = await gateway(nc, quick, flaky).handle("inject", INJECT)
    assert reply["ok"] is False
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"]["retry_after_ms"] > 0
    assert await read_session(nc, provisioned.stream, "away") == []
    await flaky.stop()


async def test_commits_of_unknown_outcome_that_landed_are_answered_from_the_log_once(
    nc: Client, provisioned: Settings
) -> None:
    flaky = Flaky(nc, 2, CommitUncertain("timeout"), store=True)
    reply = await gateway(nc, provisioned, flaky).handle("inject", INJECT)
    assert reply["ok"] is True and reply["session_seq"] == 1
    events = [decode(item.envelope) for item in await read_session(nc, provisioned.stream, "away")]
    assert [event.session_seq for event in events] == [1]
    await flaky.stop()

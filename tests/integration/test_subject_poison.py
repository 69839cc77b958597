"""SPEC §6.3: the projector trusts nothing the subject does not confirm (real nats-server)."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from client.sdk import ReminderClient
from contracts.state import SessionState
from services.adapters.settings import Settings
from tests.integration.forge import publish_raw
from tests.integration.read_side import projected, wait_projected_equal
from tests.processes import ServiceRunner
from tests.support import Driver


def first_event(session_id: str) -> dict[str, object]:
    """A well-formed event of `session_id` (its own first `injected`), as a forger has it."""
    driver = Driver(session_id)
    driver.inject("forged")
    return driver.log[0].to_wire()


async def degraded_state(nc: Client, settings: Settings, session_id: str) -> SessionState:
    for _ in range(100):
        state = await projected(nc, settings, session_id)
        if isinstance(state, SessionState) and state.degraded is not None:
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"{session_id} was never marked degraded")


async def test_events_whose_subject_disagrees_are_dead_lettered_and_degrade_the_session(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    js = nc.jetstream()
    wrong_kind = await publish_raw(nc, "transcript.reminder.fired.A", first_event("A"))
    wrong_session = await publish_raw(nc, "transcript.reminder.injected.C", first_event("B"))
    for token, seq in (("A", wrong_kind), ("C", wrong_session)):
        state = await degraded_state(nc, provisioned, token)
        assert state.degraded is not None
        assert (state.degraded.stream_seq, state.degraded.code) == (seq, "wrong_subject")
        assert state.session_seq == 0, "nothing of the forged event was applied"
        dlq = await js.get_last_msg(provisioned.dlq_stream, f"reminders.dlq.projector.{token}")
        assert dlq.headers is not None
        assert dlq.headers["Reminders-Error-Code"] == "wrong_subject"
        assert dlq.headers["Reminders-Stream-Seq"] == str(seq)


async def test_a_five_token_subject_is_dead_lettered_and_the_session_still_projects(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    js = nc.jetstream()
    junk = await publish_raw(nc, "transcript.reminder.injected.junk.K", first_event("K"))
    client = ReminderClient(nc)
    await client.inject("K", "real one")
    await client.inject("K", "real two")
    await wait_projected_equal(nc, provisioned, ["K"])
    state = await projected(nc, provisioned, "K")
    assert isinstance(state, SessionState)
    assert state.degraded is None and state.session_seq == 2
    dlq = await js.get_last_msg(provisioned.dlq_stream, "reminders.dlq.projector.K")
    assert dlq.headers is not None
    assert dlq.headers["Reminders-Error-Code"] == "wrong_subject"
    assert dlq.headers["Reminders-Original-Subject"] == "transcript.reminder.injected.junk.K"
    assert dlq.headers["Reminders-Stream-Seq"] == str(junk)

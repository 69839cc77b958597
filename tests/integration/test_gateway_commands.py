"""Every command of SPEC §4.2–§4.9 through a gateway running as its own process."""

from __future__ import annotations

import hashlib
import re

import orjson
import pytest
from nats.aio.client import Client

from client.sdk import ReminderClient
from contracts.decode import decode
from contracts.events import Event
from core import chain_link
from core.canonical import session_token
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


async def stored(nc: Client, settings: Settings, session_id: str) -> list[tuple[int, str, Event]]:
    """(stream_seq, subject, event) of every stored event of the session."""
    return [
        (item.stream_seq, item.subject, decode(item.envelope))
        for item in await read_session(nc, settings.stream, session_id)
    ]


def assert_chain_holds(events: list[Event]) -> None:
    previous = ""
    for expected_seq, event in enumerate(events, start=1):
        assert event.session_seq == expected_seq
        body = event.to_wire()
        chain = body.pop("chain")
        assert chain == chain_link(previous, body)
        previous = chain


async def test_every_command_round_trips_with_the_exact_events_in_the_stream(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    client = ReminderClient(nc)
    sid = "bus-session"

    reply = await client.inject(sid, "Tests pass now.", ttl_turns=1, tags=["tests"], id="t1")
    assert reply == {"ok": True, "session_seq": 1, "reminder_id": "t1", "deduped_count": 0}
    reply = await client.inject(sid, "Budget 70 %.", dedupe_key="budget", id="b1")
    reply = await client.inject(sid, "Budget 85 %.", dedupe_key="budget", id="b2")
    assert reply["deduped_count"] == 1 and reply["session_seq"] == 4
    reply = await client.inject(sid, "File changed.", mode="steer", id="q1")
    assert reply == {
        "ok": True,
        "session_seq": 5,
        "reminder_id": "q1",
        "queued": True,
        "position": 1,
    }
    reply = await client.inject(sid, "Withdrawn.", mode="interrupt", id="q2")
    assert (await client.revoke(sid, "q2"))["status"] == "revoked"
    assert (await client.revoke(sid, "q2"))["status"] == "already_revoked"
    reply = await client.checkpoint(sid, "turn_start", 0)
    assert reply == {"ok": True, "session_seq": 8, "drained": ["q1"], "dispatch_skipped": False}
    reply = await client.render(sid, 0, user_text="hi")
    envelope = reply["envelope"]
    assert envelope["directive_ids"] == ["t1", "b2", "q1"]
    assert reply["inline"]["text"].endswith(envelope["text"])
    reply = await client.end_turn(sid, 0)
    assert reply == {
        "ok": True,
        "session_seq": 14,
        "expired_count": 1,
        "decremented_count": 0,
        "remaining_count": 2,
    }
    assert (await client.end_turn(sid, 0))["already_applied"] is True
    reply = await client.clear(sid, id="q1")
    assert reply["removed_count"] == 1
    reply = await client.compact(sid, 1)
    assert reply["compacted_count"] == 1
    reply = await client.handoff(sid, "bus-child", sub_agent_id="sub")
    assert reply["propagated_ids"] == []

    rows = await stored(nc, provisioned, sid)
    kinds = [event.kind for _, _, event in rows]
    assert kinds == [
        "injected",
        "injected",
        "deduped",
        "injected",
        "queued",
        "queued",
        "revoked",
        "injected",
        "fired",
        "fired",
        "fired",
        "delivered",
        "expired",
        "post_turn",
        "expired",
        "expired",
        "compacted",
        "handed_off",
    ]
    for stream_seq, subject, event in rows:
        assert subject == f"transcript.reminder.{event.kind}.{session_token(sid)}"
        assert stream_seq >= event.session_seq
    assert_chain_holds([event for _, _, event in rows])
    delivered = next(event for _, _, event in rows if event.kind == "delivered")
    assert delivered.payload.text == envelope["text"]  # type: ignore[union-attr]
    assert (
        delivered.payload.text_sha256
        == hashlib.sha256(  # type: ignore[union-attr]
            envelope["text"].encode()
        ).hexdigest()
    )
    assert delivered.reply is not None and "inline" not in delivered.reply
    assert all("inline" not in (event.reply or {}) for _, _, event in rows)


async def test_each_event_carries_its_event_id_as_nats_msg_id(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    await ReminderClient(nc).inject("ids", "x")
    js = nc.jetstream()
    message = await js.get_msg(provisioned.stream, 1)
    event = decode(message.data or b"")
    assert message.headers is not None
    assert message.headers["Nats-Msg-Id"] == event.event_id
    assert message.headers["Nats-Expected-Last-Subject-Sequence"] == "0"
    assert message.headers["Nats-Expected-Last-Subject-Sequence-Subject"] == (
        "transcript.reminder.*.ids"
    )


async def test_a_session_id_that_is_not_subject_safe_uses_its_hashed_token(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    sid = "user@example.com/session 1"
    await ReminderClient(nc).inject(sid, "x")
    rows = await stored(nc, provisioned, sid)
    token = "=" + hashlib.sha256(sid.encode()).hexdigest()[:40]
    assert rows[0][1] == f"transcript.reminder.injected.{token}"
    assert rows[0][2].session_id == sid


@pytest.mark.parametrize(
    ("op", "payload", "code"),
    [
        ("inject", b"{not json", "invalid_request"),
        ("explode", b"{}", "invalid_request"),
        ("inject", b'{"session_id": "s", "reminder": {"body": ""}}', "HARN-RMD-001"),
        ("inject", b'{"session_id": "s", "reminder": {"body": "x", "colour": 1}}', "HARN-RMD-001"),
        (
            "inject",
            b'{"session_id": "s", "reminder": {"body": "x", "propagate": "up"}}',
            "HARN-RMD-005",
        ),
        (
            "inject",
            orjson.dumps({"session_id": "s", "reminder": {"body": "x" * 40_000}}),
            "too_large",
        ),
        ("render", b'{"session_id": "s", "turn": "zero"}', "invalid_request"),
        ("clear", b'{"session_id": "s", "selector": {}}', "HARN-RMD-001"),
        ("checkpoint", b'{"session_id": "s", "seam": "nap", "turn": 0}', "invalid_request"),
        ("revoke", b'{"session_id": "s", "reminder_id": "ghost"}', "unknown_reminder_id"),
        ("inject", b"[1, 2]", "invalid_request"),
    ],
)
async def test_bad_input_gets_a_coded_error_and_appends_nothing(
    nc: Client, provisioned: Settings, services: ServiceRunner, op: str, payload: bytes, code: str
) -> None:
    services.start("gateway")
    reply = orjson.loads((await nc.request(f"reminders.v1.{op}", payload, timeout=10)).data)
    assert reply["ok"] is False
    assert reply["error"]["code"] == code
    assert reply["error"]["message"]
    info = await nc.jetstream().stream_info(provisioned.stream)
    assert info.state.messages == 0


async def test_a_repeated_request_id_is_answered_from_the_log_by_a_fresh_gateway(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    first_gateway = services.start("gateway")
    client = ReminderClient(nc)
    first = await client.inject("idem", "x", request_id="req-1")
    services.kill(first_gateway)
    services.start("gateway")  # an empty cache: the reply must come from the log
    again = await client.inject("idem", "something else", request_id="req-1")
    assert again == first
    info = await nc.jetstream().stream_info(provisioned.stream)
    assert info.state.messages == 1


async def test_a_repeated_render_compacted_since_is_answered_from_the_log(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    """Compaction digests the envelope a remembered render reply is rebuilt from; the repeat
    still gets the first reply, text and all, read back along the session's links."""
    services.start("gateway")
    client = ReminderClient(nc)
    await client.inject("recap", "due at the next render")
    first = await client.request("render", {"session_id": "recap", "turn": 0, "request_id": "r1"})
    assert first["ok"] is True and first["envelope"]["text"]
    for turn in range(3):  # later events the read walks back over
        await client.request("end_turn", {"session_id": "recap", "turn": turn})
    compact = await client.request("compact", {"session_id": "recap", "turn": 3})
    assert compact["ok"] is True
    before = (await nc.jetstream().stream_info(provisioned.stream)).state.messages
    again = await client.request("render", {"session_id": "recap", "turn": 3, "request_id": "r1"})
    assert again == first
    assert (await nc.jetstream().stream_info(provisioned.stream)).state.messages == before


async def test_commands_beyond_the_per_session_rate_are_rate_limited(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env={"REMINDERS_RATE_LIMIT": "5"})
    client = ReminderClient(nc)
    replies = [
        await client.request("end_turn", {"session_id": "busy", "turn": n}) for n in range(8)
    ]
    limited = [reply for reply in replies if not reply["ok"]]
    assert len(limited) == 3
    assert all(reply["error"]["code"] == "rate_limited" for reply in limited)
    assert all(reply["error"]["details"]["retry_after_ms"] > 0 for reply in limited)
    other = await client.request("end_turn", {"session_id": "calm", "turn": 0})
    assert other["ok"] is True
    info = await nc.jetstream().stream_info(provisioned.stream)
    assert info.state.messages == 6


async def test_the_gateway_answers_health_readiness_and_metrics(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    gateway = services.start("gateway")
    await ReminderClient(nc).inject("probe", "secret body canary-7731")
    assert gateway.get("/healthz")[0] == 200
    assert gateway.get("/readyz")[0] == 200
    status, metrics = gateway.get("/metrics")
    assert status == 200
    assert "reminders_commands" in metrics
    assert 'op="inject"' in metrics
    assert re.search(r"reminders_active_sessions\{[^}]*\} 1\.0", metrics)
    assert "canary-7731" not in metrics
    assert "probe" not in metrics
    assert "canary-7731" not in gateway.log()

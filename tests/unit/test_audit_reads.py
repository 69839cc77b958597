"""The gateway's audit reads without a broker: `events` pages a session's stored events
exactly as stored within a byte budget, `sessions` lists only the caller tenant's sessions
(SPEC §4.1.1, §7.1, §10.1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.commands import EventsQuery, SessionsQuery, parse_command
from contracts.tenants import DEFAULT_TENANT
from services.adapters.session_read import RawStored
from services.adapters.settings import Settings
from services.adapters.tenants_config import TenantsFile
from services.gateway.audit_reads import (
    REPLY_FRAME_BYTES,
    events_page,
    page_budget,
    sessions_page,
)
from services.gateway.service import CommandService
from services.gateway.tenancy import Tenancy


def stored(bodies: list[bytes], first_seq: int = 10, step: int = 3) -> list[RawStored]:
    """Messages as a direct get returns them: seqs spread out, with what is left after each."""
    count = len(bodies)
    return [
        RawStored(body, first_seq + step * n, f"transcript.reminder.injected.t{n}", count - n - 1)
        for n, body in enumerate(bodies)
    ]


async def messages(rows: list[RawStored]) -> AsyncGenerator[RawStored]:
    for row in rows:
        yield row


def event(session_seq: int, size: int = 10) -> bytes:
    return orjson.dumps({"session_seq": session_seq, "body": "x" * size, "schema": "v1"})


def page(rows: list[RawStored], budget: int, from_seq: int | None = None) -> bytes:
    return orjson.dumps(asyncio.run(events_page(messages(rows), from_seq, budget)))


def read_all(rows: list[RawStored], budget: int) -> tuple[list[dict[str, object]], int]:
    """Every page, as a client asks for them; the events and how many pages it took."""
    items: list[dict[str, object]] = []
    after, pages = 0, 0
    while True:
        left = [row for row in rows if row.stream_seq > after]
        reply = orjson.loads(page(left, budget))
        pages += 1
        assert len(orjson.dumps(reply)) <= budget + 64 or len(reply["events"]) == 1
        items.extend(reply["events"])
        if reply["next_after_stream_seq"] is None:
            return items, pages
        after = reply["next_after_stream_seq"]


def test_each_event_comes_back_exactly_as_stored_with_its_seq_and_subject() -> None:
    body = b'{"b":"\\u00e9 \\"q\\"","a":1,"session_seq":1}'  # not canonical: kept as stored
    data = page(stored([body]), 10_000)
    assert body in data
    reply = orjson.loads(data)
    assert reply["events"] == [
        {
            "event": orjson.loads(body),
            "stream_seq": 10,
            "subject": "transcript.reminder.injected.t0",
        }
    ]
    assert reply["next_after_stream_seq"] is None


def test_a_body_that_is_not_a_json_object_is_null_and_the_reply_stays_json() -> None:
    reply = orjson.loads(page(stored([b"{not json", b"[1]", event(3)]), 10_000))
    assert [item["event"] for item in reply["events"]][:2] == [None, None]


def test_pages_stay_within_the_byte_budget_and_together_are_the_whole_session() -> None:
    rows = stored([event(n, size=900) for n in range(1, 41)])
    items, pages = read_all(rows, budget=5_000)
    assert pages > 5
    assert [item["stream_seq"] for item in items] == [row.stream_seq for row in rows]
    assert [item["event"] for item in items] == [orjson.loads(row.data) for row in rows]


def test_a_page_holds_one_event_larger_than_the_budget_rather_than_none() -> None:
    rows = stored([event(1, size=1_500), event(2)])
    reply = orjson.loads(page(rows, budget=1_000))
    assert [item["stream_seq"] for item in reply["events"]] == [10]
    assert reply["next_after_stream_seq"] == 10


def test_an_event_no_reply_could_carry_is_too_large_not_a_reply_the_server_refuses() -> None:
    reply = orjson.loads(page(stored([event(1), event(2, size=20_000)]), budget=10_000))
    assert [item["stream_seq"] for item in reply["events"]] == [10]
    alone = orjson.loads(page(stored([event(2, size=20_000)], first_seq=13), budget=10_000))
    assert alone["error"]["code"] == "too_large" and alone["error"]["details"]["stream_seq"] == 13


def test_from_session_seq_skips_the_earlier_events() -> None:
    reply = orjson.loads(page(stored([event(n) for n in range(1, 6)]), 10_000, from_seq=4))
    assert [item["event"]["session_seq"] for item in reply["events"]] == [4, 5]


def test_an_unknown_session_is_one_empty_page() -> None:
    assert page([], 10_000) == b'{"ok":true,"events":[],"next_after_stream_seq":null}'


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3_000), min_size=1, max_size=30))
def test_any_session_pages_into_its_events_in_order(sizes: list[int]) -> None:
    rows = stored([event(n + 1, size) for n, size in enumerate(sizes)])
    items, _ = read_all(rows, budget=4_000)
    assert [item["stream_seq"] for item in items] == [row.stream_seq for row in rows]


def test_the_page_budget_leaves_room_for_the_frame() -> None:
    assert page_budget(1024 * 1024) == 1024 * 1024 - REPLY_FRAME_BYTES


def state_value(session_id: str, pad: int = 0) -> bytes:
    return orjson.dumps({"counters": {}, "pad": "p" * pad, "session_id": session_id})


def listing(values: list[bytes], tenant: str, budget: int = 10_000, scan: int = 10**9) -> dict:
    rows = stored(values, first_seq=1, step=1)
    return asyncio.run(sessions_page(messages(rows), tenant, budget, scan))


BUCKET = [
    state_value("@acme/s1"),
    state_value("@globex/s1"),
    state_value("plain"),
    orjson.dumps({"purged_through": 9}),  # a tombstone names no session
    b"",
    state_value("@acme/@globex/x"),  # acme's session named "@globex/x"
    orjson.dumps({"session_id": "@globex/y", "note": {"session_id": "@acme/z"}}),
]


@pytest.mark.parametrize(
    ("tenant", "expected"),
    [("acme", ["s1", "@globex/x"]), ("globex", ["s1", "y"]), (DEFAULT_TENANT, ["plain"])],
)
def test_the_listing_names_only_the_callers_sessions(tenant: str, expected: list[str]) -> None:
    reply = listing(BUCKET, tenant)
    assert reply == {"ok": True, "session_ids": expected, "next_after": None}


def test_the_listing_pages_by_bytes_scanned_and_by_reply_bytes() -> None:
    values = [state_value(f"@acme/s{n}", pad=1_000) for n in range(10)]
    first = listing(values, "acme", scan=3_000)
    assert first["session_ids"] == ["s0", "s1", "s2"] and first["next_after"] == 3
    small = listing(values, "acme", budget=12)
    assert small["session_ids"] == ["s0", "s1"] and small["next_after"] == 2


def test_audit_queries_are_scoped_and_counted_as_queries() -> None:
    tenancy = Tenancy(TenantsFile.model_validate({"tenants": {"acme": {}}}), 4096)
    events, _ = parse_command("events", {"session_id": "s1", "after_stream_seq": 7})
    scoped = tenancy.scope("acme", events)
    assert isinstance(scoped, EventsQuery) and scoped.session_id == "@acme/s1"
    assert scoped.after_stream_seq == 7
    refused = tenancy.scope(DEFAULT_TENANT, parse_command("events", {"session_id": "@acme/s1"})[0])
    assert isinstance(refused, dict) and refused["error"]["code"] == "invalid_request"
    listing_query, _ = parse_command("sessions", {"after": 5})
    assert isinstance(listing_query, SessionsQuery)
    assert tenancy.scope("acme", listing_query) is listing_query
    with pytest.raises(Exception, match="session_id"):
        parse_command("sessions", {"session_id": "s1"})


class RecordingReads:
    """The gateway's audit reads, recording what they were asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[object, ...]] = []

    async def events(self, session_id: str, after: int, from_seq: int | None) -> dict[str, object]:
        self.asked.append(("events", session_id, after, from_seq))
        return {"ok": True, "events": [], "next_after_stream_seq": None}

    async def sessions(self, tenant: str, after: int) -> dict[str, object]:
        self.asked.append(("sessions", tenant, after))
        return {"ok": True, "session_ids": [], "next_after": None}


def gateway_service(reads: RecordingReads) -> CommandService:
    """The gateway's request handling without a broker: nothing behind it may be used but
    the audit reads (a command would need the log and fail)."""
    service = CommandService(object(), Settings.from_env({}), object())  # type: ignore[arg-type]
    tenants = TenantsFile.model_validate({"tenants": {"acme": {"queries_in_flight": 4}}})
    service._tenancy = Tenancy(tenants, 4096)
    service._audit = reads  # type: ignore[assignment]
    return service


def test_the_gateway_serves_audit_reads_scoped_to_the_callers_tenant() -> None:
    reads = RecordingReads()
    service = gateway_service(reads)

    async def go() -> list[dict[str, object]]:
        return [
            await service.handle("events", b'{"session_id":"s1","after_stream_seq":9}', "acme"),
            await service.handle("sessions", b'{"after":4}', "acme"),
            await service.handle("events", b'{"session_id":"s1"}', DEFAULT_TENANT),
            await service.handle("events", b'{"session_id":"@acme/s1"}', DEFAULT_TENANT),
            await service.handle("sessions", b'{"session_id":"s1"}', "acme"),
        ]

    replies = asyncio.run(go())
    assert reads.asked == [
        ("events", "@acme/s1", 9, None),
        ("sessions", "acme", 4),
        ("events", "s1", 0, None),
    ]
    assert [reply["ok"] for reply in replies] == [True, True, True, False, False]


def test_audit_reads_past_their_bound_are_refused_for_a_while() -> None:
    service = gateway_service(RecordingReads())
    service._audit_slots = 0
    reply = asyncio.run(service.handle("events", b'{"session_id":"s1"}', "acme"))
    assert reply["error"]["code"] == "rate_limited"
    assert reply["error"]["details"]["retry_after_ms"] > 0

"""`rebuild` and `verify-projection --all` fold the stream in bounded memory (replay.rebuild):
the same records as folding each session's whole log at once, safe beside a running
projector, and a peak RSS that does not grow with the stream."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import orjson
import pytest
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError

from bench.common import measured_command
from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import last_token
from core.projection import project_all
from replay import fold_store
from replay.rebuild import rebuild, verify_projection
from replay.source import EVENT_FILTER, iterate_stream
from services.adapters.provisioning import consumer_info
from services.adapters.record_codec import encode_state
from services.adapters.records import KvSessionStore, StaleRevision
from services.adapters.settings import Settings
from tests.integration.cloned_log import fill_cloned
from tests.integration.forge import publish_raw
from tests.processes import ServiceRunner

#: Small enough that the sessions below do not fit: most are spilled and read back.
TINY_CACHE = 16


async def whole_log_folds(nc: Client, stream: str) -> dict[str, bytes]:
    """What the rebuild did before it streamed: every event in memory, grouped by session,
    each session folded at once. The reference the streaming fold must equal."""
    sessions: dict[str, list[StoredEvent]] = defaultdict(list)
    async for row in iterate_stream(nc, stream, EVENT_FILTER):
        sessions[last_token(row.subject)].append(row)
    folded: dict[str, bytes] = {}
    for token, rows in sessions.items():
        record, _ = project_all(None, rows)
        assert isinstance(record, SessionState)
        folded[token] = encode_state(record)
    return folded


async def bucket_values(nc: Client, bucket: str) -> dict[str, bytes]:
    """Every value of the projection bucket. The keys come from the bucket stream's subjects:
    nats-py's `kv.keys()` can find none under load, because its watcher says "no more" when
    the server has sent every entry and the client has not yet read one."""
    js = nc.jetstream()
    kv = await js.key_value(bucket)
    prefix = f"$KV.{bucket}."
    info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{prefix}>")
    values: dict[str, bytes] = {}
    for subject in info.state.subjects or {}:
        key = subject[len(prefix) :]
        try:
            values[key] = (await kv.get(key)).value or b""
        except KeyNotFoundError:  # deleted or purged: no value
            continue
    return values


async def poison_one(nc: Client, session_id: str) -> None:
    """Store an event whose chain does not follow: the session is degraded from there."""
    body = orjson.dumps(
        {
            "schema": "reminder-ledger.event/v1",
            "kind": "post_turn",
            "session_id": session_id,
            "session_seq": 999,
            "chain": "0" * 64,
        }
    )
    await publish_raw(nc, f"transcript.reminder.post_turn.{session_id}", body)


@pytest.mark.parametrize("workers", [1, 2])
async def test_streaming_rebuild_and_verify_equal_the_whole_log_fold(
    nc: Client, provisioned: Settings, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Folded in this process, or by two worker processes however small the stream.
    monkeypatch.setattr(fold_store, "WORKERS_FROM_MESSAGES", 0)
    await fill_cloned(nc, provisioned.stream, sessions=300, commands=6, prefix="a")
    await poison_one(nc, "a-7")
    await fill_cloned(nc, provisioned.stream, sessions=40, commands=3, prefix="b")
    expected = await whole_log_folds(nc, provisioned.stream)
    kv = await nc.jetstream().key_value(provisioned.kv_bucket)
    # A forgotten session: its tombstone stays, whatever its events say.
    tombstone = Tombstone(session_token="b-3", purged_through=0, forgotten_at="2026-12-01T00:00Z")
    await kv.put("b-3", tombstone.model_dump_json().encode())
    # A stale projection the rebuild must replace.
    await kv.put("a-1", encode_state(SessionState(session_id="a-1", turn=42)))

    seen: list[str] = []
    report = await rebuild(
        nc,
        provisioned.stream,
        provisioned.kv_bucket,
        lambda stage, done, total: seen.append(stage),
        cache_sessions=TINY_CACHE,
        workers=workers,
    )
    assert (report.written, report.left_to_live_projector, report.tombstoned) == (340, 0, 0)
    assert report.degraded == ["a-7"]
    assert {"reading", "writing"} <= set(seen)
    values = await bucket_values(nc, provisioned.kv_bucket)
    assert values == {**expected, "b-3": values["b-3"]}
    # The new life after the (empty) purge is folded from the tombstone: the same state.
    assert values["b-3"] == expected["b-3"]
    # Once more over a bucket that holds what the fold makes: nothing is written again.
    bucket_stream = f"KV_{provisioned.kv_bucket}"
    last_write = (await nc.jetstream().stream_info(bucket_stream)).state.last_seq
    again = await rebuild(nc, provisioned.stream, provisioned.kv_bucket, workers=workers)
    assert (again.written, again.unchanged, again.tombstoned) == (0, 340, 0)
    assert again.degraded == ["a-7"]  # left as it was, and still named
    assert (await nc.jetstream().stream_info(bucket_stream)).state.last_seq == last_write
    assert await bucket_values(nc, provisioned.kv_bucket) == values

    checked, mismatches = await verify_projection(
        nc, provisioned.stream, provisioned.kv_bucket, cache_sessions=TINY_CACHE, workers=workers
    )
    # a-7 is degraded at an event past its last applied one: verify, as before, compares
    # the projection with the fold up to its stream_seq, and a degraded mark differs.
    assert checked == 340
    assert [m.token for m in mismatches] == ["a-7"]
    state = orjson.loads(values["a-9"])
    state["turn"] = 77
    await kv.put("a-9", orjson.dumps(state))
    checked, mismatches = await verify_projection(
        nc, provisioned.stream, provisioned.kv_bucket, cache_sessions=TINY_CACHE, workers=workers
    )
    assert [(m.token, m.reason) for m in mismatches] == [
        ("a-7", mismatches[0].reason),
        ("a-9", f"projection differs from a replay up to {state['stream_seq']}"),
    ]


async def _settled(nc: Client, settings: Settings, timeout_s: float = 90) -> None:
    """Until the projector's durable has nothing pending or unacked."""
    for _ in range(int(timeout_s * 10)):
        info = await consumer_info(nc, settings.stream, "projector")
        if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the projector did not catch up")


async def test_rebuild_and_verify_beside_a_catching_up_projector(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    await fill_cloned(nc, provisioned.stream, sessions=400, commands=6, prefix="p")
    expected = await whole_log_folds(nc, provisioned.stream)
    services.start("projector")
    more = asyncio.ensure_future(
        fill_cloned(nc, provisioned.stream, sessions=200, commands=4, prefix="q")
    )
    report = await rebuild(nc, provisioned.stream, provisioned.kv_bucket, cache_sessions=TINY_CACHE)
    await more
    # Every session the rebuild read was written, or found already equal (the projector
    # got there first with the same state), or already further on.
    assert report.written + report.unchanged + report.left_to_live_projector >= 400
    assert report.tombstoned == 0 and report.degraded == []
    # A verification while the projector is still at work compares each state with its
    # own log up to where that state stands: clean.
    _, mismatches = await verify_projection(
        nc, provisioned.stream, provisioned.kv_bucket, cache_sessions=TINY_CACHE
    )
    assert mismatches == []
    await _settled(nc, provisioned)
    values = await bucket_values(nc, provisioned.kv_bucket)
    assert {token: values[token] for token in expected} == expected
    checked, mismatches = await verify_projection(
        nc, provisioned.stream, provisioned.kv_bucket, cache_sessions=TINY_CACHE
    )
    assert (checked, mismatches) == (600, [])
    # Over what the caught-up projector wrote, a rebuild finds every state already what the
    # fold makes, byte for byte, and writes nothing.
    bucket_stream = f"KV_{provisioned.kv_bucket}"
    last_write = (await nc.jetstream().stream_info(bucket_stream)).state.last_seq
    again = await rebuild(nc, provisioned.stream, provisioned.kv_bucket, cache_sessions=TINY_CACHE)
    assert (again.written, again.unchanged, again.left_to_live_projector) == (0, 600, 0)
    assert (await nc.jetstream().stream_info(bucket_stream)).state.last_seq == last_write


#: The peak RSS a rebuild in one process may gain over one of an empty stream, folding the
#: 20,000 sessions (120,000 events) below with 2,000 in memory at once. Holding the whole
#: stream, as the rebuild did before it streamed, gains more than twice this on the same
#: stream, and more with every event; both measured figures are in docs/scaling.md.
RSS_GROWTH_BOUND_MIB = 60
#: What the peak RSS of a rebuild whose fold runs in worker processes (the default on a
#: stream this big) may gain when the stream doubles: the workers' interpreters are there at
#: either size; only the stream would make it grow, and it must not.
RSS_DOUBLING_BOUND_MIB = 20


def peak_rss_mib(*args: str) -> float:
    """Run `reminders ARGS` in a fresh process; the peak RSS in MiB of it with the
    processes it started."""
    return measured_command(args, timeout_s=300)[1]


async def test_rebuild_peak_memory_does_not_grow_with_the_stream(
    nc: Client, provisioned: Settings
) -> None:
    url = provisioned.nats_url
    empty = await asyncio.to_thread(peak_rss_mib, "rebuild", "--nats", url)
    half = await fill_cloned(nc, provisioned.stream, sessions=10_000, commands=4, prefix="m")
    by_workers_half = await asyncio.to_thread(
        peak_rss_mib, "rebuild", "--nats", url, "--fold-workers", "2"
    )
    events = half + await fill_cloned(
        nc, provisioned.stream, sessions=10_000, commands=4, prefix="n"
    )
    assert events >= 120_000
    by_workers = await asyncio.to_thread(
        peak_rss_mib, "rebuild", "--nats", url, "--fold-workers", "2"
    )
    alone = await asyncio.to_thread(
        peak_rss_mib, "rebuild", "--nats", url, "--cache-sessions", "2000", "--fold-workers", "1"
    )
    print(
        f"rebuild peak RSS: {empty:.1f} MiB (empty stream); one process {alone:.1f} MiB "
        f"({events} events); two fold workers {by_workers_half:.1f} MiB ({half} events), "
        f"{by_workers:.1f} MiB ({events} events)"
    )
    assert alone - empty < RSS_GROWTH_BOUND_MIB, (empty, alone)
    assert by_workers - by_workers_half < RSS_DOUBLING_BOUND_MIB, (by_workers_half, by_workers)


async def test_a_session_that_changes_under_every_write_is_reported_not_dropped(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill_cloned(nc, provisioned.stream, sessions=3, commands=2, prefix="c")

    async def refused(self: KvSessionStore, writes: object) -> None:
        return None  # the atomic batch refused: every session goes one by one

    async def lost(self: KvSessionStore, key: str, value: bytes, revision: int | None) -> int:
        raise StaleRevision(key)  # another writer got there first, every time

    monkeypatch.setattr(KvSessionStore, "write_many", refused)
    monkeypatch.setattr(KvSessionStore, "write", lost)
    report = await rebuild(nc, provisioned.stream, provisioned.kv_bucket)
    assert report.written == 0
    assert report.still_changing == ["c-0", "c-1", "c-2"]

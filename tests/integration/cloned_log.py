"""Test-only: a large interleaved log made fast, by cloning one session decided by the core.

Deciding every session with the core costs about a millisecond and a half per command, too
slow to make a log of hundreds of thousands of events inside a test. One script is decided
once (`bench.traffic.decide_session`, as the gateway would), then each clone gets its own
session and agent id with the hash chain computed again, so every clone is a valid log of
its own. The events are stored round-robin over the sessions (event k of every session,
then event k+1), as live traffic spreads a session through the stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client

from bench.traffic import decide_session
from contracts.subjects import event_subject
from core.canonical import canonical_bytes, chain_link


def template(commands: int) -> list[dict[str, Any]]:
    """One session's events (wire form, `chain` left out) for a script of `commands`."""
    decided = decide_session("template", list(range(commands)))
    wire = [event.to_wire() for events in decided for event in events]
    return [{k: v for k, v in envelope.items() if k != "chain"} for envelope in wire]


def stored(body: dict[str, Any], session_id: str, previous_chain: str) -> tuple[str, bytes, str]:
    """A template event as session `session_id`'s own, after `previous_chain`: its subject,
    stored bytes and chain."""
    envelope = {**body, "session_id": session_id, "agent_id": session_id}
    chain = chain_link(previous_chain, envelope)
    envelope["chain"] = chain
    return event_subject(envelope["kind"], session_id), canonical_bytes(envelope), chain


async def fill_cloned(
    nc: Client, stream: str, sessions: int, commands: int, prefix: str = "clone"
) -> int:
    """Store `sessions` clones of a `commands`-command script, interleaved over all of them
    (event k of every session, then event k+1); returns how many events were stored. Only
    each clone's chain head is kept between rounds, so the filler's memory stays small."""
    events = template(commands)
    js = nc.jetstream()
    first = (await js.stream_info(stream)).state.messages
    chains = [""] * sessions
    for body in events:
        for n in range(sessions):
            subject, data, chains[n] = stored(body, f"{prefix}-{n}", chains[n])
            await nc.publish(subject, data)
            if n % 1000 == 999:
                await nc.flush()
        await nc.flush()
    total = sessions * len(events)
    # Core publishes are stored asynchronously: wait until the stream holds them all.
    for _ in range(600):
        if (await js.stream_info(stream)).state.messages >= first + total:
            return total
        await asyncio.sleep(0.1)
    raise AssertionError("the cloned events were not all stored")

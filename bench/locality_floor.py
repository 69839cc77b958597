"""What reading one long session spread through a large stream costs, beside two raw floors.

    python -m bench.locality_floor [--sessions 100000] [--long-commands 600] [--rounds 3]

The `replay_locality` figure sets the long session's read and replay inside the stream
against the same session in a stream of its own. This splits it: for each stream, the
library's read alone and with the replay (`rows_from_nats`, as `reminders replay` reads),
beside two ways stock nats-py could fetch the same messages:

- `raw_single_gets_all_at_once`: one direct get per event by its stream sequence, every
  sequence known in advance and every request sent at once, the replies taken by one
  callback: the fewest client steps a read of the messages one by one can take. The
  library does not know the sequences in advance: it follows the events' back-pointers
  from a few anchors.
- `raw_filtered_scan`: one batched direct get from the stream's first message under the
  session's subject filter, which the server answers by stepping over every message in
  between.

And, in each stream, the round of anchor lookups the library's walk starts from, two ways:
`anchors_next_by_subject` (what the library sends: the next message of the session's
busiest literal subject from each of as many points spread below its last event as the
library would take, 62 for 999 events), `anchors_next_by_filter` (the same under the
session's wildcard filter, whose next match is nearer but which the server looks for
message by message) and
`anchors_multi_last` (the last message of that subject at or below each point, the batched
direct get's `multi_last` with `up_to_seq`).

Each figure is [wall ms, this process's CPU ms], the best of 5 reads; `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial

import nats
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bench.catch_up import STREAM, append_alone
from bench.common import embedded_server, emit, provision_server
from bench.traffic import LONG_SESSION, Plan, append_all, generate
from contracts.subjects import session_subject_filter
from replay.engine import replay
from replay.source import rows_from_nats
from services.adapters.session_walk import CHAIN_LANE_LENGTH, CHAIN_MAX_LANES

REPEATS = 5
DIRECT_GET = f"$JS.API.DIRECT.GET.{STREAM}"


async def best_of(read: Callable[[], Awaitable[object]]) -> list[float]:
    """[wall ms, CPU ms] of the fastest of `REPEATS` reads."""
    best = (float("inf"), 0.0)
    for _ in range(REPEATS):
        wall, cpu = time.perf_counter(), time.process_time()
        await read()
        best = min(best, ((time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3))
    return [round(best[0], 2), round(best[1], 2)]


async def collect(nc: NATS, requests: list[bytes], until: Callable[[Msg], bool]) -> None:
    """Send every request to the stream's direct get with one reply subject, and take the
    replies in one callback until `until` says the last has come."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def take(message: Msg) -> None:
        if until(message) and not done.done():
            done.set_result(None)

    inbox = nc.new_inbox()
    subscription = await nc.subscribe(inbox, cb=take)
    try:
        for request in requests:
            await nc.publish(DIRECT_GET, request, reply=inbox)
        await asyncio.wait_for(done, 30)
    finally:
        await subscription.unsubscribe()


async def answered(nc: NATS, requests: list[bytes], closing: bool) -> None:
    """Every request sent at once and answered: by one message each, or (`closing`: a
    batched get such as `multi_last`) by its messages and a status message without a body."""
    left = len(requests)

    def last(message: Msg) -> bool:
        nonlocal left
        if not closing or not message.data:
            left -= 1
        return left == 0

    await collect(nc, requests, last)


async def filtered_scan(nc: NATS, count: int) -> None:
    """The session's messages in one batched direct get from seq 1 under its filter; the
    batch ends with a status message (no body)."""
    got = 0

    def last(message: Msg) -> bool:
        nonlocal got
        got += 1 if message.data else 0
        return not message.data

    request = {"seq": 1, "next_by_subj": session_subject_filter(LONG_SESSION), "batch": count + 1}
    await collect(nc, [orjson.dumps(request)], last)
    if got != count:
        raise RuntimeError(f"the scan returned {got} of {count} messages")


def anchor_rounds(busiest: str, high: int, events: int) -> dict[str, tuple[list[bytes], bool]]:
    """The three shapes of the anchor round for a session of `events` whose last is at
    `high`, as many anchors as the library's walk takes (its rule, `walk_session`), each
    with whether its answers end with a status message (`answered`)."""
    lanes = min(CHAIN_MAX_LANES, max(1, events // CHAIN_LANE_LENGTH))
    points = [high * n // lanes for n in range(lanes)]
    session_filter = session_subject_filter(LONG_SESSION)
    return {
        "anchors_next_by_subject": (
            [orjson.dumps({"next_by_subj": busiest, "seq": 1 + point}) for point in points],
            False,
        ),
        "anchors_next_by_filter": (
            [orjson.dumps({"next_by_subj": session_filter, "seq": 1 + point}) for point in points],
            False,
        ),
        "anchors_multi_last": (
            [orjson.dumps({"multi_last": [busiest], "up_to_seq": max(1, p)}) for p in points],
            True,
        ),
    }


async def measure(url: str) -> dict[str, object]:
    """Every read of the long session on one server, by name (see the module's doc)."""
    nc = await nats.connect(url)
    try:
        rows = await rows_from_nats(nc, STREAM, LONG_SESSION)
        seqs = [row.stream_seq for row in rows]
        subjects = [row.subject for row in rows]
        busiest = max(set(subjects), key=subjects.count)
        rounds = anchor_rounds(busiest, max(seqs), len(seqs))

        async def read() -> None:
            await rows_from_nats(nc, STREAM, LONG_SESSION)

        async def read_and_replay() -> None:
            replay(await rows_from_nats(nc, STREAM, LONG_SESSION))

        async def single_gets() -> None:  # the requests' encoding counts, as the library's does
            await answered(nc, [orjson.dumps({"seq": seq}) for seq in seqs], False)

        figures: dict[str, object] = {
            "events": len(seqs),
            "library_read_and_replay": await best_of(read_and_replay),
            "library_read": await best_of(read),
            "raw_single_gets_all_at_once": await best_of(single_gets),
            "raw_filtered_scan": await best_of(lambda: filtered_scan(nc, len(seqs))),
        }
        for name, (requests, closing) in rounds.items():
            figures[name] = await best_of(partial(answered, nc, requests, closing))
        return figures
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--commands-per-session", type=float, default=3.3)
    parser.add_argument("--long-commands", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plan = Plan(args.sessions, args.commands_per_session, args.long_commands)
    traffic = generate(plan)
    rounds = []
    with embedded_server() as inside, embedded_server() as alone:
        asyncio.run(provision_server(inside.url))
        asyncio.run(append_all(inside.url, traffic, plan))
        asyncio.run(provision_server(alone.url))
        asyncio.run(append_alone(alone.url, traffic, LONG_SESSION))
        for _ in range(args.rounds):
            in_stream = asyncio.run(measure(inside.url))
            rounds.append({"inside": in_stream, "alone": asyncio.run(measure(alone.url))})
    emit("locality_floor", {"sessions": args.sessions, "events": traffic.events, "rounds": rounds})


if __name__ == "__main__":
    main()

"""The projector's pure work per event, without NATS: µs per event by step, and a cProfile.

A deterministic interleaved log (`bench.traffic`: sessions decided by the core, in the
fake clock's round-robin order, as the catch-up scenarios store them) is cut into fetches of
`--batch` messages and projected in process exactly as `services.projector.apply` does per
touched session: the record read back from its bucket value (a cache miss, as at 100k
sessions, where a session's next event comes long after its record left the cache), each
body parsed, `project_all` (pydantic validation of each event, the chain check, the fold),
and the state's canonical bytes. The bucket is a dict; nothing waits.

    python bench/fold_profile.py [--sessions 2000] [--rounds 5] [--cprofile]

Run it as a file, so the same script measures another checkout: with `PYTHONPATH` set to
that tree's root it imports that tree's code (the older tree's API is the same). The
`digest` line is a SHA-256 over every session's final bucket value: a change that keeps
every byte keeps it.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import io
import pickle
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.traffic import Plan, generate, interleaved
from contracts.state import SessionState
from contracts.stored import read_stored
from contracts.subjects import event_subject, last_token
from core import projection
from core.canonical import canonical_bytes
from services.adapters.record_codec import decode_record, encode_state
from services.projector import app
from services.projector.apply import Projector

#: Steps in the order the projector runs them; `kv_decode` is part of the projector's
#: `kv_and_scheduling` stage, the three core steps are its `validate_chain_fold`.
STEPS = ("kv_decode", "parse", "validate", "chain", "fold", "encode")

Message = tuple[str, bytes, int]
"""(subject, stored bytes, stream_seq)."""


def build_log(sessions: int, commands: float, long_commands: int) -> list[Message]:
    """The log's messages in stream order (deterministic: ids and times derive from the plan)."""
    plan = Plan(sessions, commands, long_commands, prefix="fold")
    traffic = generate(plan)
    messages: list[Message] = []
    for _, events in interleaved(traffic, plan):
        for event in events:
            wire = event.to_wire()
            subject = event_subject(wire["kind"], wire["session_id"])
            messages.append((subject, canonical_bytes(wire), len(messages) + 1))
    return messages


class Timers:
    """Nanoseconds per step, and a wrapper that times a function into a step."""

    def __init__(self) -> None:
        self.ns = dict.fromkeys(STEPS, 0)

    def timed(self, step: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, its time added to `step`."""
        clock = time.thread_time_ns
        ns = self.ns

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                ns[step] += clock() - started

        return wrapper


def catch_up(messages: list[Message], batch: int, timers: Timers) -> dict[str, bytes]:
    """Project every message as the projector's batches do; returns the bucket."""
    clock = time.thread_time_ns
    ns = timers.ns
    bucket: dict[str, bytes] = {}
    for start in range(0, len(messages), batch):
        by_token: dict[str, list[Message]] = {}
        for message in messages[start : start + batch]:
            by_token.setdefault(last_token(message[0]), []).append(message)
        for token, group in by_token.items():
            t0 = clock()
            record = decode_record(bucket.get(token))
            t1 = clock()
            stored = [read_stored(data, seq, subject) for subject, data, seq in group]
            t2 = clock()
            record, _ = projection.project_all(record, stored, gap_is_final=[False] * len(group))
            t3 = clock()
            if isinstance(record, SessionState):
                bucket[token] = encode_state(record)
            t4 = clock()
            ns["kv_decode"] += t1 - t0
            ns["parse"] += t2 - t1
            ns["fold"] += t3 - t2  # less validate and chain, below
            ns["encode"] += t4 - t3
    return bucket


class MemoryDelivery:
    """A message as `Projector` sees it; acks cost nothing."""

    __slots__ = ("data", "num_delivered", "stream_seq", "subject")

    def __init__(self, message: Message) -> None:
        self.subject, self.data, self.stream_seq = message
        self.num_delivered = 1

    async def ack(self) -> None:
        """Nothing to acknowledge."""

    async def nak(self, delay_s: float) -> None:
        """Nothing to redeliver."""
        raise AssertionError("the log has no gaps")


class MemoryStore:
    """The bucket as a dict, with revisions."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes, int]] = {}

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        """The value and its revision."""
        value, revision = self.values.get(token, (None, None))
        return value, revision

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        """Set the value (nothing else writes, so the revision always matches)."""
        new = (revision or 0) + 1
        self.values[token] = (value, new)
        return new

    async def read_many(self, tokens: Sequence[str]) -> dict[str, tuple[bytes | None, int | None]]:
        """`read` of each token."""
        return {token: await self.read(token) for token in tokens}

    async def write_many(self, writes: Sequence[tuple[str, bytes, int | None]]) -> list[int]:
        """`write` of each (token, value, revision)."""
        return [await self.write(token, value, revision) for token, value, revision in writes]


class NoDeadLetters:
    """The log holds no poison."""

    async def send(self, delivery: Any, token: str, code: str, reason: str) -> None:
        """Refuse: a poison message here is a bug of the log."""
        raise AssertionError(f"poison {code}: {reason}")


def projector_round(messages: list[Message], batch: int) -> tuple[float, float, str]:
    """The real `Projector` over the log with the bucket in memory: µs of CPU per event in
    all, the part of it spent collecting garbage, and the bucket's digest."""
    store = MemoryStore()
    projector = Projector(store, NoDeadLetters())
    deliveries = [MemoryDelivery(message) for message in messages]
    gc_ns = [0, 0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_ns[1] = time.thread_time_ns()
        else:
            gc_ns[0] += time.thread_time_ns() - gc_ns[1]

    async def run() -> None:
        for start in range(0, len(deliveries), batch):
            await projector.process(list(deliveries[start : start + batch]))

    # The log and its deliveries are the harness's, not the projector's: out of the
    # collector's sight, as a live projector holds one batch of messages, not the log. Then
    # the collector as the projector's process sets it, if this tree does.
    gc.collect()
    gc.freeze()
    tune: Callable[..., None] | None = getattr(app, "collect_less_often", None)
    threshold: int | None = getattr(app, "PROJECTOR_COLLECT_AFTER_ALLOCATIONS", None)
    if tune is not None and threshold is not None:
        tune(threshold)
    elif tune is not None:
        tune()
    gc.callbacks.append(on_gc)
    started = time.thread_time_ns()
    try:
        asyncio.run(run())
    finally:
        elapsed = time.thread_time_ns() - started
        gc.callbacks.remove(on_gc)
        gc.unfreeze()
    bucket = {token: value for token, (value, _) in store.values.items()}
    return elapsed / len(messages) / 1000, gc_ns[0] / len(messages) / 1000, digest_of(bucket)


def digest_of(bucket: dict[str, bytes]) -> str:
    """SHA-256 over every session's token and value, in token order."""
    digest = hashlib.sha256()
    for token in sorted(bucket):
        digest.update(token.encode() + b"\0" + bucket[token] + b"\0")
    return digest.hexdigest()


def one_round(messages: list[Message], batch: int) -> tuple[dict[str, float], str]:
    """µs per event by step for one catch-up, and the digest of the bucket it left."""
    timers = Timers()
    # The core's validation and chain check, timed where `core.projection` calls them.
    timed = {"decode": "validate", "links": "chain"}
    originals = {name: getattr(projection, name) for name in timed}
    for name, step in timed.items():
        setattr(projection, name, timers.timed(step, originals[name]))
    try:
        bucket = catch_up(messages, batch, timers)
    finally:
        for name, original in originals.items():
            setattr(projection, name, original)
    ns = timers.ns
    ns["fold"] -= ns["validate"] + ns["chain"]
    per_event = {step: ns[step] / len(messages) / 1000 for step in STEPS}
    per_event["total"] = sum(per_event.values())
    return per_event, digest_of(bucket)


def print_steps(messages: list[Message], batch: int, rounds: int) -> str:
    """The per-step table of `rounds` catch-ups and their median; returns the digest."""
    columns = (*STEPS, "total")
    print("| round | " + " | ".join(columns) + " |")
    rows: list[dict[str, float]] = []
    digests: set[str] = set()
    for number in range(1, rounds + 1):
        row, digest = one_round(messages, batch)
        rows.append(row)
        digests.add(digest)
        print(f"| {number} | " + " | ".join(f"{row[c]:.1f}" for c in columns) + " |")
    median = {c: statistics.median(row[c] for row in rows) for c in columns}
    print("| median | " + " | ".join(f"{median[c]:.1f}" for c in columns) + " |")
    print("digest", " ".join(sorted(digests)))
    return min(digests)


def print_projector(messages: list[Message], batch: int, rounds: int) -> set[str]:
    """The real `Projector`'s CPU per event in `rounds` catch-ups; returns their digests."""
    print("| round | Projector.process, µs CPU per event | of which gc |")
    totals: list[float] = []
    digests: set[str] = set()
    for number in range(1, rounds + 1):
        total, collecting, digest = projector_round(messages, batch)
        totals.append(total)
        digests.add(digest)
        print(f"| {number} | {total:.1f} | {collecting:.1f} |")
    print(f"| median | {statistics.median(totals):.1f} | |")
    print("digest", " ".join(sorted(digests)))
    return digests


def main(argv: list[str] | None = None) -> int:
    """Build the log, run the rounds, print the table (and a cProfile with `--cprofile`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--commands", type=float, default=3.3, help="per session (100k: 3.3)")
    parser.add_argument("--long", type=int, default=0, help="commands of one long session")
    parser.add_argument("--batch", type=int, default=1000, help="messages per fetch")
    parser.add_argument(
        "--log", type=Path, help="keep the built log in this file and reuse it (per tree)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--projector", action="store_true", help="also time the real Projector, bucket in memory"
    )
    parser.add_argument("--projector-only", action="store_true", help="only the Projector")
    parser.add_argument("--cprofile", action="store_true", help="profile one more round")
    args = parser.parse_args(argv)
    if args.log is not None and args.log.exists():
        messages = pickle.loads(args.log.read_bytes())
    else:
        messages = build_log(args.sessions, args.commands, args.long)
        if args.log is not None:
            args.log.write_bytes(pickle.dumps(messages))
    mean_bytes = sum(len(data) for _, data, _ in messages) / len(messages)
    print(f"{len(messages)} events, mean {mean_bytes:.0f} bytes, batches of {args.batch}")
    digests: set[str] = set()
    if not args.projector_only:
        digests.add(print_steps(messages, args.batch, args.rounds))
    if args.projector or args.projector_only:
        digests |= print_projector(messages, args.batch, args.rounds)
    if len(digests) > 1:
        raise SystemExit(f"the buckets differ between rounds or ways: {sorted(digests)}")
    if args.cprofile:
        profiler = cProfile.Profile()
        profiler.enable()
        catch_up(messages, args.batch, Timers())
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

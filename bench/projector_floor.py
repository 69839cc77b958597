"""What the projector's required work costs on top of a raw fetch+ack, layer by layer, in one run.

    python -m bench.projector_floor [--sessions 10000] [--commands 18.8] [--passes 2]

Issue #19 asks the projector's catch-up for 1.0x of a raw `fetch(1000)` + ack at 10k
interleaved sessions, or, where that is missed, for a measurement of why the stage that holds
it cannot go lower. This fills one stream as `projector_10k` does (`bench.traffic`), then reads
all of it several times through the baseline's own loop (stock nats-py, a fresh durable,
`fetch(1000)`, one ack per message), each time adding one layer of work per message:

- `fetch_ack`: nothing (the baseline of `python -m bench`);
- `validate_msgspec`: the event parsed and validated by the msgspec mirror of the contract
  (`bench.msgspec_mirror`, the fastest validation measured here: `bench.decode_floor`);
- `validate_msgspec_chain`: that, and the hash chain checked against the session's previous
  link (SPEC §3.3.1), the canonical bytes taken from the stored body by cutting its `chain`
  member out (valid only for a body already canonical, which a real projector cannot assume:
  a lower bound), with nothing kept per session but the chain head;
- `core_in_memory`: the project's own per-event rules, `read_stored` and `project` (pydantic
  validation, the chain check, the fold), every record held in a dict: no bucket read or
  write, no encode. The garbage collector is tuned as in the projector's process;
- `validate_msgspec_chain_write`: `validate_msgspec_chain`, and each fetched batch's sessions
  written to the bucket before its acks, one compare-and-set write per touched session
  through the projector's own atomic batches (`bucket_layer`), revisions kept in memory;
- `validate_msgspec_chain_read_write`: that, with each session read first (one multi-key
  direct get per round), as a projector reads every session its cache does not hold.

Each layer's messages/s sit beside the baseline passes of the same run (the first and every
`--passes`-th read is the baseline again, so a drift of the host shows). The first two layers
do less than any projector may: they fold nothing and write nothing. When even they read
below 1.0x of fetch+ack, no single Python process that validates and chain-checks each
event reaches it. Results go to bench/results/projector_floor.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from bench import msgspec_mirror
from bench.catch_up import BatchWork, BatchWorkFactory, fetch_and_ack
from bench.common import embedded_server, emit, provision_server
from bench.traffic import Plan, append_all, generate
from contracts.state import SessionState
from contracts.stored import read_stored
from contracts.subjects import last_token
from core.projection import Record, Verdict, project
from services.adapters.bucket_scan import bucket_stream
from services.adapters.memory import PROJECTOR_COLLECT_AFTER_ALLOCATIONS, collect_less_often
from services.adapters.records import KvSessionStore
from services.adapters.settings import Settings

#: One message's work on top of the fetch and the ack: (body, subject, stream seq).
Work = Callable[[bytes, str, int], None]

#: `,"chain":"` then 64 hex digits and the closing quote: what the chain check cuts out.
_CHAIN_KEY = b',"chain":"'
_CHAIN_MEMBER = len(_CHAIN_KEY) + 65


def nothing() -> Work:
    """The baseline: no work per message."""

    def work(data: bytes, subject: str, seq: int) -> None:
        return None

    return work


def validate_msgspec() -> Work:
    """Parse and validate each event with the msgspec mirror."""

    def work(data: bytes, subject: str, seq: int) -> None:
        msgspec_mirror.decode(data)

    return work


def validate_msgspec_chain() -> Work:
    """The mirror's validation and the chain check on the canonical body, chain heads only."""
    heads: dict[str, str] = {}

    def work(data: bytes, subject: str, seq: int) -> None:
        envelope, _ = msgspec_mirror.decode(data)
        at = data.find(_CHAIN_KEY)
        hashed = data[:at] + data[at + _CHAIN_MEMBER :]
        token = last_token(subject)
        previous = heads.get(token, "")
        link = hashlib.sha256(previous.encode() + b"\n" + hashed).hexdigest()
        if link != envelope.chain:
            raise RuntimeError(f"chain broken at stream seq {seq}")
        heads[token] = link

    return work


def core_in_memory() -> Work:
    """The project's own rules per event (`read_stored`, `project`), records in a dict."""
    records: dict[str, Record] = {}

    def work(data: bytes, subject: str, seq: int) -> None:
        token = last_token(subject)
        record, judgement = project(records.get(token), read_stored(data, seq, subject))
        if judgement.verdict is not Verdict.APPLIED or not isinstance(record, SessionState):
            raise RuntimeError(f"stream seq {seq}: {judgement.verdict} {judgement.code}")
        records[token] = record

    return work


LAYERS: dict[str, Callable[[], Work]] = {
    "fetch_ack": nothing,
    "validate_msgspec": validate_msgspec,
    "validate_msgspec_chain": validate_msgspec_chain,
    "core_in_memory": core_in_memory,
}

#: The layers that also write to the bucket, and whether each reads before it writes.
BUCKET_LAYERS: dict[str, bool] = {
    "validate_msgspec_chain_write": False,
    "validate_msgspec_chain_read_write": True,
}

#: Sessions per read and write, as the projector takes a batch's touched sessions.
ROUND_SESSIONS = 256


def bucket_layer(bucket: str, read: bool) -> BatchWorkFactory:
    """The batch's part of a bucket layer (its messages are validated and chain-checked by
    `validate_msgspec_chain`): before the acks, one compare-and-set write of every session
    the batch touched (the session's last event of the batch as its value: smaller than any
    state a projector stores), in rounds of `ROUND_SESSIONS` through the projector's own
    `KvSessionStore.write_many` (one atomic batch a round). With `read`, each round first
    reads its sessions' values and revisions with `read_many` (one multi-key direct get), as
    a projector must for a session it does not hold; without, the revisions are kept in
    memory and nothing is read. The bucket is purged first, so every read starts from
    nothing, as a projector's catch-up from zero."""
    revisions: dict[str, int] = {}

    async def open_store(nc: Client) -> BatchWork:
        js = nc.jetstream()
        await js.purge_stream(bucket_stream(bucket))
        store = KvSessionStore(await js.key_value(bucket), nc, bucket)

        async def settle(messages: list[Msg]) -> None:
            touched = {last_token(message.subject): message.data for message in messages}
            tokens = list(touched)
            for start in range(0, len(tokens), ROUND_SESSIONS):
                chunk = tokens[start : start + ROUND_SESSIONS]
                if read:
                    found = await store.read_many(chunk)
                    expected = {token: found[token][1] for token in chunk}
                else:
                    expected = {token: revisions.get(token) for token in chunk}
                written = await store.write_many(
                    [(token, touched[token], expected[token]) for token in chunk]
                )
                if written is None:
                    raise RuntimeError("a stale revision in a bucket layer's own writes")
                revisions.update(zip(chunk, written, strict=True))

        return settle

    return open_store


def read_all(
    url: str,
    total: int,
    work: Work,
    durable: str,
    batch_work: BatchWorkFactory | None = None,
) -> tuple[float, float]:
    """Messages/s of the baseline's own loop (`bench.catch_up.fetch_and_ack`) over the whole
    stream on a fresh durable with `work` done on each message before its ack (and
    `batch_work` on each batch), and µs of this process's CPU per message."""

    def on_message(message: Msg) -> None:
        work(message.data, message.subject, message.metadata.sequence.stream)

    cpu = time.process_time()
    msgs_per_s = asyncio.run(fetch_and_ack(url, total, on_message, durable, batch_work))
    cpu = time.process_time() - cpu
    return msgs_per_s, round(cpu / max(1, total) * 1e6, 1)


def run(sessions: int, commands: float, passes: int) -> dict[str, Any]:
    """Fill the stream, then read it once per layer, the baseline between every `passes`."""
    plan = Plan(sessions=sessions, commands_per_session=commands)
    traffic = generate(plan)
    order = ["fetch_ack"]
    for layer in [name for name in [*LAYERS, *BUCKET_LAYERS] if name != "fetch_ack"]:
        order += [layer] * passes + ["fetch_ack"]
    reads: list[dict[str, Any]] = []
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        bucket = Settings(nats_url=server.url).kv_bucket  # the one provisioning made
        total = asyncio.run(append_all(server.url, traffic, plan))
        # The collector as the projector's process tunes it: with the default threshold,
        # collections walking every record held would be most of `core_in_memory`'s time.
        del traffic
        collect_less_often(PROJECTOR_COLLECT_AFTER_ALLOCATIONS)
        for index, layer in enumerate(order):
            durable = f"floor-{index}"
            if layer in BUCKET_LAYERS:
                batch_work = bucket_layer(bucket, BUCKET_LAYERS[layer])
                work = validate_msgspec_chain()
                msgs_per_s, cpu_us = read_all(server.url, total, work, durable, batch_work)
            else:
                msgs_per_s, cpu_us = read_all(server.url, total, LAYERS[layer](), durable)
            reads.append({"layer": layer, "msgs_per_s": msgs_per_s, "cpu_us_per_msg": cpu_us})
            print(f"{layer}: {msgs_per_s:,.0f} msgs/s, {cpu_us} µs CPU per message", flush=True)
    baseline = [each["msgs_per_s"] for each in reads if each["layer"] == "fetch_ack"]
    best = {
        layer: max(each["msgs_per_s"] for each in reads if each["layer"] == layer)
        for layer in [*LAYERS, *BUCKET_LAYERS]
    }
    return {
        "sessions": sessions,
        "commands_per_session": commands,
        "events": total,
        "reads": reads,
        "best_msgs_per_s": best,
        "ratio_of_best_baseline": {
            layer: round(value / max(baseline), 3) for layer, value in best.items()
        },
    }


def main() -> None:
    """Parse the arguments, run, write bench/results/projector_floor.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--commands", type=float, default=18.8)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    emit("projector_floor", run(args.sessions, args.commands, args.passes), args.output)


if __name__ == "__main__":
    main()

"""Where one sequential inject's wall time goes, segment by segment, client to client.

`python -m bench.sequential_trace [--commands N] [--output FILE]` starts an embedded server
and one gateway process, sends N injects of one session one after another (as
`sequential_latency` does, beside its two baselines) and prints the p50 of each segment of
a command's life in µs: the client's request reaching the gateway's callback, the parsing
and checks, the session lock, `decide`, the hand-over to the group committer, the atomic
batch (publish to PubAck), the cached session's fold, the reply, and the reply's way back
to the client.

The gateway runs as `python -m bench.sequential_trace --gateway FILE`: the same
`reminders serve gateway`, with a `perf_counter` mark taken at the entry and exit of a few of
its functions (wrapped here, in this process only; the service's code is not changed) and
written to FILE at exit. `perf_counter` is the system's monotonic clock, so the client's
marks and the gateway's compare. The wrappers cost a few µs per mark: the segments are an
account of the latency, not a replacement for it (`sequential_latency` measures that with
nothing wrapped).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from bench.common import UNLIMITED_ENV, embedded_server, percentile, provision_server
from bench.traffic import inject_payload
from bench.write_path import gateway_sequential, null_gateway, raw_sequential, warm_up
from cli.supervisor import ServiceProcess, spawn_service, stop_all, wait_ready
from client.sdk import ReminderClient
from services.adapters.settings import Settings

#: (segment, from mark, to mark), in the order a command passes them.
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("request_to_gateway", "sent", "dispatch0"),
    ("dispatch_to_serve", "dispatch0", "serve0"),
    ("serve_to_parse", "serve0", "parse0"),
    ("parse_and_validate", "parse0", "parse1"),
    ("checks_and_lock", "parse1", "run0"),
    ("run_to_load", "run0", "load0"),
    ("load_cached", "load0", "load1"),
    ("load_to_decide", "load1", "decide0"),
    ("decide", "decide0", "decide1"),
    ("decide_to_publish", "decide1", "publish0"),
    ("atomic_batch", "publish0", "publish1"),
    ("ack_to_fold", "publish1", "remember0"),
    ("fold_cached_session", "remember0", "remember1"),
    ("fold_to_reply", "remember1", "respond0"),
    ("reply_written", "respond0", "respond1"),
    ("reply_to_client", "respond1", "received"),
)


def _install_marks(marks: list[tuple[str, float]]) -> None:
    """Wrap the gateway's functions on a command's path with entry and exit marks."""
    import nats.aio.msg as nats_msg

    import services.gateway.command as command
    import services.gateway.committer as committer
    import services.gateway.listener as listener
    import services.gateway.service as service

    clock = time.perf_counter

    def wrap(owner: Any, name: str, tag: str) -> None:
        inner = getattr(owner, name)
        if asyncio.iscoroutinefunction(inner):

            @functools.wraps(inner)
            async def marked_async(*args: Any, **kwargs: Any) -> Any:
                marks.append((tag + "0", clock()))
                try:
                    return await inner(*args, **kwargs)
                finally:
                    marks.append((tag + "1", clock()))

            setattr(owner, name, marked_async)
            return

        @functools.wraps(inner)
        def marked(*args: Any, **kwargs: Any) -> Any:
            marks.append((tag + "0", clock()))
            try:
                return inner(*args, **kwargs)
            finally:
                marks.append((tag + "1", clock()))

        setattr(owner, name, marked)

    wrap(listener.CommandListener, "_dispatch", "dispatch")
    wrap(listener.CommandListener, "_serve", "serve")
    wrap(service, "parse_command", "parse")
    wrap(service, "run_command", "run")
    wrap(service.NatsCommandPorts, "load", "load")
    wrap(service.NatsCommandPorts, "remember", "remember")
    wrap(command, "decide", "decide")
    wrap(committer, "publish_atomic", "publish")
    wrap(nats_msg.Msg, "respond", "respond")


def _serve_gateway(output: str) -> None:
    """`reminders serve gateway` with the marks, written to `output` at exit."""
    marks: list[tuple[str, float]] = []
    _install_marks(marks)
    atexit.register(lambda: Path(output).write_text(json.dumps(marks), encoding="utf-8"))
    from cli.main import app

    app(["serve", "gateway"])


def _spawn_gateway(url: str, marks_path: Path, log_path: Path) -> ServiceProcess:
    argv = [sys.executable, "-m", "bench.sequential_trace", "--gateway", str(marks_path)]
    return spawn_service(
        "gateway",
        Settings(nats_url=url),
        log_path,
        UNLIMITED_ENV,
        argv=argv,
    )


async def _injects(url: str, count: int) -> list[tuple[float, float]]:
    nc = await nats.connect(url)
    client = ReminderClient(nc, timeout_s=30)
    sent: list[tuple[float, float]] = []
    for n in range(count):
        started = time.perf_counter()
        reply = await client.request("inject", inject_payload("traced", n))
        sent.append((started, time.perf_counter()))
        if not reply.get("ok"):
            raise RuntimeError(f"inject {n} failed: {reply.get('error', {}).get('code')}")
    await nc.close()
    return sent


def _by_command(marks: list[tuple[str, float]], count: int) -> list[dict[str, float]]:
    """The last `count` commands' marks (each command's first of each tag)."""
    commands: list[dict[str, float]] = []
    for tag, at in marks:
        if tag == "dispatch0":
            commands.append({})
        if commands:
            commands[-1].setdefault(tag, at)
    return commands[-count:]


def trace(count: int) -> dict[str, Any]:
    """p50 µs of each segment, and of the whole, over `count` sequential injects; beside
    them, from the same server, one single-message atomic batch after another and the
    request and reply hops alone (`bench.null_gateway --echo`)."""
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        asyncio.run(provision_server(server.url))
        raw = asyncio.run(raw_sequential(server.url, count))
        with null_gateway(server.url, "--echo"):
            hops, _ = asyncio.run(gateway_sequential(server.url, count, "echo"))
        marks_path = Path(work) / "marks.json"
        gateway = _spawn_gateway(server.url, marks_path, Path(work) / "gateway.log")
        try:
            wait_ready([gateway], timeout_s=60)
            asyncio.run(warm_up(server.url))
            sent = asyncio.run(_injects(server.url, count))
        finally:
            stop_all([gateway])
        marks = json.loads(marks_path.read_text(encoding="utf-8"))
    commands = _by_command([(str(tag), float(at)) for tag, at in marks], count)
    for command, (started, received) in zip(commands, sent, strict=True):
        command["sent"], command["received"] = started, received
    return {
        "commands": count,
        "segments_p50_us": {
            name: _p50_us(commands, _between(start, end)) for name, start, end in SEGMENTS
        },
        "total_p50_us": _p50_us(commands, lambda c: c["received"] - c["sent"]),
        "raw_atomic_batch_p50_us": round(percentile(raw, 0.5) * 1000, 1),
        "echo_round_trip_p50_us": round(percentile(hops, 0.5) * 1000, 1),
    }


def _between(start: str, end: str) -> Callable[[dict[str, float]], float]:
    return lambda command: command[end] - command[start]


def _p50_us(commands: list[dict[str, float]], span: Callable[[dict[str, float]], float]) -> float:
    return round(statistics.median(span(command) for command in commands) * 1e6, 1)


def main() -> None:
    """Run the trace and print it as JSON (also to `--output`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=500)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--gateway", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gateway:
        _serve_gateway(args.gateway)
        return
    result = trace(args.commands)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

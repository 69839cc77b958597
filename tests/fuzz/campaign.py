"""One fuzz campaign: build N inputs, send them over one connection (bounded in flight), check.

Checks for every input (issue #10):
- a reply comes within the request timeout, except for a JSON-RPC notification (no `id`),
  which must get none (sent with a reply subject that a wildcard subscription watches);
- the reply has the documented shape: `{"ok": true, ..., "session_seq": N}` validated against
  the op's `reply.*.json` schemas, or `{"ok": false, "error": {"code", "message", "details"}}`
  with a code of SPEC §2.2; JSON-RPC replies are JSON-RPC 2.0 responses;
- no "Traceback" in a reply (the service logs are checked by the test);
- a rejected input appends nothing: each input has its own sessions, whose subjects must be
  empty after a rejection; at the end every subject in the stream must belong to an input
  that was accepted (or a notification, whose outcome is not told);
- render scenarios inject fuzzed bodies into a session and render it in one format: the
  envelope has exactly one `context-directives` opening and closing tag (or only well-formed
  `system-reminder` blocks), and every directive body is the injected body escaped.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from core.canonical import session_token
from services.adapters.session_read import last_session_seq
from tests.fuzz.checks import (
    Scenario,
    Tally,
    check_command_reply,
    check_envelope,
    check_rpc_reply,
    is_int,
    orjson_or_none,
)
from tests.fuzz.inputs import (
    ABSENT,
    MARKUP,
    OPS,
    RPC_METHODS,
    UNKNOWN_OPS,
    FuzzInput,
    Mutator,
    Pools,
    camel,
    encode,
    raw_variants,
    sessions_in,
)

QUERY_TIMEOUT_MS = 300
"""Valid `timeout_ms` values above this are lowered to it, so no query waits a minute."""
RENDER_TURN = 10
IN_FLIGHT = 64


class Builder:
    """Turns pools of schema examples into a campaign's inputs, reproducibly from a seed."""

    def __init__(self, pools: Pools, seed_value: int, run: str) -> None:
        self.rng = random.Random(seed_value)
        self.pools = pools
        self.mutator = Mutator(self.rng, pools)
        self.run = run

    def prefix(self, n: int) -> str:
        return f"fz{self.run}-{n:06d}-"

    def command(self, n: int) -> FuzzInput:
        rng, prefix = self.rng, self.prefix(n)
        op = rng.choice(OPS)
        value: Any = copy.deepcopy(rng.choice(self.pools.commands[op]))
        value["session_id"] = prefix + "s"
        if "child_session_id" in value:
            value["child_session_id"] = prefix + "c"
        if op == "inject" and rng.random() < 0.5:
            value["reminder"]["body"] = rng.choice(self.pools.bodies)
        roll = rng.random()
        label, subject = op, f"reminders.v1.{op}"
        if roll < 0.04:
            label, subject = "unknown-op", f"reminders.v1.{rng.choice(UNKNOWN_OPS)}"
        if roll < 0.35:
            data = encode(self._cap_waits(op, value))
        elif roll < 0.9:
            value = self.mutator.mutate(value, prefix, rng.randint(1, 3))
            data = encode(self._cap_waits(op, value))
        else:
            data = raw_variants(rng, value)
        return FuzzInput(
            label=label,
            subject=subject,
            data=data,
            sessions=sessions_in(value, prefix),
            timeout_s=30.0 if op == "forget" else 10.0,
        )

    @staticmethod
    def _cap_waits(op: str, value: Any) -> Any:
        if op in ("state", "pending_injections") and isinstance(value, dict):
            wait = value.get("timeout_ms")
            if is_int(wait) and QUERY_TIMEOUT_MS < wait <= 60_000:
                value["timeout_ms"] = QUERY_TIMEOUT_MS
        return value

    def rpc(self, n: int) -> FuzzInput:
        rng, prefix = self.rng, self.prefix(n)
        sid = prefix + "s"
        method: Any = rng.choice([*RPC_METHODS, *RPC_METHODS, "session/explode", "", 5])
        spec: dict[str, Any] = copy.deepcopy(rng.choice(self.pools.specs))
        if rng.random() < 0.6:
            spec["body"] = rng.choice(self.pools.bodies)
        if rng.random() < 0.8:
            spec.pop("source", None)
        as_camel = rng.random() < 0.7
        fields = {(camel(k) if as_camel else k): v for k, v in spec.items()}
        params: Any
        if method == "session/remind":
            params = {"sessionId": sid}
            if rng.random() < 0.5:
                params.update(fields)
            else:
                params["reminder"] = fields
            if rng.random() < 0.5:
                params["mode"] = rng.choice(["interrupt", "steer", "queue", "finish_step", "x"])
        elif method == "session/revoke_reminder":
            params = {"sessionId": sid, "reminderId": rng.choice(["ghost", "x", ""])}
        elif method == "notifications/reminder":
            params = {"reminder": fields, "_meta": {"sessionId": sid}}
        elif method == "notifications/message":
            params = {"_meta": {"sessionId": sid, "harn": {"reminder": fields}}}
        else:
            params = {"sessionId": sid}
        message: Any = {"jsonrpc": "2.0", "method": method, "params": params}
        rpc_id = rng.choice([ABSENT, ABSENT, n, f"id-{n}", None, 2**53 - 1, -1, 0, ""])
        if rpc_id is not ABSENT:
            message["id"] = rpc_id
        roll = rng.random()
        if roll < 0.45:
            data = encode(message)
        elif roll < 0.93:
            message = self.mutator.mutate(message, prefix, rng.randint(1, 2))
            data = encode(message)
        elif roll < 0.97:
            data = raw_variants(rng, message)
        else:
            message = [message, {"jsonrpc": "2.0", "id": n, "method": "session/explode"}]
            data = encode(message)
        return self._rpc_input(data, sessions_in(message, prefix))

    @staticmethod
    def _rpc_input(data: bytes, sessions: set[str]) -> FuzzInput:
        try:
            parsed: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = ABSENT
        notification = (
            isinstance(parsed, dict)
            and parsed.get("jsonrpc") == "2.0"
            and "method" in parsed
            and "id" not in parsed
        )
        is_request = (
            isinstance(parsed, dict) and parsed.get("jsonrpc") == "2.0" and ("method" in parsed)
        )
        method = parsed.get("method") if isinstance(parsed, dict) else None
        return FuzzInput(
            label=f"rpc:{method}"
            if isinstance(method, str) and method in RPC_METHODS
            else "rpc:other",
            subject="reminders.v1.rpc",
            data=data,
            sessions=sessions,
            expect_reply=not notification,
            rpc=True,
            rpc_id=parsed["id"] if is_request and "id" in parsed else ABSENT,
            rpc_method=method,
        )

    def scenario(self, n: int) -> Scenario:
        rng = self.rng
        session = self.prefix(n) + "r"
        injects = []
        for index in range(rng.randint(1, 5)):
            spec: dict[str, Any] = copy.deepcopy(rng.choice(self.pools.specs))
            spec["body"] = rng.choice(self.pools.bodies)
            if rng.random() < 0.5:
                spec["body"] += rng.choice(MARKUP) + rng.choice(self.pools.bodies)
            spec["id"] = f"r{index}"
            spec.pop("source", None)
            if is_int(spec.get("fired_at_turn")):
                spec["fired_at_turn"] = spec["fired_at_turn"] % (RENDER_TURN + 3)
            injects.append({"session_id": session, "reminder": spec})
        render: dict[str, Any] = {"session_id": session, "turn": RENDER_TURN}
        fmt = rng.choice(["context-directives", "system-reminder", None])
        if fmt is not None:
            render["format"] = fmt
        if rng.random() < 0.3:
            render["user_text"] = rng.choice(self.pools.bodies)
        return Scenario(session, injects, render, check_state=rng.random() < 0.3)

    def build(self, total: int) -> tuple[list[FuzzInput], list[Scenario]]:
        """About 60 % single commands, 20 % JSON-RPC, 20 % in render scenarios."""
        inputs: list[FuzzInput] = []
        scenarios: list[Scenario] = []
        in_scenarios = 0
        n = 0
        while len(inputs) + in_scenarios < total:
            roll = self.rng.random()
            if roll < 0.2 and total - len(inputs) - in_scenarios >= 7:
                scenario = self.scenario(n)
                scenarios.append(scenario)
                in_scenarios += scenario.size()
            elif roll < 0.4:
                inputs.append(self.rpc(n))
            else:
                inputs.append(self.command(n))
            n += 1
        return inputs, scenarios


# --- sending ------------------------------------------------------------------------------


@dataclass
class Campaign:
    """Sends a campaign's inputs against a running gateway and checks every reply."""

    nc: Client
    stream: str
    tally: Tally = field(default_factory=Tally)
    notification_replies: list[Msg] = field(default_factory=list)

    async def _request(self, label: str, subject: str, data: bytes, timeout: float) -> bytes | None:
        try:
            reply = await self.nc.request(subject, data, timeout=timeout)
        except (NatsTimeoutError, NoRespondersError) as exc:
            self.tally.fail(label, data, f"a reply within {timeout}s", type(exc).__name__)
            self.tally.by_outcome["<no reply>"] += 1
            self.tally.allowed_sessions |= sessions_in(orjson_or_none(data), "fz")
            return None
        return bytes(reply.data)

    async def _appended_nothing(self, label: str, data: bytes, sessions: set[str]) -> None:
        for session in sorted(sessions):
            last = await last_session_seq(self.nc, self.stream, session)
            if last != 0:
                self.tally.fail(
                    label, data, f"nothing appended to {session[:60]!r}", f"last stream seq {last}"
                )

    async def send(self, inp: FuzzInput, notify_inbox: str) -> None:
        self.tally.by_op[inp.label] += 1
        if not inp.expect_reply:
            await self.nc.publish(inp.subject, inp.data, reply=notify_inbox)
            self.tally.by_outcome["rpc:notification"] += 1
            self.tally.allowed_sessions |= inp.sessions  # its outcome is not told
            return
        body = await self._request(inp.label, inp.subject, inp.data, inp.timeout_s)
        if body is None:
            return
        check = check_rpc_reply if inp.rpc else check_command_reply
        if check(self.tally, inp, body):
            await self._appended_nothing(inp.label, inp.data, inp.sessions)

    async def play(self, scenario: Scenario) -> None:
        bodies: dict[str, str] = {}
        for command in scenario.injects:
            data = encode(command)
            self.tally.by_op["inject"] += 1
            before = await last_session_seq(self.nc, self.stream, scenario.session)
            body = await self._request("inject", "reminders.v1.inject", data, 10.0)
            if body is None:
                continue
            inp = FuzzInput("inject", "reminders.v1.inject", data, {scenario.session})
            if check_command_reply(self.tally, inp, body):
                after = await last_session_seq(self.nc, self.stream, scenario.session)
                if after != before:
                    self.tally.fail("inject", data, f"last stream seq still {before}", str(after))
            else:
                bodies[command["reminder"]["id"]] = command["reminder"]["body"]
        data = encode(scenario.render)
        self.tally.by_op["render"] += 1
        body = await self._request("render", "reminders.v1.render", data, 10.0)
        if body is None:
            return
        inp = FuzzInput("render", "reminders.v1.render", data, {scenario.session})
        if check_command_reply(self.tally, inp, body):
            self.tally.fail("render", data, "a render of a live session succeeds", repr(body))
            return
        reply = orjson.loads(body)
        check_envelope(self.tally, scenario, reply, bodies)
        if scenario.check_state:
            await self._state_matches(scenario, reply)

    async def _state_matches(self, scenario: Scenario, reply: dict[str, Any]) -> None:
        """The projector's state holds the delivered envelope (its text, exactly)."""
        query = {
            "session_id": scenario.session,
            "min_seq": reply["session_seq"],
            "timeout_ms": 5000,
        }
        data = encode(query)
        self.tally.by_op["state"] += 1
        body = await self._request("state", "reminders.v1.state", data, 15.0)
        if body is None:
            return
        inp = FuzzInput("state", "reminders.v1.state", data, {scenario.session})
        if check_command_reply(self.tally, inp, body):
            self.tally.fail("state", data, "the state of a live session", repr(body))
            return
        state = orjson.loads(body)
        delivered = state["state"].get("delivered") or [{}]
        envelope = reply.get("envelope")
        if state["stale"] or (
            envelope is not None and delivered[-1].get("text") != envelope["text"]
        ):
            self.tally.fail(
                "state",
                data,
                "a fresh state whose last delivered text is the envelope",
                repr(state)[:400],
            )

    async def run(self, inputs: list[FuzzInput], scenarios: list[Scenario]) -> float:
        """Send everything (at most IN_FLIGHT at once); returns the seconds it took."""
        slots = asyncio.Semaphore(IN_FLIGHT)
        inbox = f"_INBOX.fuzz-{uuid.uuid4().hex}"

        async def on_reply(msg: Msg) -> None:
            self.notification_replies.append(msg)

        subscription = await self.nc.subscribe(f"{inbox}.>", cb=on_reply)

        async def bounded(job: Any) -> None:
            async with slots:
                await job

        started = time.perf_counter()
        jobs = [self.send(inp, f"{inbox}.{n}") for n, inp in enumerate(inputs)]
        jobs += [self.play(scenario) for scenario in scenarios]
        random.Random(len(jobs)).shuffle(jobs)
        await asyncio.gather(*(bounded(job) for job in jobs))
        await asyncio.sleep(1.0)  # a late reply to a notification would land by now
        await subscription.unsubscribe()
        for msg in self.notification_replies:
            self.tally.fail(
                "rpc",
                b"<a notification>",
                "no response to a notification",
                msg.data.decode("utf-8", "replace"),
            )
        return time.perf_counter() - started

    async def census(self) -> None:
        """Every session in the stream belongs to an accepted input (or a notification)."""
        info = await self.nc.jetstream().stream_info(
            self.stream, subjects_filter="transcript.reminder.>"
        )
        subjects = info.state.subjects or {}
        allowed = {session_token(session) for session in self.tally.allowed_sessions}
        for subject in subjects:
            token = subject.split(".")[-1]
            if token not in allowed:
                self.tally.fail(
                    "census", subject, "events only for accepted inputs", f"{subject} holds events"
                )

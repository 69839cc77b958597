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
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from core.canonical import session_token
from services.adapters.session_read import last_session_seq
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
    schema,
    sessions_in,
)

#: The error codes SPEC §2.2 lists (rejections and the other codes).
SPEC_CODES = frozenset(
    {
        "HARN-RMD-001",
        "HARN-RMD-002",
        "HARN-RMD-004",
        "HARN-RMD-005",
        "HARN-RMD-006",
        "HARN-RMD-007",
        "HARN-RMD-008",
        "conflict",
        "already_delivered",
        "unknown_reminder_id",
        "unknown_mute_id",
        "stale_turn",
        "invalid_request",
        "unavailable",
        "too_large",
        "too_many",
        "rate_limited",
    }
)
REPLY_SCHEMAS: dict[str, list[str]] = {
    "inject": ["InjectedReply", "QueuedReply"],
    "clear": ["ClearReply"],
    "checkpoint": ["CheckpointReply"],
    "revoke": ["RevokeReply"],
    "render": ["RenderReply"],
    "end_turn": ["EndTurnReply", "AlreadyAppliedReply"],
    "compact": ["CompactReply"],
    "handoff": ["HandoffReply", "AlreadyAppliedReply"],
    "inherit": ["InheritReply", "AlreadyAppliedReply"],
    "mute": ["MuteReply"],
    "unmute": ["UnmuteReply"],
    "sanitize": ["SanitizeReply"],
}
QUERY_TIMEOUT_MS = 300
"""Valid `timeout_ms` values above this are lowered to it, so no query waits a minute."""
RENDER_TURN = 10
IN_FLIGHT = 64


def _validators() -> dict[str, list[Draft202012Validator]]:
    return {
        op: [Draft202012Validator(schema(f"reply.{name}")) for name in names]
        for op, names in REPLY_SCHEMAS.items()
    }


VALIDATORS = _validators()
ERROR_VALIDATOR = Draft202012Validator(schema("error_reply"))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def escape(body: str) -> str:
    """SPEC §5.1 escaping."""
    return body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def orjson_or_none(data: bytes) -> Any:
    """The JSON value of some bytes, or None."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def short(data: bytes | str, limit: int = 300) -> str:
    text = repr(data)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(data)} long)"


@dataclass
class Scenario:
    """Fuzzed bodies injected into one session, then one render (and maybe a state query)."""

    session: str
    injects: list[dict[str, Any]]
    render: dict[str, Any]
    check_state: bool

    def size(self) -> int:
        return len(self.injects) + 1 + int(self.check_state)


@dataclass
class Tally:
    """What a campaign sent and saw."""

    by_op: Counter[str] = field(default_factory=Counter)
    by_outcome: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    allowed_sessions: set[str] = field(default_factory=set)
    envelopes: Counter[str] = field(default_factory=Counter)

    @property
    def sent(self) -> int:
        return sum(self.by_op.values())

    def fail(self, label: str, data: bytes | str, expected: str, actual: str) -> None:
        self.failures.append(
            f"[{label}] input={short(data)} expected: {expected}; actual: {short(actual, 400)}"
        )


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


# --- checks -------------------------------------------------------------------------------


def check_command_reply(tally: Tally, inp: FuzzInput, body: bytes) -> bool:
    """Shape checks of a `reminders.v1.<op>` reply; True when the input was rejected."""
    op = inp.label
    if b"Traceback" in body:
        tally.fail(op, inp.data, "no traceback in the reply", body.decode("utf-8", "replace"))
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        tally.fail(op, inp.data, "a JSON reply", repr(body))
        tally.by_outcome["<not json>"] += 1
        return False
    if not isinstance(reply, dict) or reply.get("ok") not in (True, False):
        tally.fail(op, inp.data, "a reply object with ok true/false", repr(reply))
        tally.by_outcome["<bad shape>"] += 1
        return False
    if reply["ok"] is True:
        tally.by_outcome["ok"] += 1
        if op == "unknown-op":
            tally.fail(op, inp.data, "invalid_request for an unknown op", repr(reply))
        elif op in VALIDATORS:
            if not is_int(reply.get("session_seq")) or reply["session_seq"] < 0:
                tally.fail(op, inp.data, "session_seq: int >= 0", repr(reply))
            if not any(v.is_valid(reply) for v in VALIDATORS[op]):
                names = REPLY_SCHEMAS[op]
                tally.fail(op, inp.data, f"a reply valid against {names}", repr(reply))
        elif op == "state" and not (
            isinstance(reply.get("state"), dict) and isinstance(reply.get("stale"), bool)
        ):
            tally.fail(op, inp.data, "{ok, state, stale}", repr(reply))
        elif op == "pending_injections" and not (
            is_int(reply.get("pendingCount")) and isinstance(reply.get("injections"), list)
        ):
            tally.fail(op, inp.data, "{ok, pendingCount, injections}", repr(reply))
        tally.allowed_sessions |= inp.sessions
        return False
    error = reply.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    tally.by_outcome[str(code)] += 1
    if set(reply) != {"ok", "error"} or not ERROR_VALIDATOR.is_valid(reply):
        tally.fail(op, inp.data, "{ok: false, error: {code, message, details}}", repr(reply))
    elif not isinstance(error, dict) or set(error) != {"code", "message", "details"}:
        tally.fail(op, inp.data, "error with exactly code, message, details", repr(reply))
    if code not in SPEC_CODES:
        tally.fail(op, inp.data, "a code of SPEC §2.2", repr(reply))
    if op == "unknown-op" and code != "invalid_request":
        tally.fail(op, inp.data, "invalid_request for an unknown op", repr(reply))
    if code == "conflict" or (code == "unavailable" and op != "forget"):
        tally.fail(op, inp.data, "a decision (one session per input, healthy server)", repr(reply))
    return True


def check_rpc_reply(tally: Tally, inp: FuzzInput, body: bytes) -> bool:
    """JSON-RPC 2.0 response checks; True when the input was refused (an error response)."""
    label = inp.label
    if b"Traceback" in body:
        tally.fail(label, inp.data, "no traceback in the response", body.decode("utf-8", "replace"))
    try:
        response = orjson.loads(body)
    except orjson.JSONDecodeError:
        tally.fail(label, inp.data, "a JSON response", repr(body))
        tally.by_outcome["rpc:<not json>"] += 1
        return False
    responses = response if isinstance(response, list) and response else [response]
    refused = False
    for item in responses:
        if not isinstance(item, dict) or item.get("jsonrpc") != "2.0" or "id" not in item:
            tally.fail(label, inp.data, "a JSON-RPC 2.0 response", repr(response))
            continue
        has_result, has_error = "result" in item, "error" in item
        if has_result == has_error:
            tally.fail(label, inp.data, "exactly one of result and error", repr(item))
            continue
        if inp.rpc_id is not ABSENT and not isinstance(response, list):
            if item["id"] != inp.rpc_id or type(item["id"]) is not type(inp.rpc_id):
                tally.fail(label, inp.data, f"id {inp.rpc_id!r} echoed", repr(item))
        elif item["id"] is not None and not isinstance(response, list):
            tally.fail(label, inp.data, "id null for an invalid request", repr(item))
        if has_error:
            refused = True
            error = item["error"]
            if not (
                isinstance(error, dict)
                and is_int(error.get("code"))
                and isinstance(error.get("message"), str)
                and set(error) <= {"code", "message", "data"}
            ):
                tally.fail(label, inp.data, "error {code: int, message: str, data?}", repr(item))
                continue
            data = error.get("data")
            if isinstance(data, dict) and "code" in data and data["code"] not in SPEC_CODES:
                tally.fail(label, inp.data, "data.code of SPEC §2.2", repr(item))
            if error["code"] == -32000:
                tally.fail(label, inp.data, "no server error on a healthy server", repr(item))
            tally.by_outcome[f"rpc:{error['code']}"] += 1
        else:
            tally.by_outcome["rpc:result"] += 1
            result = item["result"]
            if inp.rpc_method == "session/remind" and not (
                isinstance(result, dict) and isinstance(result.get("reminderId"), str)
            ):
                tally.fail(label, inp.data, "result {reminderId}", repr(item))
            if str(inp.rpc_method).startswith("notifications/") and result != {}:
                tally.fail(
                    label, inp.data, "result {} for a notification sent with an id", repr(item)
                )
    if not refused:
        tally.allowed_sessions |= inp.sessions
    return refused


_CD_OPEN = re.compile(r'<context-directives speaker="(?:harness|person)"(?: nonce="[^"<>&]*")?>')
_CD_BLOCK = re.compile(
    r'\n<directive authority="(?:contract|corrective|advisory)"(?: ttl_turns="[0-9]+")?>'
    r"\n([^<>]*)\n</directive>"
)
_SR_BLOCK = r'<system-reminder key="[A-Za-z0-9._-]+">\n([^<>]*)\n</system-reminder>'
_SR_ALL = re.compile(rf"{_SR_BLOCK}(?:\n\n{_SR_BLOCK})*")


def body_matches(rendered: str, body: str) -> bool:
    """The block holds the body escaped (SPEC §2.1 trims at ingest; the code may not)."""
    return rendered in (escape(body), escape(body.strip()))


def check_envelope(
    tally: Tally, scenario: Scenario, reply: dict[str, Any], bodies: dict[str, str]
) -> None:
    """No rendered envelope can be closed or forged by a body (SPEC §5.1, §5.4)."""
    envelope = reply.get("envelope")
    label = "render"
    if envelope is None:
        tally.envelopes["null"] += 1
        return
    text, ids, fmt = envelope["text"], envelope["directive_ids"], envelope["format"]
    data = orjson.dumps({"injected": bodies, "render": scenario.render})
    tally.envelopes[fmt] += 1
    if not set(ids) <= set(bodies):
        tally.fail(label, data, f"directive ids among the injected {sorted(bodies)}", repr(ids))
        return
    if fmt == "context-directives":
        contents = _CD_BLOCK.findall(text)
        opening = _CD_OPEN.match(text)
        well_formed = (
            opening is not None
            and text.count("<context-directives") == 1
            and text.count("</context-directives>") == 1
            and text.endswith("\n</context-directives>")
            and text.count("</directive>") == len(ids) == len(contents)
            and text.count("<directive ") == len(ids)
        )
    else:
        match = _SR_ALL.fullmatch(text)
        contents = re.findall(_SR_BLOCK, text)
        well_formed = (
            match is not None
            and text.count("<system-reminder") == len(ids) == len(contents)
            and text.count("</system-reminder>") == len(ids)
        )
        for rid in ids:
            if "<system-reminder" in bodies[rid] or "</system-reminder>" in bodies[rid]:
                tally.fail(label, data, f"{rid} dropped as spoofed_tag", text)
    if not well_formed:
        tally.fail(label, data, f"one well-formed {fmt} envelope", text)
        return
    for rid, rendered in zip(ids, contents, strict=True):
        if not body_matches(rendered, bodies[rid]) or re.search(r"&(?!amp;|lt;|gt;)", rendered):
            tally.fail(label, data, f"{rid}'s body escaped: {escape(bodies[rid])!r}", rendered)
    inline = reply.get("inline")
    user_text = scenario.render.get("user_text")
    if isinstance(user_text, str) and isinstance(inline, dict):
        start, end = inline["range"]
        units = inline["text"].encode("utf-16-le")
        if units[start * 2 : end * 2].decode("utf-16-le") != text:
            tally.fail(label, data, "inline.range to slice the envelope (UTF-16)", repr(inline))


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

"""The checks a fuzz campaign makes of every reply (`campaign.py` sends the inputs): a
command's reply against its op's documented schemas or as a coded error of SPEC §2.2, a
JSON-RPC reply as a JSON-RPC 2.0 response, and a rendered envelope's well-formedness with
every directive body the injected body escaped; and the tally of what was seen."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
from jsonschema import Draft202012Validator

from tests.fuzz.inputs import ABSENT, FuzzInput, schema

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

"""Fuzz inputs: schema examples from hypothesis-jsonschema, then cheap seeded mutations.

Drawing one example from a JSON Schema with hypothesis-jsonschema costs 15–50 ms here, so a
campaign draws a *pool* of schema-valid examples per op (the property-based part, seeded
through `hypothesis.seed`), and derives its inputs from the pool with a seeded mutation walk
(`random.Random`): wrong types, unknown keys, dropped keys, huge strings, deep nesting,
control characters, camelCase/snake_case swaps, numbers at the bounds, markup in bodies,
and raw bytes that are not JSON or not UTF-8. The same seed gives the same inputs.

Every input names its own session (`fz-<run>-<n>-…`) so that "a rejected input appends
nothing" can be checked on the session's subject while hundreds of inputs are in flight.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

import contracts

SCHEMA_DIR = Path(contracts.__file__).parent / "schemas"
#: Every command op that has a schema (`command.<op>.json`), i.e. every op the gateway serves.
OPS = sorted(path.stem.split(".", 1)[1] for path in SCHEMA_DIR.glob("command.*.json"))
UNKNOWN_OPS = ["evaluate", "INJECT", "inject_", "Render", "rpc2", "v1", "-", "0"]
RPC_METHODS = [
    "session/remind",
    "session/pending_injections",
    "session/revoke_reminder",
    "notifications/reminder",
    "notifications/message",
]
SESSION_KEYS = frozenset({"session_id", "child_session_id", "sessionId"})
ABSENT: Any = object()
"""Marks a JSON-RPC message sent without an `id` (a notification)."""

MARKUP = [
    "</directive>",
    "</context-directives>",
    '<context-directives speaker="person">',
    '<directive authority="contract">',
    "<system-reminder>",
    '<system-reminder key="x">',
    "</system-reminder>",
    "&amp;",
    "&lt;/directive&gt;",
    "&",
    "<",
    ">",
    "<![CDATA[",
    "]]>",
    "<!--",
    "-->",
    "\n</directive>\n",
    "\n</context-directives>\n<context-directives>\n",
    "<<>>",
    "&#60;/directive&#62;",
]
CONTROL = ["\x00", "\x07", "\x08", "\x1b[31m", "\x7f", "\x85", "\u2028", "\ufeff", "\r\n", "\t"]
UNICODE = ["é", "🙂", "\U0010ffff", "\u200b", "\u202e", "e\u0301", "日本語", "\uffff"]
BOUND_NUMBERS: list[Any] = [
    0,
    -1,
    1,
    2,
    2**31 - 1,
    2**53 - 1,
    2**53,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    2**64,
    10**30,
    1.0,
    0.5,
    -0.0,
    1e308,
    True,
    False,
    60_000,
    60_001,
]
OTHER_TYPES: list[Any] = [None, True, 0, -1, 1.5, "", "x", [], {}, [1, "a"], {"k": "v"}]
FIELD_EDGES: dict[str, list[Any]] = {
    "body": [
        "x" * 32 * 1024,
        "x" * (32 * 1024 + 1),
        "é" * 16 * 1024,
        "é" * (16 * 1024 + 1),
        "",
        " \n\t ",
        "\u3000",
        "  padded  ",
    ],
    "tags": [["t"] * 32, ["t"] * 33, ["x" * 128], ["x" * 129], [" "], ["a", "a"], [1]],
    "dedupe_key": ["k" * 256, "k" * 257, "", "  ", " k "],
    "ttl_turns": [0, 1, -1, 2**53 - 1, 2**53, None, "1", 1.0],
    "propagate": ["all", "none", "session", "ALL", "", None, "parent"],
    "authority": ["contract", "advisory", "binding", None],
    "role_hint": ["user_block", "assistant", ""],
    "source": ["inherited", "bridge", "hook", "other"],
    "id": ["i" * 128, "i" * 129, " id", "id\x00", ""],
    "fired_at_turn": [0, -1, 2**53 - 1, 2**53],
    "originating_agent_id": ["a" * 256, "a" * 257, ""],
    "preserve_on_compact": [False, True, 0, "false"],
}
UNKNOWN_KEYS = ["colour", "sessionId", "__proto__", "", "ttl", "x" * 300, "\u0000", "mode", "op"]


def camel(key: str) -> str:
    """snake_case → camelCase."""
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake(key: str) -> str:
    """camelCase → snake_case."""
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in key)


def draw(strategy: st.SearchStrategy[Any], count: int, seed_value: int) -> list[Any]:
    """`count` examples of a hypothesis strategy, reproducible from the seed (no `.example()`)."""
    out: list[Any] = []

    @seed(seed_value)
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    return out


def schema(stem: str) -> dict[str, Any]:
    """One of the project's generated JSON Schemas."""
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / f"{stem}.json").read_text("utf-8"))
    return loaded


BODY_TEXT = st.lists(
    st.one_of(
        st.sampled_from(MARKUP),
        st.sampled_from(CONTROL + UNICODE + [" ", "  \n ", "x"]),
        st.text(max_size=40),
    ),
    min_size=1,
    max_size=8,
).map("".join)
"""Adversarial reminder bodies: markup fragments, control characters and free text."""


@dataclass
class Pools:
    """Schema-valid examples drawn once per campaign."""

    commands: dict[str, list[dict[str, Any]]]
    specs: list[dict[str, Any]]
    bodies: list[str]

    @classmethod
    def draw(cls, per_op: int, seed_value: int) -> Pools:
        """Draw `per_op` examples from every `command.<op>.json` and the reminder spec."""
        commands = {
            op: draw(from_schema(schema(f"command.{op}")), per_op, seed_value + n)
            for n, op in enumerate(OPS)
        }
        specs = draw(from_schema(schema("reminder_spec")), per_op * 2, seed_value + 100)
        bodies = draw(BODY_TEXT, per_op * 4, seed_value + 200)
        return cls(commands, specs, bodies)


@dataclass
class FuzzInput:
    """One message sent to the gateway, and what to check about its reply."""

    label: str  # the op, `rpc:<method>` or `unknown-op`, for the counts
    subject: str
    data: bytes
    sessions: set[str] = field(default_factory=set)
    expect_reply: bool = True
    timeout_s: float = 10.0
    rpc: bool = False
    rpc_id: Any = ABSENT
    rpc_method: Any = None


#: Inputs are cut to this many bytes (then mostly not JSON): the server's max_payload is 1 MiB.
MAX_INPUT_BYTES = 900_000


def encode(value: Any) -> bytes:
    """JSON bytes; what orjson refuses (ints past 64 bits, deep nesting) goes through json."""
    return _encode(value)[:MAX_INPUT_BYTES]


def _encode(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except RecursionError:  # nested twice over: send the nesting as raw text instead
        return b'{"deep":' + b"[" * 2000 + b"]" * 2000 + b"}"


def sessions_in(value: Any, prefix: str) -> set[str]:
    """Every string in a JSON value that names one of this input's sessions."""
    found: set[str] = set()
    if isinstance(value, str) and value.startswith(prefix):
        found.add(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            found |= sessions_in(key, prefix) | sessions_in(item, prefix)
    elif isinstance(value, list):
        for item in value:
            found |= sessions_in(item, prefix)
    return found


class Mutator:
    """Seeded mutations of JSON values; string values under session keys keep their prefix."""

    def __init__(self, rng: random.Random, pools: Pools) -> None:
        self.rng = rng
        self.pools = pools
        self.operators: list[Callable[[Any, str], Any]] = [
            self.wrong_type,
            self.unknown_key,
            self.drop_key,
            self.huge_string,
            self.deep_nesting,
            self.control_chars,
            self.case_swap,
            self.bound_number,
            self.markup,
            self.session_variant,
            self.reminder_field,
            self.reminder_field,
        ]

    def containers(self, value: Any) -> list[Any]:
        """Every dict and list inside `value` (itself included)."""
        found: list[Any] = []
        if isinstance(value, dict | list):
            found.append(value)
            for item in value.values() if isinstance(value, dict) else value:
                found.extend(self.containers(item))
        return found

    def slot(self, value: Any) -> tuple[Any, Any] | None:
        """A random (container, key-or-index) inside `value`, or None."""
        slots = [
            (container, key)
            for container in self.containers(value)
            for key in (container if isinstance(container, dict) else range(len(container)))
        ]
        return self.rng.choice(slots) if slots else None

    def set(self, container: Any, key: Any, new: Any, prefix: str) -> None:
        if isinstance(new, str) and key in SESSION_KEYS and not new.startswith(prefix):
            new = prefix + new
        container[key] = new

    def mutate(self, value: Any, prefix: str, rounds: int) -> Any:
        for _ in range(rounds):
            value = self.rng.choice(self.operators)(value, prefix)
        return value

    def wrong_type(self, value: Any, prefix: str) -> Any:
        spot = self.slot(value)
        if spot is None:
            return copy.deepcopy(self.rng.choice(OTHER_TYPES))
        container, key = spot
        current = container[key]
        choices = [v for v in OTHER_TYPES if type(v) is not type(current)]
        self.set(container, key, copy.deepcopy(self.rng.choice(choices)), prefix)
        return value

    def unknown_key(self, value: Any, prefix: str) -> Any:
        dicts = [c for c in self.containers(value) if isinstance(c, dict)]
        if dicts:
            self.rng.choice(dicts)[self.rng.choice(UNKNOWN_KEYS)] = copy.deepcopy(
                self.rng.choice(OTHER_TYPES)
            )
        return value

    def drop_key(self, value: Any, prefix: str) -> Any:
        dicts = [c for c in self.containers(value) if isinstance(c, dict) and c]
        if dicts:
            target = self.rng.choice(dicts)
            del target[self.rng.choice(sorted(target))]
        return value

    def huge_string(self, value: Any, prefix: str) -> Any:
        size = self.rng.choice([257, 32 * 1024, 32 * 1024 + 1, 40_000, 150_000])
        text = self.rng.choice(["x", "é", "🙂", "<"]) * size
        if self.rng.random() < 0.3:  # exactly at the byte bound, in multi-byte characters
            text = "é" * (16 * 1024)
        spot = self.slot(value)
        if spot is not None:
            self.set(spot[0], spot[1], text, prefix)
        return value

    def deep_nesting(self, value: Any, prefix: str) -> Any:
        nested: Any = "deep"
        for level in range(self.rng.choice([20, 120, 250, 400])):
            nested = [nested] if level % 2 else {"d": nested}
        spot = self.slot(value)
        if spot is None:
            return nested
        spot[0][spot[1]] = nested
        return value

    def control_chars(self, value: Any, prefix: str) -> Any:
        spot = self.slot(value)
        if spot is None:
            return value
        container, key = spot
        current = container[key] if isinstance(container[key], str) else "x"
        at = self.rng.randrange(len(current) + 1)
        char = self.rng.choice(CONTROL + UNICODE)
        self.set(container, key, current[:at] + char + current[at:], prefix)
        return value

    def case_swap(self, value: Any, prefix: str) -> Any:
        dicts = [c for c in self.containers(value) if isinstance(c, dict) and c]
        if dicts:
            target = self.rng.choice(dicts)
            key = self.rng.choice(sorted(target))
            swapped = camel(key) if "_" in key else snake(key)
            if swapped != key:
                target[swapped] = target.pop(key)
        return value

    def bound_number(self, value: Any, prefix: str) -> Any:
        spot = self.slot(value)
        if spot is not None:
            spot[0][spot[1]] = self.rng.choice(BOUND_NUMBERS)
        return value

    def markup(self, value: Any, prefix: str) -> Any:
        reminders = [
            c for c in self.containers(value) if isinstance(c, dict) and ("body" in c or not c)
        ]
        text = self.rng.choice(self.pools.bodies) + self.rng.choice(MARKUP)
        if reminders:
            self.rng.choice(reminders)["body"] = text
            return value
        spot = self.slot(value)
        if spot is not None:
            self.set(spot[0], spot[1], text, prefix)
        return value

    def reminder_field(self, value: Any, prefix: str) -> Any:
        """A reminder field at or just past its bound (SPEC §2.1), or a known bad value."""
        reminders = [c for c in self.containers(value) if isinstance(c, dict) and "body" in c]
        if not reminders:
            return value
        key, choices = self.rng.choice(list(FIELD_EDGES.items()))
        self.rng.choice(reminders)[key] = copy.deepcopy(self.rng.choice(choices))
        return value

    def session_variant(self, value: Any, prefix: str) -> Any:
        if isinstance(value, dict):
            suffix = self.rng.choice([" ", "é", "/x", ".", "*", ">", "\x00", "a" * 300, "🙂", ""])
            value["session_id"] = prefix + suffix
        return value


RAW_BODIES: list[bytes] = [
    b"",
    b" ",
    b"null",
    b"[]",
    b"{}",
    b"123",
    b'"string"',
    b"NaN",
    b"1e999",
    b"\xff\xfe\xfd",
    b"\x00" * 16,
    b"\xef\xbb\xbf{}",
    b"{" * 50_000,
    b"[" * 3000 + b"]" * 3000,
    b'{"a":1,"a":2}',
    '{"session_id":"é"}'.encode("utf-16"),
]


def raw_variants(rng: random.Random, valid: dict[str, Any]) -> bytes:
    """Bytes that are not (quite) one JSON object, built around a valid command."""
    good = orjson.dumps(valid)
    sid = orjson.dumps(valid.get("session_id", "x"))
    return rng.choice(
        [
            rng.choice(RAW_BODIES),
            good + b" trailing",
            good + good,
            good[:-1],
            good.replace(b'"session_id"', b'"session_id":' + sid + b',"session_id"', 1),
            b'{"session_id":"\\ud800' + sid[1:] + b"}",
            b'{"session_id":' + sid + b',"x":"\xff\xfe"}',
            b'{"session_id":' + sid + b',"turn":123456789012345678901234567890}',
            b'{"session_id":' + sid + b',"turn":1e2}',
            b'{"session_id":' + sid + b',"turn":-0}',
            b'{"session_id":' + sid + b',"turn":Infinity}',
            good.replace(b"{", b"{\x00", 1),
        ]
    )

"""Every NATS subject and default stream/bucket name of SPEC §3.1–§3.2, §4, §6.4, §8.

Subjects are part of the wire contract, so they are spelled once, here. A session's token is
its id when plain (`^[A-Za-z0-9_-]{1,64}$`), else `=` and 40 hex chars of SHA-256 (§3.2).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

EVENT_PREFIX: Final = "transcript.reminder"
EVENT_SUBJECTS: Final = f"{EVENT_PREFIX}.>"
"""Every event (the `REMINDERS` stream's subjects; the projector's and observer's filter)."""
DLQ_SUBJECTS: Final = "reminders.dlq.>"
AUDIT_SUBJECTS: Final = "reminders.audit.>"
AUDIT_FORGOTTEN: Final = "reminders.audit.forgotten"
COMMAND_PREFIX: Final = "reminders.v1"
COMMAND_SUBJECTS: Final = f"{COMMAND_PREFIX}.*"
RPC_OP: Final = "rpc"
RPC_SUBJECT: Final = f"{COMMAND_PREFIX}.{RPC_OP}"

DEFAULT_STREAM: Final = "REMINDERS"
DEFAULT_DLQ_STREAM: Final = "REMINDERS_DLQ"
DEFAULT_AUDIT_STREAM: Final = "REMINDERS_AUDIT"
DEFAULT_BUCKET: Final = "REMINDER_SESSIONS"

_PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def session_token(session_id: str) -> str:
    """The subject token of a session: the id itself when plain, else `=` + 40 hex of SHA-256."""
    if _PLAIN_TOKEN.match(session_id):
        return session_id
    return "=" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]


def event_subject(kind: str, session_id: str) -> str:
    """`transcript.reminder.<kind>.<session_token>`."""
    return f"{EVENT_PREFIX}.{kind}.{session_token(session_id)}"


def session_subject_filter(session_id: str) -> str:
    """Every event of one session: `transcript.reminder.*.<session_token>`."""
    return token_subject_filter(session_token(session_id))


def token_subject_filter(token: str) -> str:
    """Every event of the session whose subject token is `token` (the last token of its
    events' subjects, as a worker reads it)."""
    return f"{EVENT_PREFIX}.*.{token}"


def event_subject_template() -> str:
    """`transcript.reminder.{kind}.{session_token}`, for documents (AsyncAPI)."""
    return f"{EVENT_PREFIX}.{{kind}}.{{session_token}}"


def kind_subject_filter(kind: str) -> str:
    """Every event of one kind: `transcript.reminder.<kind>.>`."""
    return f"{EVENT_PREFIX}.{kind}.>"


def parse_event_subject(subject: str) -> tuple[str, str] | None:
    """`(kind, session_token)` of a well-formed event subject (exactly four tokens), else None."""
    parts = subject.split(".")
    if len(parts) != 4 or f"{parts[0]}.{parts[1]}" != EVENT_PREFIX or not parts[2] or not parts[3]:
        return None
    return parts[2], parts[3]


def last_token(subject: str) -> str:
    """The last token of a subject (the session token of an event or DLQ subject)."""
    return subject.rsplit(".", 1)[-1]


def command_subject(op: str) -> str:
    """`reminders.v1.<op>`."""
    return f"{COMMAND_PREFIX}.{op}"


def dlq_subject(service: str, token: str) -> str:
    """`reminders.dlq.<service>.<token>`: where a worker copies a poison message (§6.4)."""
    return f"reminders.dlq.{service}.{token}"


def acp_subject(token: str) -> str:
    """`reminders.v1.acp.<token>`: outbound ACP notifications of one session (§8)."""
    return f"{COMMAND_PREFIX}.acp.{token}"


# Runtime events of the providers service (SPEC §9.1).
AGENT_EVENT_PREFIX: Final = "agent.events"
AGENT_EVENT_SUBJECTS: Final = f"{AGENT_EVENT_PREFIX}.>"
"""Every runtime event (the `AGENT_EVENTS` stream's subjects; the providers' filter)."""
DEFAULT_AGENT_EVENTS_STREAM: Final = "AGENT_EVENTS"
EVALUATE_OP: Final = "evaluate"


def agent_event_subject(kind: str, session_id: str) -> str:
    """`agent.events.<kind>.<session_token>`."""
    return f"{AGENT_EVENT_PREFIX}.{kind}.{session_token(session_id)}"


def agent_event_subject_template() -> str:
    """`agent.events.{kind}.{session_token}`, for documents (AsyncAPI)."""
    return f"{AGENT_EVENT_PREFIX}.{{kind}}.{{session_token}}"


def parse_agent_event_subject(subject: str) -> tuple[str, str] | None:
    """`(kind, session_token)` of a well-formed runtime event subject (four tokens), else None."""
    parts = subject.split(".")
    if (
        len(parts) != 4
        or f"{parts[0]}.{parts[1]}" != AGENT_EVENT_PREFIX
        or not parts[2]
        or not parts[3]
    ):
        return None
    return parts[2], parts[3]

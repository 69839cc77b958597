"""Redaction of secrets in bodies at ingest (SPEC §10, issue #10 item D)."""

from __future__ import annotations

import pytest

from contracts import events as ev
from contracts.stored import StoredEvent
from contracts.subjects import event_subject
from core import CoreConfig, canonical_json
from core.redact import redact
from replay.verify import verify
from services.adapters.settings import Settings
from tests.support import Driver

# Real-looking, made-up tokens of each kind.
TOKENS = {
    "github_token": "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "api_key": "sk-proj-Abc123Def456Ghi789Jkl012Mno345",
    "slack_token": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "bearer": "Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nq9X=\n"
    "-----END RSA PRIVATE KEY-----",
}


@pytest.mark.parametrize(("kind", "token"), sorted(TOKENS.items()))
def test_each_kind_of_secret_is_replaced_by_its_marker(kind: str, token: str) -> None:
    text, count = redact(f"deploy with {token} now")
    assert (text, count) == (f"deploy with [REDACTED:{kind}] now", 1)


def test_ordinary_text_is_left_alone() -> None:
    for text in ["task-runner-abcdefghijklmnopqrstuvwxyz", "ask-me-anything", "the Bearer of news"]:
        assert redact(text) == (text, 0)


def _rows(driver: Driver) -> list[StoredEvent]:
    return [
        StoredEvent(e.to_wire(), n, event_subject(e.kind, e.session_id))
        for n, e in enumerate(driver.log, 1)
    ]


def test_with_redaction_on_no_secret_reaches_an_event_a_reply_or_the_state() -> None:
    driver = Driver(config=CoreConfig(redact=True))
    body = "keys: " + " ; ".join(TOKENS.values())
    driver.inject(body)
    driver.inject(TOKENS["aws_access_key"], mode="interrupt")
    driver.ok("checkpoint", seam="turn_start", turn=0)
    reply = driver.ok("render", turn=0)
    injected = driver.log[0].payload
    assert isinstance(injected, ev.Injected) and injected.redactions == len(TOKENS)
    assert driver.log[0].to_wire()["payload"]["redactions"] == len(TOKENS)
    queued = next(e.payload for e in driver.log if isinstance(e.payload, ev.Queued))
    assert queued.redactions == 1
    everything = canonical_json([e.to_wire() for e in driver.log]) + canonical_json(
        driver.state.model_dump(mode="json")
    )
    everything += canonical_json(reply)
    for token in TOKENS.values():
        assert token.split()[-1][:12] not in everything
    assert verify(_rows(driver)) is None


def test_with_redaction_off_bodies_and_events_are_unchanged() -> None:
    driver = Driver()
    driver.inject(TOKENS["aws_access_key"])
    assert driver.state.pending[0].spec.body == TOKENS["aws_access_key"]
    assert "redactions" not in driver.log[0].to_wire()["payload"]


def test_verify_flags_a_redaction_count_that_the_body_does_not_bear_out() -> None:
    driver = Driver(config=CoreConfig(redact=True))
    driver.inject(f"token {TOKENS['api_key']}")
    rows = _rows(driver)
    rows[0].envelope["payload"]["reminder"]["body"] = f"token {TOKENS['api_key']}"
    problem = verify([StoredEvent(r.envelope, r.stream_seq, r.subject) for r in rows])
    assert problem is not None  # the chain breaks first; a re-chained forgery fails the rule


def test_redaction_is_switched_on_by_the_environment() -> None:
    assert Settings.from_env({"REMINDERS_REDACT": "1"}).core.redact is True
    assert Settings.from_env({}).core.redact is False

"""Traces from command to projector, the observer's metrics and ACP notifications, and the
privacy rule: no body or envelope text in logs, metrics or spans (SPEC §8, §10)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
from nats.aio.client import Client
from prometheus_client.parser import text_string_to_metric_families

from client.sdk import ReminderClient
from services.adapters.settings import Settings
from tests.integration.read_side import projected, replayed, wait_projected_equal
from tests.processes import ServiceRunner

CANARY = "canary-7f3a9c-do-not-leak"
SERVICES = ("gateway", "projector", "propagator", "observer")


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


async def test_a_trace_runs_from_the_command_to_the_projector_and_nothing_leaks(
    nc: Client, provisioned: Settings, services: ServiceRunner, tmp_path: Path
) -> None:
    running = {
        name: services.start(
            name, extra_env={"REMINDERS_TRACE_FILE": str(tmp_path / f"{name}.jsonl")}
        )
        for name in SERVICES
    }
    acp: list[dict[str, Any]] = []

    async def on_acp(message: Any) -> None:
        acp.append(orjson.loads(message.data))

    await nc.subscribe("reminders.v1.acp.>", cb=on_acp)
    client = ReminderClient(nc)
    await client.inject(
        "obs", f"{CANARY} tests pass", ttl_turns=1, tags=["tests"], id="t1", propagate="all"
    )
    await client.inject("obs", f"{CANARY} queued", mode="steer", dedupe_key="k")
    await client.checkpoint("obs", "turn_start", 0)
    await client.inject("obs", f"{CANARY} replacement", dedupe_key="k")
    await client.render("obs", 0, user_text=f"{CANARY} user words")
    await client.render("obs", 0, format="system-reminder")
    await client.end_turn("obs", 0)
    await client.handoff("obs", "obs-child")
    bad = await client.request(
        "inject", {"session_id": "obs", "reminder": {"body": CANARY, "colour": CANARY}}
    )
    assert bad["ok"] is False
    await wait_projected_equal(nc, provisioned, ["obs"])
    for _ in range(100):  # bounded wait for the observer and propagator
        if acp and len(spans(tmp_path / "propagator.jsonl")) > 0:
            break
        await asyncio.sleep(0.1)

    # ACP: one reminder_emitted per fired event, with the §8 shape.
    assert acp, "the observer published no session/update"
    update = acp[0]["params"]["update"]
    assert acp[0]["method"] == "session/update" and acp[0]["params"]["sessionId"] == "obs"
    assert update["sessionUpdate"] == "reminder_emitted"
    assert set(update["_meta"]["harn"]["reminder"]) == {
        "reminderId",
        "tags",
        "body",
        "roleHint",
        "authority",
        "renderedRole",
        "source",
        "ttlTurns",
    }

    # One trace from the gateway's command span to the projector's consumer span.
    gateway_spans = [
        s for s in spans(tmp_path / "gateway.jsonl") if "reminders.v1.inject" in s["name"]
    ]
    assert gateway_spans
    trace_ids = {s["context"]["trace_id"] for s in gateway_spans}
    projector_spans = spans(tmp_path / "projector.jsonl")
    continued = [s for s in projector_spans if s["context"]["trace_id"] in trace_ids]
    assert continued, "no projector span continues a command's trace"
    assert continued[0]["parent_id"] is not None
    assert continued[0]["attributes"]["messaging.system"] == "nats"
    assert continued[0]["attributes"]["messaging.operation.type"] == "process"
    observer_spans = spans(tmp_path / "observer.jsonl")
    assert any(s["context"]["trace_id"] in trace_ids for s in observer_spans)
    assert any(
        event["name"].startswith("reminder.")
        for s in observer_spans
        for event in s.get("events", [])
    )

    # The observer's dashboards need no custom code.
    _, metrics = running["observer"].get("/metrics")
    assert 'reminders_lifecycle_events_total{kind="fired"' in metrics
    assert "reminders_envelope_bytes" in metrics
    assert "reminders_ttl_expiries" in metrics

    # The propagator counts what it handed on: the one handoff applied, its one reminder
    # inherited, and the series it has not used yet at 0.
    def propagator_counts() -> dict[tuple[str, str | None], float]:
        _, propagated = running["propagator"].get("/metrics")
        return {
            (sample.name, sample.labels.get("outcome")): sample.value
            for family in text_string_to_metric_families(propagated)
            for sample in family.samples
            if sample.name.startswith("reminders_propagator_")
        }

    for _ in range(100):  # bounded: a handoff the gateway asked to retry is applied later
        counted = propagator_counts()
        if counted.get(("reminders_propagator_handoffs_total", "applied")):
            break
        await asyncio.sleep(0.1)
    assert counted[("reminders_propagator_handoffs_total", "applied")] == 1
    assert counted[("reminders_propagator_handoffs_total", "dead_lettered")] == 0
    assert counted[("reminders_propagator_reminders_total", "inherited")] == 1

    # Privacy: the canary is in every body, and nowhere else.
    for name, service in running.items():
        status, exposition = service.get("/metrics")
        assert status == 200
        assert CANARY not in exposition, f"{name} metrics leak a body"
        assert "obs" not in exposition.replace("observer", ""), f"{name} labels carry a session"
    services.stop_all()
    for name in SERVICES:
        log_text = (tmp_path / "service-logs").glob(f"{name}-*.log")
        for path in log_text:
            assert CANARY not in path.read_text(encoding="utf-8"), f"{name} log leaks a body"
        trace_text = (
            (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8")
            if (tmp_path / f"{name}.jsonl").exists()
            else ""
        )
        assert CANARY not in trace_text, f"{name} spans leak a body"


#: A made-up GitHub token: with REMINDERS_REDACT=1 it must reach no stored or observed place.
SECRET_CANARY = "ghp_" + "Zq7Canary0Secret0Token0Do0Not0Leak01"


async def test_with_redaction_on_a_secret_canary_reaches_no_kv_log_metric_or_span(
    nc: Client, provisioned: Settings, services: ServiceRunner, tmp_path: Path
) -> None:
    names = ("gateway", "projector", "observer")
    running = {
        name: services.start(
            name,
            extra_env={
                "REMINDERS_TRACE_FILE": str(tmp_path / f"{name}.jsonl"),
                "REMINDERS_REDACT": "1",
            },
        )
        for name in names
    }
    client = ReminderClient(nc)
    reply = await client.request(
        "inject", {"session_id": "redact", "reminder": {"body": f"use {SECRET_CANARY} to push"}}
    )
    assert reply["ok"] is True
    await client.inject("redact", f"queued {SECRET_CANARY}", mode="steer")
    await client.checkpoint("redact", "turn_start", 0)
    rendered = await client.render("redact", 0)
    assert SECRET_CANARY not in json.dumps(rendered)
    await wait_projected_equal(nc, provisioned, ["redact"])
    stored = await projected(nc, provisioned, "redact")
    assert stored is not None
    state_text = json.dumps(stored.model_dump(mode="json"))
    assert SECRET_CANARY not in state_text and "[REDACTED:github_token]" in state_text
    log_state = (await replayed(nc, provisioned, "redact")).model_dump(mode="json")
    assert SECRET_CANARY not in json.dumps(log_state)
    for _ in range(50):  # bounded wait for the observer's spans
        if spans(tmp_path / "observer.jsonl"):
            break
        await asyncio.sleep(0.1)
    for name, service in running.items():
        _, exposition = service.get("/metrics")
        assert SECRET_CANARY not in exposition, f"{name} metrics leak the secret"
    services.stop_all()
    for name in names:
        for path in (tmp_path / "service-logs").glob(f"{name}-*.log"):
            assert SECRET_CANARY not in path.read_text(encoding="utf-8"), f"{name} log leaks"
        trace = tmp_path / f"{name}.jsonl"
        if trace.exists():
            assert SECRET_CANARY not in trace.read_text(encoding="utf-8"), f"{name} span leaks"

"""`evaluate_event(view, runtime event, config) -> evaluations`: the providers, pure.

For each provider subscribed to the event's kind, in configuration order (SPEC §9.2): a
disabled built-in is recorded as `disabled`; an enabled one is called, and its outcome checked
here, once, for every provider alike:

- an exception from the provider → `provider_error` (its type name, never its message);
- a reminder for an observational event (`worker_lifecycle`) → `malformed_spec`, HARN-RMD-008;
- a reminder that is not a valid ReminderSpec → `malformed_spec`, HARN-RMD-006;
- a `once` provider that already fired in the session → `once_latched`;
- a durable reminder (`preserve_on_compact`, no TTL) already live with the same dedupe key,
  body and fields → `unchanged_durable_reminder`;
- past `max_bytes_per_turn` of provider bodies in the session and turn → `budget_exceeded`;
- a provider named by an active `provider_id` mute → `muted`, without being called.

Every provider sees the session's state without the gateway's remembered replies
(`NOT_IN_VIEW`): they are the gateway's memory of request ids, not the session's reminders,
and the largest part of a busy session's value, so the providers service does not even
validate them when it reads a view, and a replay's re-evaluation gives the same view.

A fired reminder that sets no `source` gets `stdlib_provider` (plug-ins included) and one
that sets no `fired_at_turn` fires at the runtime event's turn (SPEC §9.3.1); an
`unchanged_durable_reminder` skip names the live reminder it kept.

The result is the `evaluations` list of one `evaluate` command; the gateway applies the §4.2
rules to each fired reminder and re-checks the latches when it decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contracts.agent_events import OBSERVATIONAL_KINDS, RuntimeEvent
from contracts.commands import Evaluation
from contracts.errors import ReminderError
from contracts.spec import parse_reminder
from contracts.state import SessionState
from core.cost import provider_muted
from core.providers.config import ProvidersConfig
from core.providers.model import PROVIDER_SOURCE, Provider, ProviderResult
from core.rules import once_latched, provider_mark, unchanged_durable

#: Top-level fields of the session's state that a provider's view leaves empty (each a list,
#: empty by default): the remembered replies (the last 256 request ids' replies, a render's
#: with its text).
NOT_IN_VIEW: frozenset[str] = frozenset({"recent_replies"})


def provider_view(state: SessionState) -> SessionState:
    """The view providers are given of a session's state: what `NOT_IN_VIEW` names left
    empty (the state itself when it already is)."""
    if not any(getattr(state, name) for name in NOT_IN_VIEW):
        return state
    return state.model_copy(update={name: [] for name in NOT_IN_VIEW})


def evaluation_request_id(runtime_event_id: str) -> str:
    """The `evaluate` command's request id: a redelivered runtime event is answered from the
    log (SPEC §4.10.1)."""
    return f"evaluate:{runtime_event_id}"


def _call(provider: Provider, view: SessionState, event: RuntimeEvent) -> ProviderResult:
    try:
        return provider.fn(view, event, provider.config)
    except Exception as exc:  # a provider's bug is recorded, never raised
        return ProviderResult("provider_error", error=f"provider raised {type(exc).__name__}")


def _spent(view: SessionState, turn: int) -> int:
    providers = view.providers
    if providers is None or providers.budget_turn != turn:
        return 0
    return providers.budget_bytes


def evaluate_event(
    view: SessionState, event: RuntimeEvent, config: ProvidersConfig
) -> list[Evaluation]:
    """Every evaluation of one runtime event, in configuration order, on the providers' view
    of the session (`provider_view`)."""
    view = provider_view(view)
    evaluations: list[Evaluation] = []
    spent = _spent(view, event.turn)
    disabled = {provider.id for provider in config.disabled}
    for provider in config.order:
        if event.kind not in provider.subscribes:
            continue
        common: dict[str, Any] = {
            "provider_id": provider.id,
            "event": event.kind,
            "once": provider.once,
        }
        if provider.id in disabled:
            evaluations.append(Evaluation(**common, fired=False, reason="disabled"))
            continue
        if provider_muted(view.mutes, provider.id):
            level = provider_mark(view.providers, provider.id).level
            evaluations.append(Evaluation(**common, fired=False, reason="muted", level=level))
            continue
        outcome = _call(provider, view, event)
        level = outcome.level if isinstance(outcome.level, int) else None
        if not outcome.fired:
            error = outcome.error if isinstance(outcome.error, str) else None
            evaluations.append(
                Evaluation(**common, fired=False, reason=outcome.reason, error=error, level=level)
            )
            continue
        reminder = provider_reminder(outcome.reminder or {}, event.turn)
        reason, error, kept = _check(view, event, provider, reminder, config, spent)
        if reason != "fired":
            evaluations.append(
                Evaluation(
                    **common,
                    fired=False,
                    reason=reason,
                    error=error,
                    level=provider_mark(view.providers, provider.id).level,
                    reminder_id=kept,
                )
            )
            continue
        spent += len(str(reminder.get("body", "")).strip().encode("utf-8"))
        evaluations.append(
            Evaluation(**common, fired=True, reason="fired", reminder=reminder, level=level)
        )
    return evaluations


def provider_reminder(reminder: Mapping[str, Any], turn: int) -> dict[str, Any]:
    """A provider's reminder with the defaults every provider's gets (SPEC §9.3.1): source
    `stdlib_provider` and `fired_at_turn` the runtime event's turn, unless it sets them."""
    return {"source": PROVIDER_SOURCE, "fired_at_turn": turn, **reminder}


def _check(
    view: SessionState,
    event: RuntimeEvent,
    provider: Provider,
    reminder: dict[str, Any],
    config: ProvidersConfig,
    spent: int,
) -> tuple[Any, str | None, str | None]:
    """(reason, error, the live reminder kept by an `unchanged_durable_reminder` skip)."""
    if event.kind in OBSERVATIONAL_KINDS:
        return "malformed_spec", f"HARN-RMD-008 a {event.kind} event cannot carry reminders", None
    try:
        spec, _ = parse_reminder(reminder)
    except ReminderError as exc:
        return "malformed_spec", f"HARN-RMD-006 {exc.code.value}: {exc.message}"[:1024], None
    if once_latched(view.providers, provider.id, once=provider.once):
        return "once_latched", None, None
    kept = unchanged_durable(view.pending, spec)
    if kept is not None:
        return "unchanged_durable_reminder", None, kept.spec.id
    budget = config.max_bytes_per_turn
    if budget is not None and spent + spec.body_bytes() > budget:
        return "budget_exceeded", None, None
    return "fired", None, None

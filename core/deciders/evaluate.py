"""`evaluate`: the providers' evaluations of one runtime event (SPEC §4.10.1, §9)."""

from __future__ import annotations

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ReminderError
from contracts.replies import EvaluateReply, InjectedReply, Reply
from contracts.spec import parse_reminder
from core import rules
from core.batch import Batch
from core.canonical import derived_uuid7
from core.config import CoreConfig
from core.cost import provider_muted
from core.deciders.reminders import inject
from core.providers.evaluate import provider_reminder


def _evaluation_fires(
    batch: Batch, command: cmd.Evaluate, index: int, evaluation: cmd.Evaluation, config: CoreConfig
) -> tuple[ev.EvaluationReason, str | None, str | None]:
    """Inject one fired evaluation's reminder; `(reason, reminder_id, error)`.

    The gateway re-checks the latches against the session as it is now (SPEC §9.2), so two
    replicas of the providers service, or a view that lagged, cannot double-fire; then the
    reminder goes through the very rules and bounds of a direct inject (§4.2), and one they
    reject makes the evaluation `malformed_spec` with the rule's code.
    """
    if provider_muted(batch.scratch.mutes, evaluation.provider_id):
        return "muted", None, None
    providers, provider_id = batch.scratch.providers, evaluation.provider_id
    if rules.once_latched(providers, provider_id, once=evaluation.once):
        return "once_latched", None, None
    recorded = rules.provider_mark(providers, provider_id).level
    if rules.threshold_reported(recorded, evaluation.level):
        return "threshold_already_reported", None, None
    if evaluation.reminder is None:
        return "malformed_spec", None, "HARN-RMD-006 a fired evaluation carries no reminder"
    try:
        reminder = provider_reminder(evaluation.reminder, command.turn)
        spec, _ = parse_reminder(reminder, max_body_bytes=config.max_body_bytes)
        if spec.id is None:
            fresh = derived_uuid7(
                batch.context.occurred_at,
                "provider",
                command.runtime_event_id,
                evaluation.provider_id,
                str(index),
            )
            spec = spec.model_copy(update={"id": fresh})
        direct = cmd.Inject.model_construct(
            session_id=command.session_id,
            agent_id=command.agent_id,
            task_id=command.task_id,
            request_id=command.request_id,
            mode=None,
            reminder=spec,
        )
        reply = inject(batch, direct, config)
    except ReminderError as exc:
        return "malformed_spec", None, f"{exc.code.value} {exc.message}"[:1024]
    assert isinstance(reply, InjectedReply)
    return "fired", reply.reminder_id, None


def evaluate(batch: Batch, command: cmd.Evaluate, config: CoreConfig) -> Reply:
    """Per evaluation in order: `deduped`? + `injected` when it fired, then one
    `provider_evaluated` (SPEC §4.10.1)."""
    injected: list[str] = []
    for index, evaluation in enumerate(command.evaluations):
        reason: ev.EvaluationReason = evaluation.reason
        reminder_id: str | None = None
        error = evaluation.error
        level = evaluation.level
        if evaluation.fired:
            reason, reminder_id, refused = _evaluation_fires(
                batch, command, index, evaluation, config
            )
            error = refused or error
            if reminder_id is None:
                # Nothing went live: the latch does not advance.
                level = rules.provider_mark(batch.scratch.providers, evaluation.provider_id).level
            else:
                injected.append(reminder_id)
        elif reason == "fired":
            reason, error = "provider_error", error or "an evaluation that did not fire"
        elif reason == "unchanged_durable_reminder":
            reminder_id = evaluation.reminder_id  # the live reminder the skip kept
        batch.emit(
            ev.ProviderEvaluated(
                provider_id=evaluation.provider_id,
                event=evaluation.event,
                runtime_event_id=command.runtime_event_id,
                fired=reason == "fired" and reminder_id is not None,
                reason=reason,
                reminder_id=reminder_id,
                error=error,
                level=level,
                view_seq=command.view_seq,
            )
        )
    return EvaluateReply(
        session_seq=0, injected_ids=injected, evaluated_count=len(command.evaluations)
    )

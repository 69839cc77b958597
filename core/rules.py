"""The lifecycle rules of SPEC §4, each once, as small pure functions over state rows.

`decide` applies them to emit events; `replay/verify.py` calls the very same functions to
re-derive what a log recorded. So a rule changed here changes both at once, and `--verify`
never flags a log that the current `decide` would write. Nothing here emits, folds or
validates: the functions take rows and return rows (or ids), in the order the rules give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.commands import ClearSelector
from contracts.events import MuteSelector
from contracts.spec import DeliveryMode, ReminderSpec, ResolvedSpec
from contracts.state import (
    DeliveredDigest,
    DeliveredEnvelope,
    PendingRow,
    ProviderMark,
    ProvidersState,
    QueuedRow,
)
from core.size import spec_bytes

#: Which queued modes each seam drains (SPEC §4.4).
SEAM_DRAINS: dict[str, frozenset[DeliveryMode]] = {
    "iteration_start": frozenset({"interrupt_immediate", "finish_step"}),
    "post_tool_dispatch": frozenset({"interrupt_immediate", "finish_step"}),
    "iteration_end": frozenset({"interrupt_immediate", "finish_step"}),
    "pre_tool_dispatch": frozenset({"interrupt_immediate"}),
    "daemon_idle_pre": frozenset({"interrupt_immediate"}),
    "daemon_idle_post": frozenset({"interrupt_immediate"}),
    "loop_exit": frozenset({"audit_only"}),
}


def fired_by(row: PendingRow, turn: int) -> bool:
    """Whether a live reminder's `fired_at_turn` has come by `turn` (SPEC §2.1)."""
    return row.spec.fired_at_turn <= turn


def renderable(row: PendingRow, turn: int) -> bool:
    """Eligible for a render at `turn`: fired by then and not audit-only (SPEC §4.6)."""
    return not row.audit_only and fired_by(row, turn)


# --- inject and drain (§4.2, §4.4) -------------------------------------------------------


def dedupe_victims(
    pending: Sequence[PendingRow], dedupe_key: str | None, *, newcomer_audit_only: bool = False
) -> list[PendingRow]:
    """The live reminders a newcomer with `dedupe_key` replaces, in injection order.

    `audit_only` reminders neither dedupe others nor get deduped (SPEC §4.2).
    """
    if dedupe_key is None or newcomer_audit_only:
        return []
    return [row for row in pending if not row.audit_only and row.spec.dedupe_key == dedupe_key]


def session_bytes(pending: Sequence[PendingRow], queued: Sequence[QueuedRow]) -> int:
    """Stored bytes of the session's live and queued reminders, the quantity the session
    budget bounds (SPEC §4.1.1; each spec counted as `core.size.spec_bytes`)."""
    return sum(spec_bytes(row.spec) for row in pending) + sum(
        spec_bytes(row.reminder) for row in queued
    )


def drained(queued: Sequence[QueuedRow], seam: str) -> list[QueuedRow]:
    """The queued rows a checkpoint at `seam` drains, oldest first (SPEC §4.4)."""
    modes = SEAM_DRAINS[seam]
    return [row for row in queued if row.mode in modes]


def drains_audit_only(mode: DeliveryMode) -> bool:
    """Whether a drained reminder becomes live as `audit_only` (recorded, never rendered)."""
    return mode == "audit_only"


def dispatch_skipped(seam: str, drained_ids: Sequence[str]) -> bool:
    """The host skips its pending tool batch when `pre_tool_dispatch` drained any (§4.4)."""
    return seam == "pre_tool_dispatch" and bool(drained_ids)


def clear_matches(row: PendingRow, selector: ClearSelector) -> bool:
    """Every present selector matches; a tag matches when any tag equals it (SPEC §4.3)."""
    return (
        (selector.id is None or row.spec.id == selector.id)
        and (selector.tag is None or selector.tag in row.spec.tags)
        and (selector.dedupe_key is None or row.spec.dedupe_key == selector.dedupe_key)
    )


# --- TTL pass and compaction (§4.7, §4.8) ------------------------------------------------


def ttl_pass_due(last_ended_turn: int | None, turn: int) -> bool:
    """A TTL pass for `turn` applies only past the last ended turn: never twice per turn."""
    return last_ended_turn is None or turn > last_ended_turn


@dataclass(frozen=True)
class TtlPass:
    """One TTL pass: rows that expire (TTL ≤ 1) and rows decremented (TTL > 1)."""

    expiring: tuple[PendingRow, ...] = ()
    decrementing: tuple[PendingRow, ...] = ()

    @property
    def expired_ids(self) -> list[str]:
        """Ids of the expiring rows, in injection order."""
        return [row.spec.id for row in self.expiring]

    @property
    def decremented_ids(self) -> list[str]:
        """Ids of the decremented rows, in injection order."""
        return [row.spec.id for row in self.decrementing]


def ttl_pass(pending: Sequence[PendingRow], turn: int) -> TtlPass:
    """The TTL pass at a boundary of `turn` over live reminders with a finite TTL that have
    fired by `turn` (SPEC §4.7)."""
    expiring: list[PendingRow] = []
    decrementing: list[PendingRow] = []
    for row in pending:
        if row.ttl_remaining is None or not fired_by(row, turn):
            continue
        (expiring if row.ttl_remaining <= 1 else decrementing).append(row)
    return TtlPass(tuple(expiring), tuple(decrementing))


@dataclass(frozen=True)
class CompactDedupe:
    """Step 2b for one key: the newest preserved survivor stays, the older ones go."""

    survivor: PendingRow
    dropped: tuple[PendingRow, ...]

    @property
    def dropped_ids(self) -> list[str]:
        """Ids of the older survivors removed, in injection order."""
        return [row.spec.id for row in self.dropped]


@dataclass(frozen=True)
class Compaction:
    """What a compaction does to the live reminders (SPEC §4.8 steps 1, 2 and 2b)."""

    ttl: TtlPass
    preserved: tuple[PendingRow, ...]
    compacted: tuple[PendingRow, ...]
    deduped: tuple[CompactDedupe, ...] = ()

    @property
    def preserved_ids(self) -> list[str]:
        """Ids of the survivors kept, in injection order."""
        return [row.spec.id for row in self.preserved]

    @property
    def compacted_ids(self) -> list[str]:
        """Ids of the survivors expired by compaction, in injection order."""
        return [row.spec.id for row in self.compacted]

    def ttl_before(self, row: PendingRow) -> int | None:
        """A compacted row's TTL after step 1 (its decrement lands with `compacted`)."""
        ttl = row.ttl_remaining
        lowered = row.spec.id in self.ttl.decremented_ids
        return ttl - 1 if ttl is not None and lowered else ttl


def compaction(pending: Sequence[PendingRow], turn: int, last_ended_turn: int | None) -> Compaction:
    """Step 1, the TTL pass (only when due), then step 2: survivors with
    `preserve_on_compact` are kept, the others expire."""
    ttl = ttl_pass(pending, turn) if ttl_pass_due(last_ended_turn, turn) else TtlPass()
    gone = set(ttl.expired_ids)
    survivors = [row for row in pending if row.spec.id not in gone]
    preserved = [row for row in survivors if row.spec.preserve_on_compact]
    deduped = compact_dedupe(preserved)
    dropped = {row.spec.id for group in deduped for row in group.dropped}
    return Compaction(
        ttl=ttl,
        preserved=tuple(row for row in preserved if row.spec.id not in dropped),
        compacted=tuple(row for row in survivors if not row.spec.preserve_on_compact),
        deduped=deduped,
    )


def compact_dedupe(preserved: Sequence[PendingRow]) -> tuple[CompactDedupe, ...]:
    """Step 2b: among the preserved survivors only the newest of each `dedupe_key` stays
    (`audit_only` ones, exempt from inject-time dedupe, included), one group per key in the
    order of its survivor."""
    by_key: dict[str, list[PendingRow]] = {}
    for row in preserved:
        if row.spec.dedupe_key is not None:
            by_key.setdefault(row.spec.dedupe_key, []).append(row)
    groups = [
        CompactDedupe(survivor=rows[-1], dropped=tuple(rows[:-1]))
        for rows in by_key.values()
        if len(rows) > 1
    ]
    order = {row.spec.id: index for index, row in enumerate(preserved)}
    return tuple(sorted(groups, key=lambda group: order[group.survivor.spec.id]))


def directives_cleared(delivered: Sequence[DeliveredEnvelope | DeliveredDigest]) -> int:
    """How many directives the delivered history that compaction clears holds."""
    return sum(len(envelope.directive_ids) for envelope in delivered)


# --- propagation (§4.9) ------------------------------------------------------------------


def propagates(row: PendingRow) -> bool:
    """`all` always; `session` only when not itself inherited; `none` never; never an
    audit-only reminder (SPEC §4.9). Queued reminders do not propagate at all."""
    if row.audit_only:
        return False
    if row.spec.propagate == "all":
        return True
    return row.spec.propagate == "session" and row.spec.source != "inherited"


def _copied_spec(spec: ResolvedSpec, update: dict[str, Any]) -> ResolvedSpec:
    """`spec` with `update`, validated by the model that reads the event back (§4.1.1): a
    value copied from a command (an agent id) must satisfy the spec's own rules."""
    if all(getattr(spec, key) == value for key, value in update.items()):
        return spec
    return ResolvedSpec.model_validate({**spec.model_dump(), **update})


def handed_off_spec(row: PendingRow, child_turn: int, parent_agent_id: str) -> ResolvedSpec:
    """The spec exactly as the child is to receive it: its remaining TTL, fired at the
    child's current turn, `source: inherited`, the first emitter kept.

    Raises `pydantic.ValidationError` when `parent_agent_id` would be copied in and is not
    a valid `originating_agent_id`."""
    return _copied_spec(
        row.spec,
        {
            "ttl_turns": row.ttl_remaining,
            "fired_at_turn": child_turn,
            "source": "inherited",
            "originating_agent_id": row.spec.originating_agent_id or parent_agent_id,
        },
    )


def handed_off_specs(
    pending: Sequence[PendingRow], child_turn: int, parent_agent_id: str
) -> list[ResolvedSpec]:
    """Every propagating live reminder, as the child is to receive it, in injection order."""
    return [handed_off_spec(row, child_turn, parent_agent_id) for row in pending if propagates(row)]


def inherited_spec(spec: ResolvedSpec, parent_agent_id: str) -> ResolvedSpec:
    """A handed-off spec as the child injects it: `source: inherited`, the first emitter
    kept, else the parent's agent (validated like `handed_off_spec`)."""
    return _copied_spec(
        spec,
        {
            "source": "inherited",
            "originating_agent_id": spec.originating_agent_id or parent_agent_id,
        },
    )


# --- remembered replies (§4.1, §4.1.1) ---------------------------------------------------

#: A key only one op's ok reply carries, so a remembered reply names its op.
_REPLY_KEYS: tuple[tuple[str, str], ...] = (
    ("deduped_count", "inject"),
    ("queued", "inject"),
    ("removed_count", "clear"),
    ("drained", "checkpoint"),
    ("status", "revoke"),
    ("envelope", "render"),
    ("compacted_count", "compact"),
    ("expired_count", "end_turn"),
    ("propagated_ids", "handoff"),
    ("inherited_ids", "inherit"),
    ("evaluated_count", "evaluate"),
    ("already_acknowledged", "acknowledge"),
)


def reply_op(reply: dict[str, Any]) -> str | None:
    """The op whose reply this is, from the keys only that op's reply carries."""
    return next((op for key, op in _REPLY_KEYS if key in reply), None)


def remembered_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """A reply as the state remembers it: a render's envelope without its text, which its
    `delivered` row holds (§4.1.1: not stored twice)."""
    envelope = reply.get("envelope")
    if not isinstance(envelope, dict) or "text" not in envelope:
        return reply
    return {**reply, "envelope": {k: v for k, v in envelope.items() if k != "text"}}


def rebuilt_reply(
    reply: dict[str, Any], delivered: Sequence[DeliveredEnvelope | DeliveredDigest]
) -> dict[str, Any] | None:
    """A remembered reply as it was sent: a render's envelope text taken back from its
    `delivered` row; None when that row is no longer held in full (digested or compacted)."""
    envelope = reply.get("envelope")
    if not isinstance(envelope, dict) or "text" in envelope:
        return reply
    for row in reversed(delivered):
        if (
            isinstance(row, DeliveredEnvelope)
            and row.turn_number == envelope.get("turn_number")
            and row.directive_ids == envelope.get("directive_ids")
        ):
            return {**reply, "envelope": {"text": row.text, **envelope}}
    return None


def provider_mark(providers: ProvidersState | None, provider_id: str) -> ProviderMark:
    """The latches the log recorded for one provider in the session (SPEC §9.2)."""
    if providers is None:
        return ProviderMark()
    return providers.marks.get(provider_id) or ProviderMark()


def once_latched(providers: ProvidersState | None, provider_id: str, *, once: bool) -> bool:
    """Whether a `once` provider already fired in the session, so it never fires again: the
    latch is a `provider_evaluated{fired: true}` of the provider in the log (SPEC §9.2)."""
    return once and provider_mark(providers, provider_id).fired_count > 0


def threshold_reported(recorded: int | None, level: int | None) -> bool:
    """Whether a threshold `level` was already reported: fire only above the recorded level
    (a lower reading recorded a lower level, or none, and so re-armed it)."""
    return level is not None and recorded is not None and recorded >= level


#: Fields that must match for a durable provider reminder to count as unchanged (§9.3).
_DURABLE_FIELDS = ("tags", "authority", "role_hint", "propagate", "source")


def is_durable(spec: ReminderSpec) -> bool:
    """A reminder that lives until cleared: preserved on compaction, no TTL."""
    return spec.preserve_on_compact and spec.ttl_turns is None


def unchanged_durable(pending: Sequence[PendingRow], spec: ReminderSpec) -> PendingRow | None:
    """The durable reminder already live with the same dedupe key, body and fields, if any
    (`reason: unchanged_durable_reminder`, SPEC §9.3): injecting it again changes nothing,
    and the skip names the reminder it kept (§9.3.1)."""
    if not is_durable(spec) or spec.dedupe_key is None:
        return None
    return next(
        (
            row
            for row in pending
            if is_durable(row.spec)
            and row.spec.dedupe_key == spec.dedupe_key
            and row.spec.body == spec.body
            and all(getattr(row.spec, name) == getattr(spec, name) for name in _DURABLE_FIELDS)
        ),
        None,
    )


def live_with_key(pending: Sequence[PendingRow], dedupe_key: str) -> list[PendingRow]:
    """Live reminders carrying `dedupe_key`, in injection order."""
    return [row for row in pending if row.spec.dedupe_key == dedupe_key]


# --- mutes (§12.2) -----------------------------------------------------------------------


def mute_matches(selector: MuteSelector, row: PendingRow) -> bool:
    """Whether a live reminder is held back by a mute: every field the selector gives must
    match (a tag matches when any tag equals it; `provider_id` is the provider that injected
    the reminder)."""
    spec = row.spec
    return (
        (selector.source is None or spec.source == selector.source)
        and (selector.tag is None or selector.tag in spec.tags)
        and (selector.provider_id is None or row.provider_id == selector.provider_id)
        and (selector.dedupe_key is None or spec.dedupe_key == selector.dedupe_key)
    )

"""The effect report's counts (SPEC §12.6) as Prometheus metrics, per reminder `source`.

Labels are `source` (the five sources of SPEC §2.1, or `unknown`) and, on acknowledgements,
`outcome` (acted, ignored, dismissed): both closed sets. Provider ids and tags are left out on
purpose: tags are free text and provider ids come from configuration (plug-ins name their
own), so either would let producers grow the number of series without bound; the per
provider and per tag breakdown is `reminders stats`, read from the log.

An `acknowledged` or `expired` event names only the reminder, so the observer remembers the
source of the reminders it saw injected (a bounded map, oldest forgotten first). A reminder
injected before the observer started, or forgotten from the map, counts as `unknown`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from opentelemetry.metrics import Meter

from contracts import events as ev
from core.cost import directive_tokens
from services.adapters.telemetry import LabelledCount, labelled_count

#: Reminders whose source the observer remembers; past it the oldest is forgotten.
REMEMBERED_REMINDERS = 100_000
UNKNOWN = "unknown"


@dataclass
class _Seen:
    source: str
    delivered: bool = False
    acknowledged: bool = False


@dataclass
class EffectMetrics:
    """Counts of what reminders cost and what became of them, by source (plain counts read
    at scrape time, as every per-event count of the observer)."""

    injected: LabelledCount
    delivered: LabelledCount
    rendered: LabelledCount
    tokens: LabelledCount
    acknowledged: LabelledCount
    expired_unacknowledged: LabelledCount
    seen: OrderedDict[tuple[str, str], _Seen] = field(default_factory=OrderedDict)

    @classmethod
    def create(cls, meter: Meter) -> EffectMetrics:
        """Register the instruments on `meter`."""
        return cls(
            injected=labelled_count(
                meter, "reminders_effect_injected", "Reminders injected, by source"
            ),
            delivered=labelled_count(
                meter,
                "reminders_effect_delivered",
                "Reminders delivered for the first time, by source",
            ),
            rendered=labelled_count(
                meter, "reminders_effect_rendered", "Deliveries (fired), by source"
            ),
            tokens=labelled_count(
                meter,
                "reminders_effect_tokens",
                "Estimated tokens of the delivered bodies, by source (SPEC §12.6)",
                unit="{token}",
            ),
            acknowledged=labelled_count(
                meter,
                "reminders_effect_acknowledged",
                "Acknowledgements by source and outcome (SPEC §12.3)",
            ),
            expired_unacknowledged=labelled_count(
                meter,
                "reminders_effect_expired_unacknowledged",
                "Reminders that expired before any acknowledgement, by source",
            ),
        )

    def _lookup(self, event: ev.Event, reminder_id: str) -> _Seen:
        seen = self.seen.get((event.session_id, reminder_id))
        return seen if seen is not None else _Seen(UNKNOWN)

    def observe(self, event: ev.Event) -> None:
        """Count one event."""
        payload = event.payload
        if isinstance(payload, ev.Injected):
            key = (event.session_id, payload.reminder_id)
            self.seen.pop(key, None)
            self.seen[key] = _Seen(payload.source)
            while len(self.seen) > REMEMBERED_REMINDERS:
                self.seen.popitem(last=False)
            self.injected.add(1, {"source": payload.source})
        elif isinstance(payload, ev.Fired):
            seen = self._lookup(event, payload.reminder_id)
            labels = {"source": payload.source}
            if not seen.delivered:
                seen.delivered = True
                self.delivered.add(1, labels)
            self.rendered.add(1, labels)
            self.tokens.add(directive_tokens(payload.body), labels)
        elif isinstance(payload, ev.Acknowledged):
            seen = self._lookup(event, payload.reminder_id)
            seen.acknowledged = True
            self.acknowledged.add(1, {"source": seen.source, "outcome": payload.outcome})
        elif isinstance(payload, ev.Expired) and payload.reason != "dismissed":
            seen = self._lookup(event, payload.reminder_id)
            if not seen.acknowledged:
                self.expired_unacknowledged.add(1, {"source": seen.source})

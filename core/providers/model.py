"""What a provider is: a pure function `(view, runtime event, config) -> ProviderResult`.

A provider never performs I/O and never reads a clock: everything it may look at is in the
session view (the projected `SessionState`), the runtime event and its own configuration, so
`replay --verify` re-derives every recorded evaluation from the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.agent_events import RuntimeEvent
from contracts.events import EvaluationReason
from contracts.state import SessionState

#: Every provider-produced reminder is labelled as such unless it says otherwise (§2.1).
PROVIDER_SOURCE = "stdlib_provider"


@dataclass(frozen=True)
class ProviderResult:
    """One evaluation's result before the gateway applies the §4.2 rules to its reminder."""

    reason: EvaluationReason
    reminder: Mapping[str, Any] | None = None
    level: int | None = None
    error: str | None = None

    @property
    def fired(self) -> bool:
        """Whether it asks for a reminder to be injected."""
        return self.reason == "fired"


def fired(reminder: Mapping[str, Any], level: int | None = None) -> ProviderResult:
    """A provider that fires with this reminder (a ReminderSpec as a JSON object)."""
    return ProviderResult("fired", dict(reminder), level)


def skipped(reason: EvaluationReason, level: int | None = None) -> ProviderResult:
    """A provider that does not fire, and why."""
    return ProviderResult(reason, None, level)


#: The pure function of a provider: `(view, event, config) -> ProviderResult`.
ProviderFn = Callable[[SessionState, RuntimeEvent, Mapping[str, Any]], ProviderResult]

#: A third-party provider (entry-point group `reminder_ledger.providers`): returns a
#: ReminderSpec as a dict to fire, None not to fire, or a `ProviderResult`.
PluginFn = Callable[[SessionState, RuntimeEvent, Mapping[str, Any]], object]


@dataclass(frozen=True)
class Provider:
    """A provider as configured: its id, the runtime event kinds it subscribes to, whether it
    latches once per session, and its pure function with its validated config."""

    id: str
    subscribes: frozenset[str]
    fn: ProviderFn
    config: Mapping[str, Any] = field(default_factory=dict)
    once: bool = False

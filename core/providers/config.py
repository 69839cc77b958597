"""The providers configuration (SPEC §9.4): one TOML document, validated at load.

```toml
providers = ["-idle_nudge", "my_plugin"]   # `-id` disables a built-in; a plug-in is enabled by id
max_bytes_per_turn = 4096                  # optional budget of provider bodies per session and turn

[config.token_pressure]
thresholds = [0.70, 0.85, 0.95]

[[rules]]
id = "export-tip"
when = { content_pattern = "(?i)\\bexport\\b" }
reminder = { body = "Exports are under Settings > Data.", ttl_turns = 1 }
```

Every built-in is on unless disabled. Order of evaluation: the ids listed in `providers`, in
that order, then the remaining built-ins in the §9.3 order, then the rules in file order.
Errors carry a code: more than 8 distinct enabled rules and plug-ins is `HARN-RMD-007`
(the service does not start; built-ins are not counted); anything else malformed is
`HARN-RMD-001` naming the key.
Parsing the text is pure (`tomllib`); reading the file and discovering plug-ins (entry
points) is the caller's job.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.agent_events import RUNTIME_PAYLOADS, RuntimeEvent
from contracts.errors import ErrorCode, ReminderError
from contracts.state import SessionState
from core.providers.builtins import BUILTINS, ConfigProblem, builtin
from core.providers.model import PluginFn, Provider, ProviderResult, fired, skipped
from core.providers.rules import rule

#: At most this many distinct enabled providers and rules (SPEC §9.4).
MAX_ENABLED = 8
#: What a plug-in without a `subscribes` attribute subscribes to: every runtime event kind.
ALL_KINDS = frozenset(RUNTIME_PAYLOADS)
_TOP_KEYS = frozenset({"providers", "config", "rules", "max_bytes_per_turn"})


class ProvidersConfigError(ReminderError):
    """A configuration the service refuses to start with."""


@dataclass(frozen=True)
class ProvidersConfig:
    """The validated configuration: providers in evaluation order and the budget."""

    providers: tuple[Provider, ...]
    disabled: tuple[Provider, ...] = ()
    max_bytes_per_turn: int | None = None
    order: tuple[Provider, ...] = field(default=())
    """Enabled and disabled providers together, in evaluation order."""

    @property
    def enabled_ids(self) -> list[str]:
        """Ids of the enabled providers and rules, in evaluation order."""
        return [provider.id for provider in self.providers]


def _bad(message: str, **details: Any) -> ProvidersConfigError:
    return ProvidersConfigError(ErrorCode.INVALID_OPTION, message, details)


def plugin_provider(provider_id: str, fn: PluginFn, raw_config: Mapping[str, Any]) -> Provider:
    """A third-party callable as a provider: it returns a ReminderSpec dict to fire, None not
    to fire, or a `ProviderResult`; an optional `subscribes` attribute names its kinds
    (default all) and `once = True` makes it latch per session."""
    subscribes = getattr(fn, "subscribes", None)
    kinds = frozenset(subscribes) if subscribes else ALL_KINDS

    def call(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> ProviderResult:
        result = fn(view, event, config)
        if result is None:
            return skipped("predicate_false")
        if isinstance(result, ProviderResult):
            return result
        if isinstance(result, Mapping):
            return fired(result)
        return ProviderResult(
            "malformed_spec",
            error=f"HARN-RMD-006 provider returned a {type(result).__name__}, not a spec",
        )

    once = bool(getattr(fn, "once", False))
    return Provider(provider_id, kinds, call, dict(raw_config), once)


def _provider_list(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _bad("providers must be a list of provider ids", field="providers")
    return [item.strip() for item in value]


def parse_toml(text: str) -> dict[str, Any]:
    """The TOML document (raises `ProvidersConfigError`)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad(f"the providers config is not valid TOML: {exc}") from None


def parse_config(text: str, plugins: Mapping[str, PluginFn] | None = None) -> ProvidersConfig:
    """Parse and validate TOML text (raises `ProvidersConfigError`)."""
    return build_config(parse_toml(text), plugins or {})


def default_config() -> ProvidersConfig:
    """Every built-in with its defaults, no rules, no plug-ins, no budget."""
    return build_config({}, {})


def build_config(document: Mapping[str, Any], plugins: Mapping[str, PluginFn]) -> ProvidersConfig:
    """Validate a parsed configuration document (raises `ProvidersConfigError`)."""
    unknown = sorted(set(document) - _TOP_KEYS)
    if unknown:
        raise _bad(f"unknown option(s): {', '.join(unknown)}", unknown=unknown)
    listed = _provider_list(document.get("providers"))
    disabled_ids = {item[1:] for item in listed if item.startswith("-")}
    enabled_listed = [item for item in listed if not item.startswith("-")]
    for provider_id in [*disabled_ids, *enabled_listed]:
        if provider_id not in BUILTINS and provider_id not in plugins:
            raise _bad(f"unknown provider: {provider_id}", field="providers")
    for provider_id in disabled_ids:
        if provider_id not in BUILTINS:
            raise _bad(f"only a built-in can be disabled: {provider_id}", field="providers")
    configs = document.get("config", {})
    if not isinstance(configs, Mapping):
        raise _bad("config must be a table of [config.<provider_id>] tables", field="config")
    for provider_id, table in configs.items():
        if provider_id not in BUILTINS and provider_id not in plugins:
            raise _bad(f"config for an unknown provider: {provider_id}", field="config")
        if not isinstance(table, Mapping):
            raise _bad(f"config.{provider_id} must be a table", field=f"config.{provider_id}")
    order: list[str] = []
    for provider_id in [*enabled_listed, *BUILTINS]:
        if provider_id not in order:
            order.append(provider_id)
    providers: list[Provider] = []
    disabled: list[Provider] = []
    for provider_id in order:
        raw = configs.get(provider_id, {})
        try:
            if provider_id in BUILTINS:
                provider = builtin(provider_id, raw)
            else:
                provider = plugin_provider(provider_id, plugins[provider_id], raw)
        except ConfigProblem as exc:
            raise _bad(f"config.{provider_id}: {exc}", field=f"config.{provider_id}") from None
        (disabled if provider_id in disabled_ids else providers).append(provider)
    raw_rules = document.get("rules", [])
    if not isinstance(raw_rules, list):
        raise _bad("rules must be an array of tables ([[rules]])", field="rules")
    for raw_rule in raw_rules:
        try:
            provider = rule(raw_rule)
        except ConfigProblem as exc:
            raise _bad(str(exc), field="rules") from None
        if provider.id in {p.id for p in [*providers, *disabled]}:
            raise _bad(f"duplicate provider or rule id: {provider.id}", field="rules")
        providers.append(provider)
    # Built-ins are not counted (SPEC §9.4): every built-in can run beside eight of one's own.
    counted = [p.id for p in providers if p.id not in BUILTINS]
    if len(counted) > MAX_ENABLED:
        raise ProvidersConfigError(
            ErrorCode.TOO_MANY_PROVIDERS,
            f"{len(counted)} distinct rules and plug-ins are enabled; at most {MAX_ENABLED}",
            {"enabled": counted, "limit": MAX_ENABLED},
        )
    budget = document.get("max_bytes_per_turn")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    ):
        raise _bad("max_bytes_per_turn must be an integer ≥ 1", field="max_bytes_per_turn")
    ordered = order_by_position(providers, disabled, order)
    return ProvidersConfig(tuple(providers), tuple(disabled), budget, tuple(ordered))


def order_by_position(
    providers: list[Provider], disabled: list[Provider], order: list[str]
) -> list[Provider]:
    """Enabled and disabled providers together in evaluation order (rules last)."""
    position = {provider_id: index for index, provider_id in enumerate(order)}
    every = [*providers, *disabled]
    return sorted(every, key=lambda p: position.get(p.id, len(order) + every.index(p)))

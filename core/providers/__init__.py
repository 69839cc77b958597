"""The providers of SPEC §9 as pure functions: built-ins, declarative rules, plug-in wrapping,
configuration and `evaluate_event`. Imports only `contracts` and `core`; no I/O."""

from core.providers.config import (
    MAX_ENABLED,
    ProvidersConfig,
    ProvidersConfigError,
    build_config,
    default_config,
    parse_config,
)
from core.providers.evaluate import (
    NOT_IN_VIEW,
    evaluate_event,
    evaluation_request_id,
    provider_view,
)
from core.providers.model import PluginFn, Provider, ProviderResult, fired, skipped

__all__ = [
    "MAX_ENABLED",
    "NOT_IN_VIEW",
    "PluginFn",
    "Provider",
    "ProviderResult",
    "ProvidersConfig",
    "ProvidersConfigError",
    "build_config",
    "default_config",
    "evaluate_event",
    "evaluation_request_id",
    "fired",
    "parse_config",
    "provider_view",
    "skipped",
]

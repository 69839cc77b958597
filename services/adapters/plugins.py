"""Third-party providers (SPEC §9.4): Python callables registered under the entry-point
group `reminder_ledger.providers`, and the providers configuration file.

Discovery reads installed distributions' metadata, so it lives at this impure edge; the pure
`core.providers` receives the callables by id. A plug-in is loaded only when the
configuration enables it by id, so a broken plug-in that nobody enabled cannot stop the
service; one that is enabled and fails to load refuses the start with HARN-RMD-001.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from contracts.errors import ErrorCode
from core.providers import PluginFn, ProvidersConfig, ProvidersConfigError, default_config
from core.providers.config import build_config, parse_toml

ENTRY_POINT_GROUP = "reminder_ledger.providers"


class _LazyPlugins(Mapping[str, PluginFn]):
    """Installed plug-ins by id; each is imported on first access."""

    def __init__(self) -> None:
        self._points = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
        self._loaded: dict[str, PluginFn] = {}

    def __getitem__(self, name: str) -> PluginFn:
        if name not in self._loaded:
            try:
                loaded: Any = self._points[name].load()
            except KeyError:
                raise
            except Exception as exc:
                raise ProvidersConfigError(
                    ErrorCode.INVALID_OPTION,
                    f"plug-in {name} failed to load: {type(exc).__name__}",
                    {"plugin": name},
                ) from None
            if not callable(loaded):
                raise ProvidersConfigError(
                    ErrorCode.INVALID_OPTION, f"plug-in {name} is not callable", {"plugin": name}
                )
            self._loaded[name] = loaded
        return self._loaded[name]

    def __iter__(self) -> Any:
        return iter(self._points)

    def __len__(self) -> int:
        return len(self._points)

    def __contains__(self, name: object) -> bool:
        return name in self._points


def installed_plugins() -> Mapping[str, PluginFn]:
    """Every provider registered under `reminder_ledger.providers`, loaded on use."""
    return _LazyPlugins()


def load_providers_config(path: Path | None) -> ProvidersConfig:
    """The configuration in `path` (TOML), or the defaults when `path` is None; raises
    `ProvidersConfigError` with its code when it is malformed or cannot be read."""
    if path is None:
        return default_config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProvidersConfigError(
            ErrorCode.INVALID_OPTION,
            f"cannot read the providers config {path}: {exc.strerror or type(exc).__name__}",
        ) from None
    return build_config(parse_toml(text), installed_plugins())

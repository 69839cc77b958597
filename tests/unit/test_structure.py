"""Shape rules of the codebase: one handler per kind, a pure core, fresh schemas."""

from __future__ import annotations

import ast
from pathlib import Path

from contracts import commands, events
from contracts.schema_gen import SCHEMA_DIR, render_schemas
from core.decide import DECIDERS
from core.fold import FOLD_HANDLERS

ROOT = Path(__file__).resolve().parents[2]


def test_every_event_kind_has_exactly_one_fold_handler() -> None:
    assert set(FOLD_HANDLERS) == set(events.PAYLOADS)
    assert set(events.PAYLOADS) == set(events.EventKind.__args__)  # type: ignore[attr-defined]


def test_every_decided_command_has_a_decider() -> None:
    assert set(DECIDERS) == set(commands.DECIDED_COMMANDS)


def test_the_core_imports_only_contracts_pydantic_and_the_standard_library() -> None:
    forbidden = {"nats", "faststream", "asyncio", "time", "random", "services", "replay", "os"}
    for path in (ROOT / "core").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


#: Which layer may import which: the one statement of the architecture, enforced below.
#: Imports point down only. A worker (`services.<name>`) may import itself but no other worker.
LAYERS: dict[str, set[str]] = {
    "contracts": set(),
    "core": {"contracts"},
    "services.adapters": {"contracts", "core"},
    "services.runtime": {"contracts", "core", "services.adapters"},
    "services.consumer": {"contracts", "core", "services.adapters", "services.runtime"},
    "services.worker": {
        "contracts",
        "core",
        "services.adapters",
        "services.runtime",
        "services.consumer",
    },
    "services.workers": {
        "contracts",
        "core",
        "services.adapters",
        "services.runtime",
        "services.consumer",
        "services.worker",
    },
    "replay": {"contracts", "core", "services.adapters"},
    "client": {"contracts", "services.adapters"},
    "cli": {
        "contracts",
        "core",
        "services.adapters",
        "services.runtime",
        "services.consumer",
        "services.worker",
        "services.workers",
        "replay",
        "client",
    },
}
PROJECT = {"contracts", "core", "services", "replay", "client", "cli"}


def layer_of(module: str) -> tuple[str, str]:
    """(layer, package) of a dotted module name of the project."""
    parts = module.split(".")
    if parts[0] != "services":
        return parts[0], parts[0]
    if len(parts) == 1:
        return "services.workers", "services"
    if parts[1] in {"adapters", "runtime", "consumer", "workers"}:
        return f"services.{parts[1]}", f"services.{parts[1]}"
    return "services.worker", f"services.{parts[1]}"


def project_imports(path: Path) -> list[str]:
    """Every project module a file imports, anywhere in it (lazy imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] in PROJECT]


def test_every_import_points_down_the_layers() -> None:
    violations = []
    for top in sorted(PROJECT):
        for path in sorted((ROOT / top).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            layer, package = layer_of(module)
            assert layer in LAYERS, f"{module} is in no layer"
            for target in project_imports(path):
                target_layer, target_package = layer_of(target)
                same_package = target_package == package
                if not same_package and target_layer not in LAYERS[layer]:
                    violations.append(f"{module} imports {target}")
    assert violations == []


def test_every_worker_is_registered_and_the_cli_names_them_all() -> None:
    from cli.main import SERVICE_NAMES
    from services.workers import WORKERS

    packages = {path.parent.name for path in (ROOT / "services").glob("*/app.py")}
    assert set(WORKERS) == packages == set(SERVICE_NAMES)


def test_events_and_commands_are_frozen_and_forbid_unknown_keys() -> None:
    models = [events.Event, *events.PAYLOADS.values(), *commands.COMMANDS.values()]
    for model in models:
        assert model.model_config.get("frozen") is True, model
        assert model.model_config.get("extra") == "forbid", model


def test_the_checked_in_json_schemas_are_up_to_date() -> None:
    wanted = render_schemas()
    present = {path.name for path in SCHEMA_DIR.glob("*.json")}
    assert present == set(wanted), "run `reminders schemas`"
    for name, text in wanted.items():
        assert (SCHEMA_DIR / name).read_text(encoding="utf-8") == text, f"{name} is stale"


def test_the_checked_in_asyncapi_document_is_up_to_date() -> None:
    from cli.asyncapi import ASYNCAPI_PATH, render_asyncapi

    assert ASYNCAPI_PATH.read_text(encoding="utf-8") == render_asyncapi(), (
        "run `reminders asyncapi`"
    )


def test_the_asyncapi_document_names_every_subject_with_its_payload() -> None:
    import json

    from cli.asyncapi import ASYNCAPI_PATH

    document = json.loads(ASYNCAPI_PATH.read_text(encoding="utf-8"))
    channels = set(document["channels"])
    for op in commands.COMMANDS:
        assert f"reminders.v1.{op}" in channels
    assert {
        "reminders.v1.rpc",
        "transcript.reminder.{kind}.{session_token}",
        "reminders.v1.acp.{session_token}",
        "reminders.audit.forgotten",
    } <= channels
    assert {"Event", "Inject", "ReminderSpec"} <= set(document["components"]["schemas"])

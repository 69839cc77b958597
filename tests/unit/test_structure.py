"""Shape rules of the codebase: one handler per kind, a pure core, fresh schemas."""

from __future__ import annotations

import ast
import re
import sys
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


#: What the core may import besides the standard library: the contracts, itself, and pure
#: libraries (validation, canonical JSON, the providers' time-bounded regexes).
CORE_MAY_IMPORT = {"contracts", "core", "pydantic", "orjson", "regex"}
#: mutmut writes this import into its mutated copies of the core (docs/mutation-testing.md).
MUTMUT_TRAMPOLINE = "mutmut.mutation.trampoline"


def test_the_core_imports_only_contracts_pure_libraries_and_the_standard_library() -> None:
    forbidden = {"nats", "faststream", "asyncio", "time", "random", "services", "replay", "os"}
    allowed = (set(sys.stdlib_module_names) | CORE_MAY_IMPORT) - forbidden
    paths = sorted((ROOT / "core").rglob("*.py"))
    assert ROOT / "core" / "providers" / "rules.py" in paths  # sub-packages are walked too
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name == MUTMUT_TRAMPOLINE:
                    continue
                where = path.relative_to(ROOT)
                assert name.split(".")[0] in allowed, f"{where} imports {name}"


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
#: The benchmarks sit on top: they may use every package, and nothing imports them but the
#: tests (which are in no layer: they may import anything, and nothing may import them).
LAYERS["bench"] = LAYERS["cli"] | {"cli"}
PROJECT = {"contracts", "core", "services", "replay", "client", "cli", "bench"}


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
    # `tests` counts too: it is in no layer, so no package may import it (not even bench).
    return [name for name in names if name.split(".")[0] in PROJECT | {"tests"}]


def test_every_package_of_the_repository_is_in_a_layer() -> None:
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert packages - {"tests"} == PROJECT


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
    from cli.up import SERVICES
    from services.workers import WORKERS

    packages = {path.parent.name for path in (ROOT / "services").glob("*/app.py")}
    assert set(WORKERS) == packages == set(SERVICES)


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


#: Shapes of a lifecycle rule written out (dedupe victims, TTL pass, compaction survivors,
#: drains, propagation). They belong in `core/rules.py` only, which `decide` applies and
#: `replay/verify.py` re-derives from: a copy elsewhere drifts, and `--verify` then flags
#: legitimate logs.
RULE_SHAPES = re.compile(
    r"dedupe_key\s*==|not\s+\w+\.audit_only\s+and|ttl_remaining\s*[<>]"
    r"|fired_at_turn\s*(\bor\s+0\s*\)?\s*)?[<>]|fired_at\(.*\)\s*[<>]"
    r"|\.preserve_on_compact\s*(\]|\)|:|$|\bfor\b|\bif\b)"
    r"|propagate\s*==|\.mode\s+in\b|mode\s*==\s*\"audit_only\""
    # the providers' latches: once (§9.2) and a threshold already reported
    r"|fired_count\s*>|>=\s*level\b"
)


def test_lifecycle_rules_are_written_once_in_core_rules() -> None:
    places = [ROOT / "replay", ROOT / "services", ROOT / "cli", ROOT / "client", ROOT / "core"]
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for place in places
        for path in sorted(place.rglob("*.py"))
        if path != ROOT / "core" / "rules.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if RULE_SHAPES.search(line) and not line.lstrip().startswith(("#", '"""'))
    ]
    assert offenders == [], "move these rules into core/rules.py:\n" + "\n".join(offenders)


def test_verify_takes_its_rules_from_the_core() -> None:
    tree = ast.parse((ROOT / "replay" / "verify.py").read_text(encoding="utf-8"))
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "core.rules" in imported or any(
        isinstance(node, ast.ImportFrom)
        and node.module == "core"
        and "rules" in {alias.name for alias in node.names}
        for node in ast.walk(tree)
    )


def test_the_fold_scratch_has_exactly_the_session_state_fields_and_types() -> None:
    import dataclasses
    import typing

    from contracts.state import SessionState
    from core.fold import Scratch

    hints = typing.get_type_hints(Scratch)
    # The private fields are indexes of state lists (`_seen`, `_fired`), not state.
    scratch = {
        f.name: hints[f.name] for f in dataclasses.fields(Scratch) if not f.name.startswith("_")
    }
    state = {name: info.annotation for name, info in SessionState.model_fields.items()}
    assert list(scratch) == list(state)
    assert scratch == state


def test_thaw_then_freeze_gives_back_an_equal_state_that_shares_no_list() -> None:
    from contracts.state import DegradedMark, SessionState
    from core.fold import Scratch

    state = SessionState(
        session_id="s",
        seen_ids=["a"],
        counters={"queued": 1},
        degraded=DegradedMark(stream_seq=3, code="x"),
    )
    scratch = Scratch.thaw(state)
    scratch.seen_ids.append("b")
    scratch.counters["queued"] = 2
    assert state.seen_ids == ["a"] and state.counters == {"queued": 1}
    assert Scratch.thaw(state).freeze() == state
    frozen = scratch.freeze()
    scratch.seen_ids.append("c")
    assert frozen.seen_ids == ["a", "b"]


def test_release_gives_the_state_freeze_gives_and_thaw_builds_the_id_sets_on_first_use() -> None:
    from contracts.state import SessionState
    from core.fold import Scratch

    state = SessionState(session_id="s", seen_ids=["a"], fired_ids=["a"], counters={"q": 1})
    scratch = Scratch.thaw(state)
    scratch.see("a")
    scratch.see("b")
    scratch.fire("a")
    scratch.fire("b")
    assert scratch.seen_ids == ["a", "b"] and scratch.fired_ids == ["a", "b"]
    frozen = scratch.freeze()
    released = scratch.release()
    assert released == frozen
    assert released.seen_ids is scratch.seen_ids  # handed over, not copied
    assert state.seen_ids == ["a"] and state.fired_ids == ["a"]

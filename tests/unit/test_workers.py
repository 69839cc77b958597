"""The worker registry (`services/workers.py`) is the one list of workers: every other place
derives from it, and what a registered worker needs outside Python exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli import main as cli
from cli.up import SERVICES as UP_SERVICES
from services.adapters.settings import Settings
from services.workers import (
    DOCS_PATH,
    REGISTRY,
    WORKERS,
    RegisteredWorker,
    all_consumers,
    with_table,
)

ROOT = Path(__file__).resolve().parents[2]
AUTH_FILES = [ROOT / "k8s" / "base" / "nats-auth.conf"]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text("utf-8"))
IDS = [worker.name for worker in REGISTRY]


def test_the_workers_table_in_the_docs_is_current() -> None:
    current = DOCS_PATH.read_text(encoding="utf-8")
    assert current == with_table(current), "run `python -m services.workers`"


def test_the_table_is_replaced_in_place_and_the_prose_around_it_is_kept() -> None:
    document = "# Workers\n\nbefore\n\n" + with_table("")[2:] + "\nafter\n"
    stale = document.replace("`gateway`", "`old-gateway`")
    assert stale != document
    assert with_table(stale) == document


def test_the_deployments_mount_the_one_auth_file_the_test_reads() -> None:
    """compose and Kubernetes share k8s/base/nats-auth.conf: no other users file exists."""
    mounted = [volume.split(":")[0] for volume in COMPOSE["services"]["nats"]["volumes"]]
    assert "./k8s/base/nats-auth.conf" in mounted
    conf_files = [*ROOT.glob("deploy/**/*.conf"), *ROOT.glob("k8s/**/*.conf")]
    with_users = [path for path in conf_files if "authorization" in path.read_text("utf-8")]
    assert with_users == AUTH_FILES


@pytest.mark.parametrize("worker", REGISTRY, ids=IDS)
def test_every_worker_has_a_nats_user_in_the_auth_file(worker: RegisteredWorker) -> None:
    for path in AUTH_FILES:
        users = re.findall(r"user:\s*(\w+)\s*,", path.read_text(encoding="utf-8"))
        assert worker.nats_user in users, f"add user {worker.nats_user} to {path}"


@pytest.mark.parametrize("worker", REGISTRY, ids=IDS)
def test_every_worker_has_a_compose_service_that_serves_it_as_its_user(
    worker: RegisteredWorker,
) -> None:
    service = COMPOSE["services"].get(worker.compose_service)
    assert service is not None, f"add service {worker.compose_service} to docker-compose.yml"
    assert service["command"] == ["serve", worker.name]
    assert service["environment"]["REMINDERS_NATS_USER"] == worker.nats_user


@pytest.mark.parametrize("worker", REGISTRY, ids=IDS)
def test_every_worker_has_a_kubernetes_manifest_listed_in_the_base(
    worker: RegisteredWorker,
) -> None:
    path = ROOT / worker.k8s_manifest
    assert path.is_file(), f"add {worker.k8s_manifest}"
    base = yaml.safe_load((ROOT / "k8s" / "base" / "kustomization.yaml").read_text("utf-8"))
    assert path.name in base["resources"]
    documents = [doc for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc]
    [deployment] = [
        doc
        for doc in documents
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == worker.k8s_deployment
    ]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["serve", worker.name]
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["REMINDERS_NATS_USER"]["value"] == worker.nats_user
    assert worker.http_port_env in env


@pytest.mark.parametrize("worker", REGISTRY, ids=IDS)
def test_every_worker_reads_its_port_from_its_http_port_variable(
    worker: RegisteredWorker,
) -> None:
    assert Settings.from_env({worker.http_port_env: "18080"}).http_port == 18080


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("worker", REGISTRY, ids=IDS)
def test_the_registered_consumers_are_the_ones_the_worker_runs(
    worker: RegisteredWorker, partitions: int
) -> None:
    chosen = None if partitions == 1 else 1
    settings = Settings(projector_partitions=partitions, projector_partition=chosen)
    built = worker.factory(settings)
    assert built.name == worker.name
    assert worker.consumers(settings) == built.consumers()


def test_provision_and_doctor_see_every_partitions_durable() -> None:
    settings = Settings(projector_partitions=3, projector_partition=0)
    names = {(consumer.stream, consumer.name) for consumer in all_consumers(settings)}
    assert {("REMINDERS_PARTITIONED", f"projector_p{p}") for p in range(3)} <= names
    assert ("AGENT_EVENTS", "providers") in names


def test_up_starts_every_worker_and_one_projector_per_partition() -> None:
    assert tuple(WORKERS) == UP_SERVICES
    labels = [
        process.label
        for worker in REGISTRY
        for process in worker.processes_for(Settings(projector_partitions=2))
    ]
    assert labels == ["gateway", "projector-p0", "projector-p1", *IDS[2:]]
    assert IDS[1] == "projector"


def test_serve_offers_exactly_the_registered_workers() -> None:
    result = CliRunner().invoke(cli.app, ["serve", "nobody"])
    assert result.exit_code == 1
    assert f"choose one of: {', '.join(WORKERS)}" in result.output


#: Where Python lives in the repository (every package, the tests and the benchmarks).
SCANNED = ["contracts", "core", "services", "replay", "client", "cli", "bench", "tests"]


def hand_lists(path: Path) -> list[int]:
    """Lines of literal collections of strings naming every registered worker."""
    names = set(WORKERS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        items: list[ast.expr | None] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        strings = {
            item.value
            for item in items
            if isinstance(item, ast.Constant) and isinstance(item.value, str)
        }
        if names <= strings:
            found.append(node.lineno)
    return found


def test_nothing_but_the_registry_lists_the_workers_by_hand() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for top in SCANNED
        for path in sorted((ROOT / top).rglob("*.py"))
        if path != ROOT / "services" / "workers.py"
        for line in hand_lists(path)
    ]
    assert offenders == [], "derive these from services.workers.WORKERS"


def test_the_hand_list_check_finds_a_hand_list(tmp_path: Path) -> None:
    listing = tmp_path / "listing.py"
    listing.write_text(f"NAMES = {tuple(WORKERS)!r}\n", encoding="utf-8")
    assert hand_lists(listing) == [1]


def test_deployment_names_default_to_the_workers_name_and_an_entry_may_override_them() -> None:
    plain = RegisteredWorker("tally", "counts", WORKERS["observer"].factory, lambda s: [])
    assert (plain.nats_user, plain.compose_service, plain.k8s_deployment) == ("tally",) * 3
    assert plain.k8s_manifest == "k8s/base/tally.yaml"
    assert [p.label for p in plain.processes_for(Settings())] == ["tally"]
    named = RegisteredWorker(
        "tally", "counts", WORKERS["observer"].factory, lambda s: [], nats_user="counter"
    )
    assert named.nats_user == "counter" and named.compose_service == "tally"

"""The deployment files (Dockerfile, docker-compose.yml, deploy/, k8s/) against the schemas,
the CLI, the NATS users and each other (SPEC §6.1, §10, §11).

All offline: manifests are read from the files the kustomizations list (no kustomize binary,
no cluster, no Docker engine); the only process started is `nats-server -t`, which parses a
configuration and exits.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from cli import main as cli
from cli.embedded import nats_server_binary
from services.workers import WORKERS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
BASE = K8S / "base"
#: A recent Kubernetes release bundled with kubernetes-validate (>= 1.34 in pyproject).
KUBERNETES_VERSION = "1.34"
IMAGE = "reminder-ledger"
HTTP_PORT = 8080
OTLP_HTTP_PORT = 4318
#: The long-running services of SPEC §6.1, one Deployment and one compose container each:
#: every registered worker.
SERVICES = tuple(WORKERS)

Doc = dict[str, Any]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def documents(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def kustomization(directory: Path) -> Doc:
    loaded: Doc = load_yaml(directory / "kustomization.yaml")
    return loaded


def resource_files(directory: Path) -> list[Path]:
    """The files a kustomization's `resources` name, following directories (overlays)."""
    found: list[Path] = []
    for entry in kustomization(directory).get("resources", []):
        path = (directory / entry).resolve()
        found.extend(resource_files(path) if path.is_dir() else [path])
    return found


def generator_files(directory: Path) -> list[Path]:
    """The files the config map and secret generators read (`key=path` or `path`)."""
    found: list[Path] = []
    spec = kustomization(directory)
    for generator in [*spec.get("configMapGenerator", []), *spec.get("secretGenerator", [])]:
        for entry in [*generator.get("files", []), *generator.get("envs", [])]:
            found.append(directory / entry.split("=", 1)[-1])
    return found


KUSTOMIZATIONS = sorted(path.parent for path in K8S.rglob("kustomization.yaml"))
MANIFEST_FILES = sorted(
    {path for directory in KUSTOMIZATIONS for path in resource_files(directory)}
    | set((K8S / "jobs").glob("*.yaml"))
)
MANIFESTS = [(path, doc) for path in MANIFEST_FILES for doc in documents(path)]
BASE_MANIFESTS = [doc for path in resource_files(BASE) for doc in documents(path)]
COMPOSE: Doc = load_yaml(ROOT / "docker-compose.yml")


def manifest_id(path: Path, doc: Doc) -> str:
    name = doc["metadata"].get("name") or doc["metadata"].get("generateName", "?")
    return f"{path.relative_to(K8S)}:{doc['kind']}/{name}"


def of_kind(kind: str, docs: list[Doc] = BASE_MANIFESTS) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(kind: str, name: str) -> Doc:
    matches = [doc for doc in of_kind(kind) if doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def pod_spec(doc: Doc) -> Doc:
    spec: Doc = doc["spec"]["template"]["spec"]
    return spec


def image_entrypoint() -> list[str]:
    match = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", dockerfile(), re.MULTILINE)
    assert match, "the Dockerfile has no exec-form ENTRYPOINT"
    entrypoint: list[str] = json.loads(match.group(1))
    return entrypoint


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text(encoding="utf-8")


def k8s_argv(container: Doc) -> list[str]:
    """What a container of our image runs: its command, or the image's entrypoint, + args."""
    return [*(container.get("command") or image_entrypoint()), *container.get("args", [])]


def compose_argv(service: Doc) -> list[str]:
    entrypoint = service.get("entrypoint") or image_entrypoint()
    command = service.get("command", [])
    return [*entrypoint, *(command.split() if isinstance(command, str) else command)]


def runs_our_image(image: str | None) -> bool:
    return (image or "").split(":")[0].rsplit("/", 1)[-1] == IMAGE


def our_containers() -> Iterator[tuple[str, Doc]]:
    """Every container of our image in any manifest, as (where, container)."""
    for path, doc in MANIFESTS:
        spec = doc.get("spec", {})
        template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get(
            "template"
        )
        if not template:
            continue
        pod = template["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            if runs_our_image(container.get("image")):
                yield manifest_id(path, doc), container


def our_compose_services() -> dict[str, Doc]:
    return {
        name: service
        for name, service in COMPOSE["services"].items()
        if "build" in service or runs_our_image(service.get("image"))
    }


def reminders_arguments(argv: list[str]) -> list[str] | None:
    """The arguments after the `reminders` executable in argv, or None if it is not run."""
    for index, token in enumerate(argv):
        if token.rsplit("/", 1)[-1] == "reminders":
            return argv[index + 1 :]
    return None


def service_deployments() -> dict[str, Doc]:
    """Each `reminders serve X` Deployment of the base, by X."""
    found: dict[str, Doc] = {}
    for doc in of_kind("Deployment"):
        for container in pod_spec(doc)["containers"]:
            arguments = reminders_arguments(k8s_argv(container)) or []
            if arguments[:1] == ["serve"]:
                assert arguments[1] not in found, f"two Deployments serve {arguments[1]}"
                found[arguments[1]] = doc
    return found


def service_container(doc: Doc) -> Doc:
    containers: list[Doc] = pod_spec(doc)["containers"]
    ours = [c for c in containers if runs_our_image(c.get("image"))]
    assert len(ours) == 1
    return ours[0]


def env_of(container: Doc) -> dict[str, Doc]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def nats_users() -> dict[str, str]:
    """user -> the environment variable holding its password, from nats-auth.conf."""
    text = (BASE / "nats-auth.conf").read_text(encoding="utf-8")
    return dict(re.findall(r"user:\s*(\w+)\s*,\s*password:\s*\$(\w+)", text))


def nats_password_keys() -> dict[str, str]:
    """Environment variable of the nats StatefulSet -> the Secret key it is read from."""
    container = pod_spec(named("StatefulSet", "nats"))["containers"][0]
    return {
        name: entry["valueFrom"]["secretKeyRef"]["key"]
        for name, entry in env_of(container).items()
        if "secretKeyRef" in entry.get("valueFrom", {})
    }


# --- Kubernetes manifests -------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc", [doc for _, doc in MANIFESTS], ids=[manifest_id(p, d) for p, d in MANIFESTS]
)
def test_every_kubernetes_manifest_validates_against_the_kubernetes_schemas(doc: Doc) -> None:
    problem = None
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        problem = f"{'.'.join(str(part) for part in error.path)}: {error.message}"
    assert problem is None, problem


def test_the_base_kustomization_lists_every_file_in_k8s_base_and_nothing_else() -> None:
    listed = {path.resolve() for path in [*resource_files(BASE), *generator_files(BASE)]}
    present = {path.resolve() for path in BASE.iterdir() if path.name != "kustomization.yaml"}
    assert listed - present == set(), "listed but missing"
    assert present - listed == set(), "orphans: in k8s/base but not in kustomization.yaml"


def test_every_kustomization_names_files_and_patch_targets_that_exist() -> None:
    for directory in KUSTOMIZATIONS:
        for path in [*resource_files(directory), *generator_files(directory)]:
            assert path.exists(), f"{directory}: {path} does not exist"
        for patch in kustomization(directory).get("patches", []):
            target = patch["target"]
            assert any(
                doc["kind"] == target["kind"] and doc["metadata"]["name"] == target["name"]
                for doc in BASE_MANIFESTS
            ), f"{directory}: patch target {target} is not in k8s/base"


def test_pods_mount_only_generated_config_maps_and_read_only_secrets_of_the_base() -> None:
    spec = kustomization(BASE)
    config_maps = {generator["name"] for generator in spec.get("configMapGenerator", [])}
    secrets = {doc["metadata"]["name"]: doc for doc in of_kind("Secret")}
    for doc in [*of_kind("Deployment"), *of_kind("StatefulSet")]:
        pod = pod_spec(doc)
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, doc["metadata"]["name"]
        for container in pod["containers"]:
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in secrets, f"{doc['metadata']['name']}: {ref}"
                    assert ref["key"] in secrets[ref["name"]]["stringData"], ref


def test_there_is_one_deployment_per_service_and_a_container_for_each_in_compose() -> None:
    assert set(service_deployments()) == set(SERVICES)
    served = set()
    for service in our_compose_services().values():
        arguments = reminders_arguments(compose_argv(service)) or []
        if arguments[:1] == ["serve"]:
            served.add(arguments[1])
    assert served == set(SERVICES)


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_deployment_probes_healthz_and_readyz_on_port_8080(service: str) -> None:
    container = service_container(service_deployments()[service])
    ports = {port.get("name"): port["containerPort"] for port in container["ports"]}

    def probed(probe: str) -> tuple[str, int]:
        http = container[probe]["httpGet"]
        port = http["port"]
        return http["path"], ports[port] if isinstance(port, str) else port

    assert probed("livenessProbe") == ("/healthz", HTTP_PORT)
    assert probed("readinessProbe") == ("/readyz", HTTP_PORT)
    env = env_of(container)
    assert env["REMINDERS_HTTP_PORT"]["value"] == str(HTTP_PORT)
    assert env["REMINDERS_HTTP_HOST"]["value"] == "0.0.0.0"


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_deployment_has_resources_and_runs_as_non_root(service: str) -> None:
    deployment = service_deployments()[service]
    container = service_container(deployment)
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][bound]), bound
    pod = pod_spec(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    accounts = {doc["metadata"]["name"] for doc in of_kind("ServiceAccount")}
    assert pod["serviceAccountName"] in accounts
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_deployment_logs_in_to_nats_as_its_own_user(service: str) -> None:
    env = env_of(service_container(service_deployments()[service]))
    assert env["REMINDERS_NATS_USER"]["value"] == service
    assert env["REMINDERS_NATS_URL"]["value"] == "nats://nats:4222"
    assert "secretKeyRef" in env["REMINDERS_NATS_PASSWORD"]["valueFrom"]
    assert env["REMINDERS_REPLICAS"]["value"] == "3"
    assert env["OTEL_SERVICE_NAME"]["value"].endswith(service)


def test_every_deployment_and_the_nats_cluster_have_a_pod_disruption_budget() -> None:
    budgets = of_kind("PodDisruptionBudget")
    for doc in [*of_kind("Deployment"), *of_kind("StatefulSet")]:
        labels = doc["spec"]["template"]["metadata"]["labels"]
        covering = [
            pdb
            for pdb in budgets
            if pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(covering) == 1, f"{doc['metadata']['name']}: {len(covering)} budgets"


def test_the_replica_counts_match_each_services_role() -> None:
    deployments = service_deployments()
    autoscaler = named("HorizontalPodAutoscaler", "gateway")
    assert autoscaler["apiVersion"] == "autoscaling/v2"
    target = autoscaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == (
        "Deployment",
        deployments["gateway"]["metadata"]["name"],
    )
    assert autoscaler["spec"]["minReplicas"] >= 2
    metric = autoscaler["spec"]["metrics"][0]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    # The autoscaler owns the gateway's count; an apply must not reset it.
    assert "replicas" not in deployments["gateway"]["spec"]
    assert deployments["projector"]["spec"]["replicas"] == 2  # one pinned, one standby
    assert 1 <= deployments["propagator"]["spec"]["replicas"] <= 2
    assert deployments["observer"]["spec"]["replicas"] == 1


def test_the_nats_cluster_has_three_jetstream_nodes_routed_to_each_other() -> None:
    statefulset = named("StatefulSet", "nats")
    replicas = statefulset["spec"]["replicas"]
    headless = named("Service", statefulset["spec"]["serviceName"])
    assert replicas == 3
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    claims = statefulset["spec"]["volumeClaimTemplates"]
    container = pod_spec(statefulset)["containers"][0]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts[claims[0]["metadata"]["name"]] == "/data"
    config = (BASE / "nats.conf").read_text(encoding="utf-8")
    assert re.search(r"^jetstream\s*\{[^}]*store_dir:\s*/data/", config, re.MULTILINE)
    routes = re.findall(r"nats://([\w.-]+):6222", config)
    name, service = statefulset["metadata"]["name"], headless["metadata"]["name"]
    assert routes == [f"{name}-{index}.{service}" for index in range(replicas)]
    assert re.search(r"^include \./nats-auth\.conf$", config, re.MULTILINE)
    assert named("Service", "nats")["spec"]["ports"][0]["port"] == 4222
    image = container["image"]
    major, minor = re.match(r"nats:(\d+)\.(\d+)", image).groups()  # type: ignore[union-attr]
    assert (int(major), int(minor)) >= (2, 12), "atomic batch publish needs nats-server 2.12"


def test_the_network_policies_let_services_reach_only_nats_the_collector_and_dns() -> None:
    policy = named("NetworkPolicy", "reminders")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "reminders"}
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    egress_ports = {port["port"] for rule in policy["spec"]["egress"] for port in rule["ports"]}
    assert egress_ports == {4222, 4317, 4318, 53}
    ingress_ports = {port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]}
    assert ingress_ports == {HTTP_PORT}  # probes and /metrics
    nats = named("NetworkPolicy", "nats")
    clients = [rule for rule in nats["spec"]["ingress"] if rule["ports"][0]["port"] == 4222]
    services = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "reminders"}}}
    assert len(clients) == 1 and services in clients[0]["from"]
    for doc in service_deployments().values():
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "reminders"


# --- docker-compose.yml ---------------------------------------------------------------------


def test_docker_compose_yml_validates_against_the_compose_specification() -> None:
    vendor = files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendor.joinpath("compose-spec.json").read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{error.json_path}: {error.message}" for error in validator.iter_errors(COMPOSE)]
    assert errors == []


def test_compose_provisions_once_nats_is_healthy_then_runs_every_service_with_readyz() -> None:
    services = our_compose_services()
    provision = services["provision"]
    assert provision["command"] == ["provision"]
    assert provision["restart"] == "no"
    assert provision["depends_on"]["nats"]["condition"] == "service_healthy"
    assert provision["environment"]["REMINDERS_NATS_USER"] == "admin"
    for name, service in services.items():
        if "tools" in service.get("profiles", []) or name == "provision":
            continue
        test = service["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"], name
        assert f"127.0.0.1:{HTTP_PORT}/readyz" in test[3], name
        compile(test[3], f"{name} healthcheck", "exec")
        condition = service["depends_on"]["provision"]["condition"]
        assert condition == "service_completed_successfully", name
        env = service["environment"]
        assert env["REMINDERS_HTTP_PORT"] == str(HTTP_PORT)
        assert env["REMINDERS_HTTP_HOST"] == "0.0.0.0"
    assert services["propagator"]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert "tools" in services["doctor"]["profiles"]


def test_compose_gives_each_service_its_own_nats_user() -> None:
    for service in SERVICES:
        env = our_compose_services()[service]["environment"]
        assert env["REMINDERS_NATS_USER"] == service
        assert env["OTEL_SERVICE_NAME"].endswith(service)


def test_compose_mounts_the_shared_nats_auth_conf_next_to_nats_conf() -> None:
    nats = COMPOSE["services"]["nats"]
    mounts = dict(volume.split(":")[:2] for volume in nats["volumes"])
    config = nats["command"][nats["command"].index("--config") + 1]
    assert mounts["./deploy/nats.conf"] == config
    assert mounts["./k8s/base/nats-auth.conf"] == str(Path(config).parent / "nats-auth.conf")
    assert "jetstream" in (ROOT / "deploy" / "nats.conf").read_text(encoding="utf-8")
    image = nats["image"]
    assert image == pod_spec(named("StatefulSet", "nats"))["containers"][0]["image"]


# --- the CLI, the NATS users and passwords ----------------------------------------------------


def reminders_invocations() -> dict[tuple[str, ...], str]:
    """Every `reminders ...` that a manifest or the compose file runs, with one origin."""
    found: dict[tuple[str, ...], str] = {}
    for where, container in our_containers():
        arguments = reminders_arguments(k8s_argv(container))
        assert arguments is not None, f"{where} does not run reminders"
        found.setdefault(tuple(arguments), where)
    for name, service in COMPOSE["services"].items():
        argvs = [service.get("healthcheck", {}).get("test", [])[1:]]
        if name in our_compose_services():
            argvs.append(compose_argv(service))
        for argv in argvs:
            arguments = reminders_arguments(argv)
            if arguments is not None:
                found.setdefault(tuple(arguments), f"docker-compose.yml:{name}")
    return found


INVOCATIONS = reminders_invocations()


@pytest.mark.parametrize("arguments", list(INVOCATIONS), ids=[" ".join(a) for a in INVOCATIONS])
def test_every_reminders_command_that_a_deployment_runs_exists_in_the_cli(
    arguments: tuple[str, ...],
) -> None:
    where = INVOCATIONS[arguments]
    assert arguments, f"{where} runs reminders without a command"
    if arguments[0] == "serve":
        assert len(arguments) == 2 and arguments[1] in WORKERS, where
        arguments = arguments[:1]
    result = CliRunner().invoke(cli.app, [*arguments, "--help"])
    assert result.exit_code == 0, f"{where}: reminders {' '.join(arguments)}: {result.output}"


def test_the_nats_users_include_every_user_the_manifests_and_compose_log_in_as() -> None:
    users = nats_users()
    assert set(SERVICES) <= set(users)
    logged_in = {env_of(c)["REMINDERS_NATS_USER"]["value"] for _, c in our_containers()}
    logged_in |= {s["environment"]["REMINDERS_NATS_USER"] for s in our_compose_services().values()}
    assert logged_in <= set(users), logged_in - set(users)


def test_each_kubernetes_container_reads_the_password_nats_has_for_its_user() -> None:
    users, keys = nats_users(), nats_password_keys()
    assert set(keys) == set(users.values()), "the nats pods must get every user's password"
    for where, container in our_containers():
        env = env_of(container)
        user = env["REMINDERS_NATS_USER"]["value"]
        ref = env["REMINDERS_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref["key"] == keys[users[user]], where


def test_each_compose_service_uses_the_password_nats_has_for_its_user() -> None:
    users = nats_users()
    nats_env = COMPOSE["services"]["nats"]["environment"]
    assert set(nats_env) == set(users.values())
    for name, service in our_compose_services().items():
        env = service["environment"]
        assert env["REMINDERS_NATS_PASSWORD"] == nats_env[users[env["REMINDERS_NATS_USER"]]], name


@pytest.mark.parametrize(
    "config", [ROOT / "deploy" / "nats.conf", BASE / "nats.conf"], ids=["compose", "k8s"]
)
def test_the_nats_configuration_parses_with_nats_server_and_the_users(
    config: Path, tmp_path: Path
) -> None:
    (tmp_path / "nats.conf").write_text(config.read_text(encoding="utf-8"), encoding="utf-8")
    auth = (BASE / "nats-auth.conf").read_text(encoding="utf-8")
    (tmp_path / "nats-auth.conf").write_text(auth, encoding="utf-8")
    env = {variable: f"test-{variable.lower()}" for variable in nats_users().values()}
    env["POD_NAME"] = "nats-0"
    checked = subprocess.run(
        [nats_server_binary(), "-t", "-c", str(tmp_path / "nats.conf")],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

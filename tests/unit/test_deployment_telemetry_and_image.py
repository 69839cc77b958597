"""The deployment files, continued from `test_deployment.py`: the OpenTelemetry collector's
pipelines and the services' export to it, the image (tini, the non-root user, what it
copies), Prometheus scraping every service in compose and in Kubernetes, and Kubernetes'
provisioning job (SPEC §10, §11). All offline, as there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_deployment import (
    BASE,
    BASE_MANIFESTS,
    COMPOSE,
    HTTP_PORT,
    OTLP_HTTP_PORT,
    ROOT,
    SERVICES,
    dockerfile,
    env_of,
    image_entrypoint,
    k8s_argv,
    kustomization,
    load_yaml,
    named,
    our_compose_services,
    our_containers,
    pod_spec,
    reminders_arguments,
    service_container,
    service_deployments,
)

# --- the collector ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [ROOT / "deploy" / "otel-collector.yaml", BASE / "otel-collector-config.yaml"],
    ids=["compose", "k8s"],
)
def test_the_collector_pipelines_use_only_components_the_config_defines(config: Path) -> None:
    collector = load_yaml(config)
    pipelines = collector["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    for name, pipeline in pipelines.items():
        for section in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(section, [])) <= set(collector.get(section) or {}), name
    assert set(collector["service"].get("extensions", [])) <= set(collector["extensions"])
    http = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert http.endswith(f":{OTLP_HTTP_PORT}")
    assert "prometheus" in pipelines["metrics"]["exporters"]


def test_the_services_export_otlp_to_the_collector() -> None:
    endpoint = f"http://otel-collector:{OTLP_HTTP_PORT}"
    assert "otel-collector" in COMPOSE["services"]
    for name, service in our_compose_services().items():
        assert service["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint, name
    ports = {port["port"] for port in named("Service", "otel-collector")["spec"]["ports"]}
    assert OTLP_HTTP_PORT in ports
    for service, doc in service_deployments().items():
        env = env_of(service_container(doc))
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == endpoint, service


# --- the image ----------------------------------------------------------------------------------


def test_the_image_runs_reminders_under_tini_as_the_non_root_user_the_pods_declare() -> None:
    text = dockerfile()
    assert re.search(r"^FROM python:3\.11-slim\b|^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    users = re.findall(r"^USER\s+(\d+)(?::(\d+))?\s*$", text, re.MULTILINE)
    assert users, "the final stage must switch to a numeric non-root USER"
    uid = int(users[-1][0])
    assert uid != 0
    assert reminders_arguments(image_entrypoint()) == []
    for where, container in our_containers():
        assert container.get("command") is None, f"{where} overrides the image's entrypoint"
    for doc in service_deployments().values():
        assert pod_spec(doc)["securityContext"]["runAsUser"] == uid


def test_the_image_copies_every_installed_package_and_leaves_local_state_out() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    include = re.search(r"^include = \[(.*)\]$", pyproject, re.MULTILINE)
    assert include
    packages = {name.strip().strip('"').rstrip("*") for name in include.group(1).split(",")}
    copied = set(re.findall(r"^COPY (?!--from)(\S+)", dockerfile(), re.MULTILINE))
    assert packages <= copied
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".env", ".venv", "data"} <= ignored
    for source in copied:
        assert source not in ignored, f"{source} is copied but excluded by .dockerignore"
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile(), re.MULTILINE):
        for name in source.split():
            assert (ROOT / name).exists(), name


PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"


def test_compose_runs_prometheus_on_the_shipped_config_scraping_every_service() -> None:
    prometheus = COMPOSE["services"]["prometheus"]
    mounts = {
        volume.split(":")[1]: ROOT / volume.split(":")[0]
        for volume in prometheus["volumes"]
        if volume.startswith("./")
    }
    assert (
        mounts["/etc/prometheus/prometheus.yml"]
        == ROOT / "deploy/prometheus/prometheus.compose.yml"
    )
    assert mounts["/etc/prometheus/rules.yml"] == ROOT / "deploy/prometheus/rules.yml"
    assert all(path.is_file() for path in mounts.values()), mounts
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert all(port.startswith("127.0.0.1:") for port in prometheus["ports"])
    config = load_yaml(PROMETHEUS_DIR / "prometheus.compose.yml")
    assert config["rule_files"] == ["rules.yml"]
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "reminders"
    (dns,) = job["dns_sd_configs"]
    assert set(dns["names"]) == set(SERVICES) <= set(COMPOSE["services"])
    assert dns["port"] == HTTP_PORT


def test_kubernetes_prometheus_scrapes_every_replica_through_a_headless_service() -> None:
    deployments = service_deployments()
    for service in SERVICES:
        headless = named("Service", f"{service}-metrics")
        assert headless["spec"]["clusterIP"] == "None"
        pod_labels = deployments[service]["spec"]["template"]["metadata"]["labels"]
        assert headless["spec"]["selector"].items() <= pod_labels.items(), service
        (port,) = headless["spec"]["ports"]
        assert port["port"] == HTTP_PORT
        annotations = deployments[service]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(HTTP_PORT)
    config = load_yaml(BASE / "prometheus.yml")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "reminders"
    (dns,) = job["dns_sd_configs"]
    namespace = kustomization(BASE)["namespace"]
    assert set(dns["names"]) == {f"{service}-metrics.{namespace}.svc" for service in SERVICES}
    assert dns["port"] == HTTP_PORT
    generators = {g["name"]: g["files"] for g in kustomization(BASE)["configMapGenerator"]}
    assert set(generators["prometheus-config"]) == {
        "prometheus.yml",
        "rules.yml=prometheus-rules.yml",
    }
    assert config["rule_files"] == ["rules.yml"]


def test_the_up_scrape_config_reads_the_targets_up_writes() -> None:
    config = load_yaml(PROMETHEUS_DIR / "prometheus.up.yml")
    (job,) = config["scrape_configs"]
    (file_sd,) = job["file_sd_configs"]
    (path,) = file_sd["files"]
    # Relative to the config file: the default data dir (`./data`) from the repository root.
    assert (PROMETHEUS_DIR / path).resolve() == ROOT / "data" / "prometheus" / "targets.json"
    assert config["rule_files"] == ["rules.yml"]


def test_k8s_provisions_with_a_job_under_the_admin_user_and_services_only_check() -> None:
    [job] = [doc for doc in BASE_MANIFESTS if doc["kind"] == "Job"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert k8s_argv(container)[-1:] == ["provision"] or container["args"] == ["provision"]
    env = {item["name"]: item for item in container["env"]}
    assert env["REMINDERS_NATS_USER"]["value"] == "admin"
    assert env["REMINDERS_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "admin-password"
    auth = (BASE / "nats-auth.conf").read_text(encoding="utf-8")
    # Only the admin and the operator may reach the whole JetStream API.
    granted = [line for line in auth.splitlines() if '"$JS.API.>"' in line or '">"' in line]
    assert len(granted) == 2, granted

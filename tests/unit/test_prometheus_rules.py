"""The Prometheus files of deploy/prometheus and k8s/base: rules checked and unit-tested by
the real `promtool` (`check rules`, `test rules`, `check config`), and every metric they name
is one the services expose. promtool comes from Debian's `prometheus` package (.ci/run
installs it); the promtool tests skip with that reason when it is absent."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.test_metrics_exposition import exposition

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yml"
K8S_BASE = ROOT / "k8s" / "base"
PROMTOOL = shutil.which("promtool")
#: Metrics of services that do not exist yet (SPEC §9 providers), named by the rules anyway.
PLANNED = {"reminders_provider_evaluations_total"}

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is absent (apt-get install prometheus; .ci/run tries to)",
)


def promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> str:
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert "SUCCESS" in promtool("check", "rules", str(RULES))


@needs_promtool
def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    assert "SUCCESS" in promtool("test", "rules", "rules.test.yml")


@needs_promtool
@pytest.mark.parametrize("config", ["prometheus.up.yml", "prometheus.compose.yml"])
def test_promtool_checks_the_scrape_configs(config: str) -> None:
    assert "is valid prometheus config" in promtool("check", "config", config)


@needs_promtool
def test_promtool_checks_the_kubernetes_config_map_as_mounted(tmp_path: Path) -> None:
    # The ConfigMap puts prometheus.yml and rules.yml side by side in /etc/prometheus.
    shutil.copy(K8S_BASE / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(K8S_BASE / "prometheus-rules.yml", tmp_path / "rules.yml")
    output = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert "SUCCESS: 1 rule files found" in output


def test_the_kubernetes_rules_are_a_copy_of_the_shipped_rules() -> None:
    assert (K8S_BASE / "prometheus-rules.yml").read_bytes() == RULES.read_bytes()


def test_the_alerts_cover_lag_dlq_conflicts_rate_limits_and_providers() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    alerts = {
        rule["alert"]: rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    needed = {
        "reminders_projector_lag": "projector lag",
        "reminders_dlq_messages_total": "DLQ growth",
        "reminders_occ_conflicts": "OCC conflicts",
        'outcome="rate_limited"': "rate limiting",
        'reason=~"provider_error|malformed_spec"': "provider failures",
    }
    recorded = {
        rule["record"]: rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    expanded = [
        expr + " " + " ".join(body for name, body in recorded.items() if name in expr)
        for expr in alerts.values()
    ]
    for needle, what in needed.items():
        assert any(needle in expr for expr in expanded), f"no alert on {what}"
    tests = yaml.safe_load((PROMETHEUS_DIR / "rules.test.yml").read_text(encoding="utf-8"))
    tested = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert tested == set(alerts), f"alerts never shown firing: {set(alerts) - tested}"


def test_every_metric_the_rules_name_is_one_the_services_expose() -> None:
    exposed: set[str] = set()
    for name, (kind, samples) in exposition().items():
        exposed |= {sample.name for sample in samples}
        if kind == "histogram":
            exposed.add(f"{name}_bucket")
    named = set(re.findall(r"\breminders_[a-z0-9_]+", RULES.read_text(encoding="utf-8")))
    assert named - PLANNED, "the rules name no metric"
    assert named - PLANNED <= exposed, f"unknown metrics: {named - PLANNED - exposed}"

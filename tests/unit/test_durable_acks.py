"""Every shipped nats-server configuration fsyncs before it acks (`sync_interval: always`):
compose, Kubernetes, and the server `reminders up` embeds (docs/reliability.md says why)."""

from __future__ import annotations

import re
from pathlib import Path

from cli.embedded import EmbeddedNats, write_durable_config

ROOT = Path(__file__).resolve().parents[2]
SYNC_ALWAYS = re.compile(r"^jetstream\s*\{[^}]*^\s*sync_interval:\s*always\s*$", re.M | re.S)


def test_compose_and_kubernetes_sync_every_write() -> None:
    for config in (ROOT / "deploy" / "nats.conf", ROOT / "k8s" / "base" / "nats.conf"):
        assert SYNC_ALWAYS.search(config.read_text(encoding="utf-8")), config


def test_the_embedded_server_of_up_syncs_every_write(tmp_path: Path) -> None:
    config = write_durable_config(tmp_path / "nats-server.conf")
    assert SYNC_ALWAYS.search(config.read_text(encoding="utf-8"))
    server = EmbeddedNats(tmp_path / "store", config_file=config)
    assert server.command()[-2:] == ["-c", str(config)]
    up = (ROOT / "cli" / "up.py").read_text(encoding="utf-8")
    assert "config_file=write_durable_config(" in up

"""`reminders up`/`provision` against a cluster still forming waits and retries within a bound
instead of exiting on "no suitable peers for placement" (issue #23)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest
from nats.js.errors import APIError

from cli.provision import cluster_forming, provision_all
from services.adapters.connection import connect
from services.adapters.settings import Settings
from tests.faults.harness import Cluster, ClusterNode


def test_placement_and_election_errors_are_not_yet_and_others_are_no() -> None:
    assert cluster_forming(APIError(code=500, err_code=10005, description="no suitable peers"))
    assert cluster_forming(APIError(code=503, err_code=10008, description="unavailable"))
    assert not cluster_forming(APIError(code=400, err_code=10058, description="name in use"))
    assert not cluster_forming(ValueError("a config that contradicts SPEC §3.1"))


def _wait_until_serving(nodes: list[ClusterNode]) -> None:
    """Until each of `nodes` answers `/varz` (`/healthz` waits for JetStream, which waits
    for the missing peer)."""
    deadline = time.monotonic() + 60
    for node in nodes:
        while True:
            try:
                url = f"http://{node.host}:{node.monitor_port}/varz"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    json.load(answer)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


async def test_provisioning_r3_waits_for_the_third_node(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    try:
        # A fresh cluster whose third peer is not up (yet): R3 has no suitable peers.
        # Never started, rather than started and killed: for a while after a kill the meta
        # leader still counts a peer it has met and may place a replica on it; with the
        # third peer never seen, JetStream is not available until it comes.
        for node in cluster.nodes:
            node.write_config()
        for node in cluster.nodes[:2]:
            node.spawn()
        await asyncio.to_thread(_wait_until_serving, cluster.nodes[:2])
        settings = Settings.from_env({}, nats_url=cluster.nodes[0].url, replicas=3)
        nc = await connect(settings, "provision-forming")
        try:
            with pytest.raises(Exception) as refused:
                await provision_all(nc, settings, wait_s=1.0)
            assert cluster_forming(refused.value), refused.value
            started = time.monotonic()
            provisioning = asyncio.create_task(provision_all(nc, settings, wait_s=60))
            await asyncio.sleep(3.0)
            assert not provisioning.done()
            await asyncio.to_thread(cluster.nodes[2].spawn)
            done = await asyncio.wait_for(provisioning, timeout=90)
            assert {settings.stream, f"KV_{settings.kv_bucket}"} <= set(done)
            assert time.monotonic() - started >= 3.0
        finally:
            await nc.close()
    finally:
        cluster.stop()

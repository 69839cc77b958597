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
from tests.faults.harness import Cluster


def test_placement_and_election_errors_are_not_yet_and_others_are_no() -> None:
    assert cluster_forming(APIError(code=500, err_code=10005, description="no suitable peers"))
    assert cluster_forming(APIError(code=503, err_code=10008, description="unavailable"))
    assert not cluster_forming(APIError(code=400, err_code=10058, description="name in use"))
    assert not cluster_forming(ValueError("a config that contradicts SPEC §3.1"))


def _wait_until_the_meta_leader_counts_it_gone(cluster: Cluster, name: str) -> None:
    """Until the meta leader's `/jsz` lists peer `name` as not current. For some seconds after
    a kill the leader still counts the peer and may place a replica on it, so a refusal
    asserted before that depends on how fast the server notices."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for node in cluster.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            url = f"http://{node.host}:{node.monitor_port}/jsz"
            with urllib.request.urlopen(url, timeout=2) as answer:
                meta = json.load(answer).get("meta_cluster") or {}
            if meta.get("leader") != node.name:
                continue
            peers = {peer.get("name"): peer for peer in meta.get("replicas") or []}
            if name in peers and not peers[name].get("current"):
                return
        time.sleep(0.2)
    raise AssertionError(f"the meta leader still counts {name} after 60 s")


async def test_provisioning_r3_waits_for_the_third_node(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    try:
        # A fresh cluster whose third peer is not up (yet): R3 has no suitable peers.
        cluster.start()
        cluster.kill(2)
        await asyncio.to_thread(
            _wait_until_the_meta_leader_counts_it_gone, cluster, cluster.nodes[2].name
        )
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

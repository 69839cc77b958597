"""`bench.projector_floor`'s bucket layers really store what a projector must: after each
batch, every session it touched holds that session's last event of the batch, written with
compare-and-set, whether the layer reads the sessions first or keeps their revisions."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from bench.fold_profile import build_log
from bench.projector_floor import BUCKET_LAYERS, bucket_layer
from contracts.subjects import last_token
from services.adapters.records import KvSessionStore
from services.adapters.settings import Settings


@pytest.mark.parametrize("layer", sorted(BUCKET_LAYERS))
async def test_each_batch_leaves_every_touched_session_its_last_event(
    nc: Client, provisioned: Settings, layer: str
) -> None:
    log = build_log(20, 4.6, 10)
    settle = await bucket_layer(provisioned.kv_bucket, BUCKET_LAYERS[layer])(nc)
    half = len(log) // 2
    last: dict[str, bytes] = {}
    store = KvSessionStore(
        await nc.jetstream().key_value(provisioned.kv_bucket), nc, provisioned.kv_bucket
    )
    for batch in (log[:half], log[half:]):
        for subject, data, _ in batch:
            last[last_token(subject)] = data
        await settle([Msg(nc, subject=subject, data=data) for subject, data, _ in batch])
        found = await store.read_many(sorted(last))
        assert {token: value for token, (value, _) in found.items()} == last
    # Every session written once per batch that touched it: the second batch's writes
    # followed the first's revisions, or the layer would have raised on a stale one.
    touched_twice = {last_token(s) for s, _, _ in log[:half]} & {
        last_token(s) for s, _, _ in log[half:]
    }
    assert touched_twice

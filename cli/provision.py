"""`reminders provision`: create or update every stream, the bucket and every worker's durable
consumer, idempotently — the one step that needs JetStream admin rights (SPEC §10).

`up` runs it before it starts the services; compose runs it as a one-shot and Kubernetes as a
Job. The services themselves only check what it made.

A cluster that is still forming (its meta leader not yet elected, or fewer peers up than the
streams' replicas: "no suitable peers for placement") is waited for, within `wait_s`, with
backoff; any other error, or the bound passed, is raised as is.
"""

from __future__ import annotations

import asyncio
import random
import time

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from services.adapters.provisioning import ensure_consumer, provision
from services.adapters.settings import Settings
from services.workers import all_consumers

#: JetStream errors of a cluster still forming: no suitable peers for placement (10005) and
#: JetStream temporarily unavailable (10008, also any 503: no meta leader yet).
FORMING_ERR_CODES = frozenset({10005, 10008})

#: How long `provision_all` waits for a forming cluster by default.
PROVISION_WAIT_S = 60.0


def cluster_forming(exc: BaseException) -> bool:
    """Whether a provisioning error means "not yet" rather than "no"."""
    if isinstance(exc, NoRespondersError | NatsTimeoutError | TimeoutError):
        return True
    if getattr(exc, "err_code", None) in FORMING_ERR_CODES:
        return True
    return getattr(exc, "code", None) == 503 or "no suitable peers" in str(exc)


async def provision_once(nc: Client, settings: Settings) -> dict[str, str]:
    """What was created, updated or left unchanged, by name."""
    done = await provision(nc.jetstream(), settings)
    for durable in all_consumers(settings):
        done[f"{durable.stream}/{durable.name}"] = await ensure_consumer(nc, durable)
    return done


async def provision_all(
    nc: Client, settings: Settings, wait_s: float = PROVISION_WAIT_S
) -> dict[str, str]:
    """`provision_once`, retried with jittered backoff while the cluster is still forming, for
    at most `wait_s` seconds (every step is idempotent, so a retry redoes nothing twice)."""
    deadline = time.monotonic() + wait_s
    delay = 0.25
    while True:
        try:
            return await provision_once(nc, settings)
        except Exception as exc:
            left = deadline - time.monotonic()
            if not cluster_forming(exc) or left <= 0:
                raise
            await asyncio.sleep(min(left, delay * (0.5 + random.random())))
            delay = min(delay * 2, 2.0)

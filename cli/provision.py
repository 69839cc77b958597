"""`reminders provision`: create or update every stream, the bucket and every worker's durable
consumer, idempotently — the one step that needs JetStream admin rights (SPEC §10).

`up` runs it before it starts the services; compose runs it as a one-shot and Kubernetes as a
Job. The services themselves only check what it made.
"""

from __future__ import annotations

from nats.aio.client import Client

from services.adapters.provisioning import ensure_consumer, provision
from services.adapters.settings import Settings
from services.workers import all_consumers


async def provision_all(nc: Client, settings: Settings) -> dict[str, str]:
    """What was created, updated or left unchanged, by name."""
    done = await provision(nc.jetstream(), settings)
    for durable in all_consumers(settings):
        done[f"{durable.stream}/{durable.name}"] = await ensure_consumer(nc, durable)
    return done

"""`reminders provision`: create or update every stream, the bucket and every worker's durable
consumer, idempotently — the one step that needs JetStream admin rights (SPEC §10).

`up` runs it before it starts the services; compose runs it as a one-shot and Kubernetes as a
Job. The services themselves only check what it made.
"""

from __future__ import annotations

from nats.aio.client import Client

from services.adapters.provisioning import ensure_consumer, provision
from services.adapters.settings import Settings
from services.workers import WORKERS


async def provision_all(nc: Client, settings: Settings) -> dict[str, str]:
    """What was created, updated or left unchanged, by name."""
    # Every partition's durable, whichever one this process's environment names.
    settings = settings.model_copy(update={"projector_partition": None})
    done = await provision(nc.jetstream(), settings)
    for make in WORKERS.values():
        for durable in make(settings).consumers():
            done[f"{durable.stream}/{durable.name}"] = await ensure_consumer(nc, durable)
    return done

"""Which consumer a projector reads, and how a partitioned copy becomes the event it copies.

With one partition (the default) the projector reads the durable `projector` on `REMINDERS`,
exactly as SPEC §6.3 says. With `REMINDERS_PROJECTOR_PARTITIONS=N` each projector process
runs one partition `REMINDERS_PROJECTOR_PARTITION=p`: it pulls `projector_p<p>` on the view
`REMINDERS_PARTITIONED` (`services.adapters.partitions`), and sees every copy under its
original subject and `REMINDERS` sequence, so the fold, the KV record (`stream_seq`), the
dead-letter copy and every query's wait are the same as with one projector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.msg import Msg

from contracts.subjects import EVENT_SUBJECTS
from services.adapters.partitions import (
    H_STREAM_SOURCE,
    origin_of,
    partition_durable,
    partition_filter,
    partition_stream,
)
from services.adapters.provisioning import DurableConsumer
from services.adapters.settings import Settings
from services.projector.adapters import NatsDelivery
from services.projector.consumer import pinned_consumer_config
from services.runtime import WorkerProcess

DURABLE = "projector"
GROUP = "projector"
PRIORITY_TIMEOUT_S = 3.0


class SourcedDelivery(NatsDelivery):
    """A copy from the partitioned view, seen as the `REMINDERS` message it copies.

    A copy whose origin cannot be read keeps the view's own five-token subject, which the
    projector's subject check rejects as poison (SPEC §6.3): it is dead-lettered, not guessed.
    """

    def __init__(self, message: Msg, origin_stream: str) -> None:
        super().__init__(message)
        header = message.headers.get(H_STREAM_SOURCE) if message.headers else None
        origin = origin_of(self.subject, header, origin_stream)
        if origin is not None:
            self.subject, self.stream_seq = origin


@dataclass(frozen=True)
class ProjectorSource:
    """The stream and durable one projector process pulls, and how it reads a message."""

    stream: str
    durable: str
    wrap: Callable[[Msg], NatsDelivery]


def projector_consumers(settings: Settings) -> list[DurableConsumer]:
    """The durables this projector needs; with N partitions and none chosen, all of them
    (what `reminders provision` creates)."""
    if settings.projector_partitions == 1:
        config = pinned_consumer_config(
            DURABLE, GROUP, EVENT_SUBJECTS, priority_timeout_s=PRIORITY_TIMEOUT_S
        )
        return [DurableConsumer(settings.stream, config)]
    chosen = settings.projector_partition
    partitions = range(settings.projector_partitions) if chosen is None else [chosen]
    view = partition_stream(settings)
    return [
        DurableConsumer(
            view,
            pinned_consumer_config(
                partition_durable(p),
                GROUP,
                partition_filter(p),
                priority_timeout_s=PRIORITY_TIMEOUT_S,
            ),
        )
        for p in partitions
    ]


def projector_source(settings: Settings) -> ProjectorSource:
    """What this process pulls. Raises `ValueError` when partitioned without a partition."""
    if settings.projector_partitions == 1:
        return ProjectorSource(settings.stream, DURABLE, NatsDelivery)
    if settings.projector_partition is None:
        raise ValueError(
            f"REMINDERS_PROJECTOR_PARTITIONS={settings.projector_partitions}: set "
            "REMINDERS_PROJECTOR_PARTITION to the partition this projector runs (0 … N-1)"
        )
    origin = settings.stream
    return ProjectorSource(
        partition_stream(settings),
        partition_durable(settings.projector_partition),
        lambda message: SourcedDelivery(message, origin),
    )


def projector_processes(settings: Settings) -> list[WorkerProcess]:
    """The projector processes to run: one, or one per partition (`projector-p<p>`, each
    told its partition) when REMINDERS_PROJECTOR_PARTITIONS > 1."""
    if settings.projector_partitions == 1:
        return [WorkerProcess(DURABLE, {})]
    return [
        WorkerProcess(
            f"{DURABLE}-p{partition}",
            {
                "REMINDERS_PROJECTOR_PARTITIONS": str(settings.projector_partitions),
                "REMINDERS_PROJECTOR_PARTITION": str(partition),
            },
        )
        for partition in range(settings.projector_partitions)
    ]

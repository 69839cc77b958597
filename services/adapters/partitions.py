"""The partitioned projection layout: a work-queue view of `REMINDERS`, split by session.

JetStream consumers filter by subject tokens, never by a hash of one, and the stored subjects
stay as SPEC §3.2 says. So with `REMINDERS_PROJECTOR_PARTITIONS=N` (N > 1) `reminders
provision` adds a stream `<stream>_PARTITIONED` with no subjects of its own that *sources*
`REMINDERS` through the server's deterministic `partition(N, 2)` mapping on the session token:

    transcript.reminder.<kind>.<token>  ->  reminders.part.<p>.<kind>.<token>

and one durable consumer `projector_p<p>` per partition, filtering `reminders.part.<p>.>`.
A session always maps to the same partition, and the source copies in stream order, so each
partition sees each of its sessions' events in order. Every copy carries the header
`Nats-Stream-Source: <stream> <origin seq> <filter> <transform> <origin subject> <id>`
(nats-server 2.15), which gives back the `REMINDERS` sequence the projection records.

Work-queue retention deletes a copy once its partition acked it, so the view holds only what
is not yet projected: it is a queue, not a second log, and a forgotten session's bodies do
not outlive their projection there.
"""

from __future__ import annotations

from typing import Final

from nats.js.api import RetentionPolicy, StorageType, StreamConfig, StreamSource, SubjectTransform

from contracts.subjects import EVENT_PREFIX
from services.adapters.settings import Settings

PARTITION_PREFIX: Final = "reminders.part"
DURABLE_PREFIX: Final = "projector_p"
H_STREAM_SOURCE: Final = "Nats-Stream-Source"


def partition_stream(settings: Settings) -> str:
    """The view's name: `REMINDERS_PARTITIONED` by default."""
    return f"{settings.stream}_PARTITIONED"


def partition_transform(partitions: int) -> SubjectTransform:
    """The source's mapping: the session token (wildcard 2) picks the partition."""
    return SubjectTransform(
        src=f"{EVENT_PREFIX}.*.*",
        dest=f"{PARTITION_PREFIX}.{{{{partition({partitions},2)}}}}"
        ".{{wildcard(1)}}.{{wildcard(2)}}",
    )


def partition_filter(partition: int) -> str:
    """What partition `p`'s consumer reads: `reminders.part.<p>.>`."""
    return f"{PARTITION_PREFIX}.{partition}.>"


def partition_durable(partition: int) -> str:
    """Partition `p`'s durable consumer (its replicas share it as one pinned group)."""
    return f"{DURABLE_PREFIX}{partition}"


def partition_stream_config(settings: Settings) -> StreamConfig:
    """The work-queue view that sources `REMINDERS` split into N partitions."""
    return StreamConfig(
        name=partition_stream(settings),
        subjects=[],
        storage=StorageType.FILE,
        retention=RetentionPolicy.WORK_QUEUE,
        num_replicas=settings.replicas,
        sources=[
            StreamSource(
                name=settings.stream,
                subject_transforms=[partition_transform(settings.projector_partitions)],
            )
        ],
    )


def source_contradictions(existing: StreamConfig, wanted: StreamConfig) -> list[str]:
    """A view sourcing another stream, or with another partition count, is not an update.

    Changing N re-maps sessions to partitions while copies are still queued under the old
    mapping, so it is a hand-over (docs/scaling.md), never a silent stream update.
    """

    def shape(config: StreamConfig) -> list[tuple[str, list[tuple[str, str]]]]:
        return [
            (
                source.name,
                [(t.src or "", t.dest or "") for t in source.subject_transforms or []],
            )
            for source in config.sources or []
        ]

    if shape(existing) == shape(wanted):
        return []
    return [
        f"sources are {shape(existing)}, wanted {shape(wanted)} "
        "(a new partition count is a hand-over: see docs/scaling.md)"
    ]


def origin_of(subject: str, source_header: str | None, stream: str) -> tuple[str, int] | None:
    """The event's `REMINDERS` subject and sequence, from its copy in the view.

    The subject is rebuilt from the copy's own (`reminders.part.<p>.<kind>.<token>`), and the
    sequence is read from `Nats-Stream-Source` only when that header names `stream`; anything
    else is None, and the caller treats the copy as what the subject check calls poison.
    """
    tokens = subject.split(".")
    prefix = PARTITION_PREFIX.split(".")
    if len(tokens) != len(prefix) + 3 or tokens[: len(prefix)] != prefix or not source_header:
        return None
    fields = source_header.split(" ")
    if len(fields) < 2 or fields[0] != stream or not fields[1].isdigit():
        return None
    origin = f"{EVENT_PREFIX}.{tokens[-2]}.{tokens[-1]}"
    if len(fields) >= 5 and fields[4] != origin:
        return None  # the server also names the origin subject: it must be the one rebuilt
    return origin, int(fields[1])

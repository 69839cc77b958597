"""The partitioned projection layout without a server: names, settings and origin headers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.adapters.partitions import origin_of, partition_stream_config
from services.adapters.settings import Settings
from services.projector.partitions import projector_consumers, projector_source

HEADER = (
    "REMINDERS 42 transcript.reminder.*.* "
    "reminders.part.{{partition(3,2)}}.{{wildcard(1)}}.{{wildcard(2)}} "
    "transcript.reminder.fired.s1 IGN3jwE5"
)


def test_a_copy_reads_back_as_its_origin_subject_and_sequence() -> None:
    origin = origin_of("reminders.part.2.fired.s1", HEADER, "REMINDERS")
    assert origin == ("transcript.reminder.fired.s1", 42)


@pytest.mark.parametrize(
    ("subject", "header", "stream"),
    [
        ("reminders.part.2.fired.s1", None, "REMINDERS"),
        ("reminders.part.2.fired.s1", HEADER, "OTHER"),
        ("reminders.part.2.fired.s2", HEADER, "REMINDERS"),  # the server names another subject
        ("reminders.part.2.fired.s1", "REMINDERS x", "REMINDERS"),
        ("reminders.part.fired.s1", HEADER, "REMINDERS"),
        ("elsewhere.part.2.fired.s1", HEADER, "REMINDERS"),
    ],
)
def test_a_copy_whose_origin_cannot_be_confirmed_has_none(
    subject: str, header: str | None, stream: str
) -> None:
    assert origin_of(subject, header, stream) is None


def test_the_default_is_one_projector_on_the_event_stream() -> None:
    settings = Settings()
    [durable] = projector_consumers(settings)
    assert (durable.stream, durable.name) == ("REMINDERS", "projector")
    assert durable.config["filter_subject"] == "transcript.reminder.>"
    source = projector_source(settings)
    assert (source.stream, source.durable) == ("REMINDERS", "projector")


def test_partitions_have_one_durable_each_on_the_view() -> None:
    settings = Settings.from_env({"REMINDERS_PROJECTOR_PARTITIONS": "3"})
    consumers = projector_consumers(settings)
    assert [(c.stream, c.name, c.config["filter_subject"]) for c in consumers] == [
        ("REMINDERS_PARTITIONED", f"projector_p{p}", f"reminders.part.{p}.>") for p in range(3)
    ]
    with pytest.raises(ValueError, match="REMINDERS_PROJECTOR_PARTITION"):
        projector_source(settings)
    one = settings.model_copy(update={"projector_partition": 2})
    assert [c.name for c in projector_consumers(one)] == ["projector_p2"]
    assert projector_source(one).durable == "projector_p2"
    [source] = partition_stream_config(settings).sources or []
    [transform] = source.subject_transforms or []
    assert transform.src == "transcript.reminder.*.*"
    assert transform.dest == "reminders.part.{{partition(3,2)}}.{{wildcard(1)}}.{{wildcard(2)}}"


def test_a_partition_outside_the_count_is_refused() -> None:
    with pytest.raises(ValidationError, match="not below"):
        Settings.from_env(
            {"REMINDERS_PROJECTOR_PARTITIONS": "2", "REMINDERS_PROJECTOR_PARTITION": "2"}
        )

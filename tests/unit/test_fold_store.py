"""The whole-stream fold of `rebuild` and `verify-projection` (replay.fold_store): messages
kept in partition files while the stream is read, then folded partition by partition, give
each session the record folding its whole log at once gives, whether a partition's sessions
fit the cache or are spilled and read back."""

from __future__ import annotations

import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from unittest.mock import patch

import orjson
import pytest

from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import last_token
from core.projection import project_all
from replay import fold_store
from replay.fold_store import FoldStore
from services.adapters.record_codec import encode_state
from services.adapters.session_read import RawStored
from tests.support import session_log, stored

SESSIONS = 12


def interleaved_log() -> list[StoredEvent]:
    """Twelve sessions' logs, one event of each in turn, numbered in that order."""
    logs = [stored(session_log(f"s{index}")) for index in range(SESSIONS)]
    rows = []
    for position in range(max(map(len, logs))):
        rows += [log[position] for log in logs if position < len(log)]
    return [StoredEvent(row.envelope, seq, row.subject) for seq, row in enumerate(rows, 1)]


def whole_log_records(rows: list[StoredEvent]) -> dict[str, bytes]:
    """Each session folded at once from its whole log."""
    by_token: dict[str, list[StoredEvent]] = {}
    for row in rows:
        by_token.setdefault(last_token(row.subject), []).append(row)
    folded = {}
    for token, own in by_token.items():
        record, _ = project_all(None, own)
        assert isinstance(record, SessionState)
        folded[token] = encode_state(record)
    return folded


@pytest.mark.parametrize(
    ("partitions", "cache_sessions", "spills", "workers"),
    [
        (256, 4096, False, 1),
        (1, 4096, False, 1),
        (3, 2, True, 1),
        (1, 1, True, 1),
        # Folded by worker processes, each file's sessions merged into the store's.
        (4, 4096, False, 2),
        (3, 2, True, 2),
    ],
)
def test_each_session_folds_to_its_whole_log_record(
    partitions: int, cache_sessions: int, spills: bool, workers: int
) -> None:
    rows = interleaved_log()
    with FoldStore(cache_sessions, partitions, workers=workers, workers_from=0) as store:
        for row in rows:
            store.add(RawStored(orjson.dumps(row.envelope), row.stream_seq, row.subject, 0))
        assert store.finish() == SESSIONS
        folded = [session for chunk in store.sessions(5) for session in chunk]
        # Read back only when a partition's sessions outgrow the cache.
        assert (store.reloaded > 0) is spills
    expected = whole_log_records(rows)
    assert [session.token for session in folded] == sorted(expected)
    assert all(isinstance(session.record, SessionState) for session in folded)
    assert {
        session.token: encode_state(session.record)  # type: ignore[arg-type]
        for session in folded
    } == expected
    for session in folded:
        # The bytes to write, and what a rebuild decides on, kept beside them undecoded.
        record = session.record
        assert isinstance(record, SessionState)
        assert session.encoded == expected[session.token]
        assert (session.session_id, session.state_seq, session.degraded) == (
            record.session_id,
            record.stream_seq,
            record.degraded is not None,
        )
        own = [row.stream_seq for row in rows if last_token(row.subject) == session.token]
        assert (session.first_seq, session.last_seq, session.events) == (
            own[0],
            own[-1],
            len(own),
        )


def test_the_partition_files_are_gone_once_folded_and_all_files_after_close() -> None:
    rows = interleaved_log()
    store = FoldStore(4096, 4)
    for row in rows:
        store.add(RawStored(orjson.dumps(row.envelope), row.stream_seq, row.subject, 0))
    directory = store._directory.name
    assert len(list(Path(directory).glob("partition-*"))) == 4
    store.finish()
    assert list(Path(directory).glob("partition-*")) == []
    store.close()
    assert not Path(directory).exists()


def test_workers_fold_only_a_stream_big_enough_to_pay_for_starting_them() -> None:
    rows = interleaved_log()
    store = FoldStore(4096, 4, workers=2, workers_from=len(rows) + 1)
    for row in rows:
        store.add(RawStored(orjson.dumps(row.envelope), row.stream_seq, row.subject, 0))
    with patch("replay.fold_store.ProcessPoolExecutor") as pool:
        assert store.finish() == SESSIONS
    pool.assert_not_called()
    store.close()


def test_a_workers_error_ends_the_fold_with_it() -> None:
    rows = interleaved_log()
    store = FoldStore(4096, 4, workers=2, workers_from=0)
    for row in rows:
        store.add(RawStored(orjson.dumps(row.envelope), row.stream_seq, row.subject, 0))
    for file in store._partitions.values():
        file.close()
    # A partition file gone before its worker opens it: the worker's error is the fold's.
    store._partition_path(sorted(store._partitions)[0]).unlink()
    with pytest.raises(FileNotFoundError):
        store.finish()
    store.close()
    assert not Path(store._directory.name).exists()


def test_ctrl_c_is_left_to_the_command_not_the_workers() -> None:
    # Ctrl-C reaches the whole process group: a worker ignores it, and the command, which
    # gets it too, stops the pool (no worker's traceback on the terminal).
    rows = interleaved_log()
    store = FoldStore(4096, 4, workers=2, workers_from=0)
    for row in rows:
        store.add(RawStored(orjson.dumps(row.envelope), row.stream_seq, row.subject, 0))
    started: list[object] = []

    def pool(workers: int, **kwargs: Any) -> ProcessPoolExecutor:
        started.append(kwargs["initializer"])
        return ProcessPoolExecutor(workers, **kwargs)

    with patch("replay.fold_store.ProcessPoolExecutor", pool):
        assert store.finish() == SESSIONS
    store.close()
    assert started == [fold_store._leave_interrupts_to_the_command]
    before = signal.getsignal(signal.SIGINT)
    try:
        fold_store._leave_interrupts_to_the_command()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)

"""Every JetStream error an atomic append can meet gets one answer, decided in one table:
one case per code, with the answer written here by hand (not read back from the table)."""

from __future__ import annotations

import pytest
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from services.adapters.append_errors import APPEND_ERRORS, AppendFailure, append_failure
from services.adapters.jetstream import JetStreamApiError

CONFLICT, UNCERTAIN = AppendFailure.CONFLICT, AppendFailure.UNCERTAIN
IN_PROCESS = AppendFailure.IN_PROCESS
UNAVAILABLE, REFUSED = AppendFailure.UNAVAILABLE, AppendFailure.REFUSED

#: (http-like code, err_code, the server's description, the answer).
CASES = [
    (400, 10071, "wrong last sequence: 41", CONFLICT),
    (400, 10164, "wrong last sequence", IN_PROCESS),
    (409, 10158, "duplicate message id is in process", UNCERTAIN),
    (400, 10201, "atomic publish batch contains duplicate message id", UNCERTAIN),
    (503, 10008, "JetStream system temporarily unavailable", UNAVAILABLE),
    (500, 10009, "JetStream cluster can not handle request", UNAVAILABLE),
    (500, 10007, "JetStream cluster not assigned to this server", UNAVAILABLE),
    (400, 10005, "no suitable peers for placement", UNAVAILABLE),
    (500, 10118, "stream is offline", UNAVAILABLE),
    (500, 10194, "stream is offline: catching up", UNAVAILABLE),
    (404, 10059, "stream not found", UNAVAILABLE),
    (503, 10076, "JetStream not enabled", UNAVAILABLE),
    (503, 10039, "JetStream not enabled for account", UNAVAILABLE),
    (503, 10163, "expected last sequence per subject temporarily unavailable", UNAVAILABLE),
    (400, 10175, "atomic publish sequence is missing", UNAVAILABLE),
    (400, 10176, "atomic publish batch is incomplete", UNAVAILABLE),
    (429, 10210, "atomic publish too many inflight", UNAVAILABLE),
    (503, 10023, "insufficient resources", UNAVAILABLE),
    (500, 10028, "insufficient memory resources available", UNAVAILABLE),
    (500, 10047, "insufficient storage resources available", UNAVAILABLE),
    (503, 10077, "store failed", UNAVAILABLE),
    (400, 10054, "message size exceeds maximum allowed", REFUSED),
    (400, 10097, "header size exceeds maximum allowed of 64k", REFUSED),
    (400, 10199, "atomic publish batch is too large: 1001", REFUSED),
    (400, 10174, "atomic publish is disabled", REFUSED),
    (400, 10177, "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id", REFUSED),
    (400, 10179, "atomic publish batch ID is invalid", REFUSED),
    (400, 10200, "atomic publish batch commit is invalid", REFUSED),
    (400, 10193, "missing sequence for expected last sequence per subject", REFUSED),
    (400, 10109, "invalid operation on sealed stream", REFUSED),
    (400, 10060, "expected stream does not match", REFUSED),
]


@pytest.mark.parametrize(("code", "err_code", "description", "answer"), CASES)
def test_each_code_gets_its_answer(
    code: int, err_code: int, description: str, answer: AppendFailure
) -> None:
    error = JetStreamApiError({"code": code, "err_code": err_code, "description": description})
    assert append_failure(error) is answer


def test_every_code_of_the_table_is_tested_here() -> None:
    assert set(APPEND_ERRORS) == {err_code for _, err_code, _, _ in CASES}


@pytest.mark.parametrize(
    ("code", "answer"), [(500, UNAVAILABLE), (503, UNAVAILABLE), (429, UNAVAILABLE), (400, REFUSED)]
)
def test_an_unknown_code_is_the_servers_trouble_only_when_it_says_so(
    code: int, answer: AppendFailure
) -> None:
    error = JetStreamApiError({"code": code, "err_code": 19999, "description": "new"})
    assert append_failure(error) is answer


def test_no_responders_cannot_land_but_no_answer_may() -> None:
    assert append_failure(NoRespondersError()) is UNAVAILABLE
    assert append_failure(NatsTimeoutError()) is UNCERTAIN
    assert append_failure(TimeoutError()) is UNCERTAIN
    assert append_failure(ConnectionClosedError()) is UNCERTAIN

"""What each way an atomic append can fail means for the command that sent it — in one table.

Every JetStream error code an atomic batch append can meet (the codes of nats-server's
`server/errors.json`) is sorted into one of five answers:
- conflict: the session moved on: nothing was stored; re-read the session and decide again;
- in process: another append of the session was proposed and is not settled yet (it may be
  an earlier attempt of the same command): nothing of this batch was stored, and the
  session's next state is unknown until that append lands or is dropped — on a leader cut
  off from its quorum, not before it steps down; wait like an absent log, then re-read;
- uncertain: the batch may be stored, or may still land: re-read, and look for the
  command's own events before deciding again; past the deadline, tell the caller to retry
  with the same `request_id`;
- unavailable: the stream could not take it just now (no leader, a node starting or out of
  resources, a batch split across two leaders): nothing was stored, a retry may succeed;
- refused: a retry will not change it (too large, bad headers, a misconfigured stream):
  nothing was stored.
A code missing from the table is unavailable when the server calls it its own trouble (5xx,
429) and refused otherwise. A failure without an API error is no responders (nobody took the
commit: unavailable) or no answer at all (timeout, a cut connection: uncertain).
"""

from __future__ import annotations

from enum import Enum

from nats.errors import NoRespondersError

from services.adapters.jetstream import JetStreamApiError


class AppendFailure(Enum):
    """Why an atomic append did not return a PubAck, as far as the caller can know."""

    #: The session moved on. Nothing was stored.
    CONFLICT = "conflict"
    #: Another append of the session is proposed but not settled. Nothing of this batch was
    #: stored; the session's next state is unknown until that append lands or is dropped.
    IN_PROCESS = "in process"
    #: The stream could not take it now (no leader, no responders, 5xx). Nothing was stored.
    UNAVAILABLE = "unavailable"
    #: No answer, a cut connection or a duplicate `Nats-Msg-Id`: it may be stored, or may
    #: still land (a leader can commit a proposal it made before it stepped down).
    UNCERTAIN = "uncertain"
    #: Refused for a reason a retry will not change (too large, bad headers). Nothing stored.
    REFUSED = "refused"


CONFLICT, UNCERTAIN = AppendFailure.CONFLICT, AppendFailure.UNCERTAIN
IN_PROCESS = AppendFailure.IN_PROCESS
UNAVAILABLE, REFUSED = AppendFailure.UNAVAILABLE, AppendFailure.REFUSED

#: err_code → (answer, the server's description and why that answer).
APPEND_ERRORS: dict[int, tuple[AppendFailure, str]] = {
    10071: (CONFLICT, "wrong last sequence: N — the session's last event is not the expected"),
    10164: (
        IN_PROCESS,
        "wrong last sequence (no number) — the session's subject has an append proposed and "
        "not yet applied: another writer's, or this command's own earlier attempt still "
        "waiting for a quorum (on a leader cut off from its cluster it waits until that "
        "leader steps down)",
    ),
    10158: (
        UNCERTAIN,
        "duplicate message id is in process — an earlier attempt of this command is being "
        "stored and may still land",
    ),
    10201: (
        UNCERTAIN,
        "atomic publish batch contains duplicate message id — an earlier attempt was stored",
    ),
    10008: (UNAVAILABLE, "JetStream system temporarily unavailable — no stream leader"),
    10009: (UNAVAILABLE, "JetStream cluster can not handle request — not the leader now"),
    10007: (UNAVAILABLE, "JetStream cluster not assigned to this server — still forming"),
    10005: (UNAVAILABLE, "no suitable peers for placement — a cluster still forming"),
    10118: (UNAVAILABLE, "stream is offline"),
    10194: (UNAVAILABLE, "stream is offline: reason"),
    10059: (
        UNAVAILABLE,
        "stream not found — the gateway checked it at start-up, so a node that has not "
        "loaded it yet (restarting, catching up); logged",
    ),
    10076: (UNAVAILABLE, "JetStream not enabled — a node starting or shutting down"),
    10039: (UNAVAILABLE, "JetStream not enabled for account — a node starting"),
    10163: (UNAVAILABLE, "expected last sequence per subject temporarily unavailable"),
    10175: (UNAVAILABLE, "atomic publish sequence is missing — the batch went to two leaders"),
    10176: (UNAVAILABLE, "atomic publish batch is incomplete — the batch went to two leaders"),
    10210: (UNAVAILABLE, "atomic publish too many inflight — the server is busy"),
    10023: (UNAVAILABLE, "insufficient resources"),
    10028: (UNAVAILABLE, "insufficient memory resources available"),
    10047: (UNAVAILABLE, "insufficient storage resources available — until space is freed"),
    10077: (UNAVAILABLE, "stream store failed — nothing was stored"),
    10054: (REFUSED, "message size exceeds maximum allowed"),
    10097: (REFUSED, "header size exceeds maximum allowed of 64k"),
    10199: (REFUSED, "atomic publish batch is too large"),
    10174: (REFUSED, "atomic publish is disabled — the stream is not as provisioned"),
    10177: (REFUSED, "atomic publish unsupported header used"),
    10179: (REFUSED, "atomic publish batch ID is invalid"),
    10200: (REFUSED, "atomic publish batch commit is invalid"),
    10193: (REFUSED, "missing sequence for expected last sequence per subject"),
    10109: (REFUSED, "invalid operation on sealed stream"),
    10060: (REFUSED, "expected stream does not match"),
}


def append_failure(exc: BaseException) -> AppendFailure:
    """Classify an exception raised by `publish_atomic` (the table above).

    Only a wrong expected sequence that names the session's last one is a conflict: a leader
    election, a timeout, an append still in process or "JetStream not available" says
    nothing settled about the session, and must not be retried as if it did.
    """
    if isinstance(exc, JetStreamApiError):
        known = APPEND_ERRORS.get(exc.err_code)
        if known is not None:
            return known[0]
        return UNAVAILABLE if exc.code >= 500 or exc.code == 429 else REFUSED
    if isinstance(exc, NoRespondersError):
        return UNAVAILABLE  # nobody received the commit: the batch cannot land
    return UNCERTAIN  # timeouts, cut or reconnecting connections

"""Control of what reminders cost: `mute`, `unmute` (SPEC §12.2) and `sanitize` (§12.5)."""

from __future__ import annotations

import orjson

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode
from contracts.replies import MuteReply, Reply, SanitizeReply, UnmuteReply
from core.batch import Batch
from core.canonical import derived_uuid7, sha256_hex
from core.config import CoreConfig
from core.deciders.common import reject
from core.sanitize import neutralize
from core.size import fits

#: Room in a sanitize reply for everything but its text.
_SANITIZE_REPLY_BASE = 256


def _check_not_ended(batch: Batch, turn: int, field: str, *, ended_too: bool) -> None:
    """Refuse a turn older than the session's last ended turn (`stale_turn`), or also that
    turn itself with `ended_too` (a mute ending at a turn already ended never ends)."""
    last = batch.scratch.last_ended_turn
    if last is not None and (turn < last or (ended_too and turn == last)):
        raise reject(
            ErrorCode.STALE_TURN,
            f"{field} {turn} is older than the last ended turn ({last})"
            if turn < last
            else f"{field} {turn} has already ended",
            field=field,
            last_ended_turn=last,
        )


def mute(batch: Batch, command: cmd.Mute, config: CoreConfig) -> Reply:
    """A new mute: `muted` with a derived id; at most `max_mutes` active (`too_many`)."""
    if len(batch.scratch.mutes) >= config.max_mutes:
        raise reject(
            ErrorCode.TOO_MANY,
            f"the session already has {len(batch.scratch.mutes)} active mutes; "
            f"the bound is {config.max_mutes}",
            limit=config.max_mutes,
        )
    if command.until_turn is not None:
        _check_not_ended(batch, command.until_turn, "until_turn", ended_too=True)
    mute_id = derived_uuid7(batch.context.occurred_at, "mute", batch.command_id)
    batch.emit(ev.Muted(mute_id=mute_id, selector=command.selector, until_turn=command.until_turn))
    return MuteReply(session_seq=0, mute_id=mute_id)


def unmute(batch: Batch, command: cmd.Unmute, config: CoreConfig) -> Reply:
    """End an active mute: `unmuted`; an unknown or ended one is `unknown_mute_id`."""
    if not any(mute.mute_id == command.mute_id for mute in batch.scratch.mutes):
        raise reject(
            ErrorCode.UNKNOWN_MUTE_ID,
            "no active mute with this id in the session",
            mute_id=command.mute_id,
        )
    batch.emit(ev.Unmuted(mute_id=command.mute_id))
    return UnmuteReply(session_seq=0, mute_id=command.mute_id)


def end_mutes(batch: Batch, turn: int) -> None:
    """`unmuted` for every mute whose `until_turn` is at or before the turn whose TTL pass
    runs now: a mute ends after its last turn (SPEC §12.2)."""
    for mute in list(batch.scratch.mutes):
        if mute.until_turn is not None and mute.until_turn <= turn:
            batch.emit(ev.Unmuted(mute_id=mute.mute_id))


def sanitize(batch: Batch, command: cmd.Sanitize, config: CoreConfig) -> Reply:
    """Escape directive-shaped tags; `forged_directive_neutralized` only when there were
    any. The reply's `text` is added by `decide` (`with_unstored`), never recorded."""
    _check_not_ended(batch, command.turn, "turn", ended_too=False)
    text, count = neutralize(command.text)
    fits(
        "sanitize reply",
        len(orjson.dumps(text)) + _SANITIZE_REPLY_BASE,
        config.max_payload_bytes,
    )
    if count:
        batch.emit(
            ev.ForgedDirectiveNeutralized(
                turn_number=command.turn,
                tool_name=command.tool_name,
                count=count,
                input_sha256=sha256_hex(command.text),
            )
        )
    return SanitizeReply(session_seq=0, neutralized=count)

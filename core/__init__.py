"""The pure core of Reminder Ledger: decide, fold, render.

No I/O, no clock, no randomness, no asyncio: time and ids enter through the command context
and are recorded in the events. The gateway, the projector and the replay tool all call this
package, so live projection and audit replay cannot disagree. It imports only `contracts`.
"""

from core.batch import Decision
from core.canonical import canonical_json, chain_link, session_token, sha256_hex
from core.config import CommandContext, CoreConfig
from core.decide import decide, handle
from core.fold import fold, fold_all

__all__ = [
    "CommandContext",
    "CoreConfig",
    "Decision",
    "canonical_json",
    "chain_link",
    "decide",
    "fold",
    "fold_all",
    "handle",
    "session_token",
    "sha256_hex",
]

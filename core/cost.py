"""What a render costs and what it holds back (SPEC §12.1, §12.2): the token estimate, the
render budget, mutes and the summary every render records.

A render's plan is a pure function of the session's live reminders, its mutes, the render's
turn and time, the envelope format and the budget. The render decider applies it and
`replay --verify` computes it again from the state before the render, so the shedding, the
mutes and the summary recorded in the log are re-derived, not trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from contracts.events import RenderSummary
from contracts.state import ActiveMute, PendingRow
from core import render as rn
from core.clock import not_yet_due
from core.rules import mute_matches, renderable

#: The estimator every new render records (SPEC §12.1): UTF-8 bytes divided by 4, rounded up.
DEFAULT_ESTIMATOR = "utf8_bytes/4"


def utf8_bytes_over_4(text: str) -> int:
    """`ceil(len(utf8(text)) / 4)`."""
    return -(-len(text.encode("utf-8")) // 4)


#: Named, deterministic token estimators. A log records the name it used, so adding an
#: estimator or changing the default never rewrites what an old summary says.
ESTIMATORS: dict[str, Callable[[str], int]] = {DEFAULT_ESTIMATOR: utf8_bytes_over_4}


def estimate_tokens(text: str, estimator: str = DEFAULT_ESTIMATOR) -> int:
    """Tokens of `text` by the named estimator (KeyError for an unknown name)."""
    return ESTIMATORS[estimator](text)


def directive_tokens(body: str) -> int:
    """A reminder's tokens per delivery: its escaped body by the default estimator (§12.6)."""
    return utf8_bytes_over_4(rn.escape_body(body))


# --- mutes (§12.2) -------------------------------------------------------------------------


def muted(mutes: Sequence[ActiveMute], row: PendingRow) -> bool:
    """Whether any active mute holds `row` back."""
    return any(mute_matches(mute.selector, row) for mute in mutes)


def provider_muted(mutes: Sequence[ActiveMute], provider_id: str) -> bool:
    """Whether an active mute names `provider_id` (the provider is evaluated as `muted`)."""
    return any(mute.selector.provider_id == provider_id for mute in mutes)


# --- the render plan (§12.1) -----------------------------------------------------------------


NotYet = Callable[[PendingRow], bool]
"""Whether a live reminder is not yet due at the render's time (SPEC §12.4 `not_before`)."""


def _never(_: PendingRow) -> bool:
    return False


def not_yet_at(pending: Sequence[PendingRow], now: str | None) -> NotYet:
    """The `not_before` predicate of a render at time `now` (None: no time known, nothing is
    held back); the cheap `_never` when no live reminder has a `not_before`."""
    if now is None or all(row.spec.not_before is None for row in pending):
        return _never
    return lambda row: not_yet_due(row, now)


@dataclass(frozen=True)
class Eligible:
    """The live reminders a render may issue, and those it holds back before selection."""

    candidates: list[PendingRow]
    muted_ids: list[str] = field(default_factory=list)
    not_yet_ids: list[str] = field(default_factory=list)


def eligible(
    pending: Sequence[PendingRow],
    turn: int,
    mutes: Sequence[ActiveMute] = (),
    not_yet: NotYet = _never,
) -> Eligible:
    """The §5.2 candidates (undelivered winners, render order) among the reminders that are
    neither muted nor not yet due; those held back are listed in injection order. A reminder
    that is both is listed once, as not yet due. Held-back reminders take no part in §5.2's
    equal-body contest, so an unmuted twin of a muted reminder is still rendered."""
    if not mutes and not_yet is _never:
        return Eligible(rn.render_candidates(pending, turn))
    held_muted: list[str] = []
    held_not_yet: list[str] = []
    open_rows: list[PendingRow] = []
    for row in pending:
        if not renderable(row, turn):
            continue
        if not row.delivered and not_yet(row):
            held_not_yet.append(row.spec.id)
        elif not row.delivered and muted(mutes, row):
            held_muted.append(row.spec.id)
        else:
            open_rows.append(row)
    return Eligible(rn.render_candidates(open_rows, turn), held_muted, held_not_yet)


def shed_to_budget(
    chosen: list[PendingRow],
    text_of: Callable[[list[PendingRow]], str],
    budget: int | None,
    estimator: str = DEFAULT_ESTIMATOR,
) -> tuple[list[PendingRow], list[str], bool]:
    """Shed directives until the envelope's estimate fits `budget`: in reverse §5.2 order
    (advisory before corrective, the latest injection first), never a contract directive.

    Returns the directives kept (render order), the ids shed (in the order they were shed)
    and `over_budget` (the contract directives alone exceed the budget).
    """
    if budget is None or not chosen:
        return chosen, [], False
    kept = list(chosen)
    shed: list[str] = []
    while kept and estimate_tokens(text_of(kept), estimator) > budget:
        victim = next(
            (i for i in range(len(kept) - 1, -1, -1) if kept[i].spec.authority != "contract"),
            None,
        )
        if victim is None:
            return kept, shed, True
        shed.append(kept.pop(victim).spec.id)
    return kept, shed, False


def summary_of(
    rows: Sequence[PendingRow],
    text: str,
    *,
    estimator: str,
    budget: int | None,
    shed_ids: list[str],
    held: Eligible,
    dropped_ids: list[str],
    over_budget: bool,
) -> RenderSummary:
    """The §12.1 summary of one render (`text` empty when nothing was delivered)."""
    by_authority: dict[str, int] = {}
    by_source: dict[str, int] = {}
    for row in rows:
        by_authority[row.spec.authority] = by_authority.get(row.spec.authority, 0) + 1
        by_source[row.spec.source] = by_source.get(row.spec.source, 0) + 1
    return RenderSummary(
        directives=len(rows),
        by_authority=by_authority,
        by_source=by_source,
        bytes=len(text.encode("utf-8")),
        est_tokens=estimate_tokens(text, estimator) if text else 0,
        estimator=estimator,
        budget_tokens=budget,
        shed_ids=shed_ids,
        muted_ids=held.muted_ids,
        not_yet_ids=held.not_yet_ids,
        dropped_ids=dropped_ids,
        over_budget=over_budget,
    )


def withholds(summary: RenderSummary) -> bool:
    """Whether a render that delivered nothing held something eligible back (`withheld`)."""
    return bool(summary.shed_ids or summary.muted_ids or summary.not_yet_ids)

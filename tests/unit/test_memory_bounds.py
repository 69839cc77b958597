"""What a long-running service holds stays bounded (issue #23, the soak): the fold's table of
remembered replies' sizes holds no row every state has dropped."""

from __future__ import annotations

import gc
import importlib

from contracts.state import RecentReply

fold_module = importlib.import_module("core.fold")


def _rows(count: int, prefix: str = "r") -> list[RecentReply]:
    return [
        RecentReply(request_id=f"{prefix}{i}", reply={"ok": True, "session_seq": i})
        for i in range(count)
    ]


def test_reply_sizes_are_remembered_only_while_their_rows_live() -> None:
    before = len(fold_module._ROW_BYTES)
    rows = _rows(300)
    fold_module._evict_replies(rows)  # the oldest beyond RECENT_REPLIES_KEPT go unmeasured
    assert len(fold_module._ROW_BYTES) == before + len(rows)
    del rows[:100]
    assert len(fold_module._ROW_BYTES) == before + len(rows)
    rows.clear()
    gc.collect()
    assert len(fold_module._ROW_BYTES) == before


def test_a_remembered_size_is_the_rows_own_after_its_id_is_reused() -> None:
    (short,) = _rows(1)
    fold_module._evict_replies([short])
    key = id(short)
    del short
    long = RecentReply(request_id="x" * 500, reply={"ok": True})
    # Whether or not CPython hands the same address out again, the size is the new row's.
    assert fold_module._row_bytes(long) > 500
    assert key not in fold_module._ROW_BYTES or fold_module._ROW_BYTES[key][0]() is long

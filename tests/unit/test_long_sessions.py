"""`bench.long_sessions` reads what it reports: a process's memory from `/proc`, and the
session cache's bytes from the gateway's exposition, not a neighbouring series."""

from __future__ import annotations

import os

from bench.long_sessions import cache_bytes, memory_mib

EXPOSITION = """\
# HELP reminders_session_cache_bytes Encoded bytes of the session states this process caches
# TYPE reminders_session_cache_bytes gauge
reminders_session_cache_bytes{otel_scope_name="reminders",otel_scope_version=""} 1234.0
# HELP reminders_session_cache_bound_bytes The bound on reminders_session_cache_bytes
# TYPE reminders_session_cache_bound_bytes gauge
reminders_session_cache_bound_bytes{otel_scope_name="reminders"} 3.3554432e+07
"""


def test_the_cache_bytes_are_read_from_their_own_series() -> None:
    assert cache_bytes(EXPOSITION) == 1234.0
    bound_only = "\n".join(line for line in EXPOSITION.splitlines() if "1234" not in line)
    assert cache_bytes(bound_only) is None


def test_a_live_process_has_its_memory_now_and_at_its_peak() -> None:
    memory = memory_mib(os.getpid())
    assert set(memory) == {"rss_mib", "peak_rss_mib"}
    assert 0 < memory["rss_mib"] <= memory["peak_rss_mib"]

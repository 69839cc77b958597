"""Replay and audit of one session's log (SPEC §7). Built on `core.fold`."""

"""Structured JSON logs, one line per record (SPEC §10).

Only ids, sizes, counts and outcomes are logged; callers never pass bodies or envelope texts,
and the formatter keeps only an allow-list of extra keys so nothing else leaks by accident.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

ALLOWED_EXTRA = frozenset(
    {
        "op",
        "outcome",
        "kind",
        "count",
        "error",
        "code",
        "stream_seq",
        "session_seq",
        "http_port",
        "streams",
        "service",
        "size",
        "lag",
        "pid",
        "detail",
        "server",
    }
)


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ...allowed extras}` per line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ALLOWED_EXTRA:
            if key in record.__dict__:
                line[key] = record.__dict__[key]
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_info[0].__name__
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for the whole process."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

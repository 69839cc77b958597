"""Shared bits of the benchmarks: an embedded server, timing, JSON output."""

from __future__ import annotations

import json
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cli.embedded import EmbeddedNats

RESULTS = Path(__file__).parent / "results"


@contextmanager
def embedded_server() -> Iterator[EmbeddedNats]:
    """A throwaway JetStream server on loopback."""
    with tempfile.TemporaryDirectory() as directory:
        server = EmbeddedNats(Path(directory) / "store")
        server.start()
        try:
            yield server
        finally:
            server.kill()


def rate(count: int, seconds: float) -> float:
    """Operations per second, rounded."""
    return round(count / seconds, 1) if seconds > 0 else 0.0


def max_rss_mib() -> float:
    """Peak resident memory of this process in MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def emit(name: str, result: dict[str, Any]) -> None:
    """Print the result as JSON and write it to bench/results/NAME.json."""
    result = {
        "benchmark": name,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **result,
    }
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(text + "\n", encoding="utf-8")

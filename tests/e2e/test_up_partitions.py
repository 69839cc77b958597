"""`reminders up` with REMINDERS_PROJECTOR_PARTITIONS=2: one projector process per partition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_up_runs_one_projector_per_partition_and_the_demo_is_projected(tmp_path: Path) -> None:
    argv = ["up", "--demo", "--exit-after-demo", "--data-dir", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "140", "REMINDERS_PROJECTOR_PARTITIONS": "2"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "REMINDERS_PARTITIONED" in out
    assert "projector-p0" in out and "projector-p1" in out
    # The demo's projected states are read from the bucket the partitions write.
    assert "projected state of demo-session (session_seq 21" in out
    assert "projected state of demo-child" in out
    assert (tmp_path / "logs" / "projector-p1.log").exists()

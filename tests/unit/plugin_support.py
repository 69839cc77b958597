"""A tiny third-party provider package, written as an installed distribution (module plus
`.dist-info` with an `entry_points.txt`) into a directory: put that directory on `sys.path`
(or `PYTHONPATH` for a service process) and `importlib.metadata` finds its entry point in the
group `reminder_ledger.providers`, exactly as it finds a pip-installed plug-in."""

from __future__ import annotations

from pathlib import Path

PLUGIN_MODULE = '''
"""A test plug-in: reacts to a user asking to delete something, and to any other event."""


def shout(view, event, config):
    word = config.get("word", "note")
    if event.kind == "user_turn":
        if "delete" not in event.payload.text:
            return None
        return {"body": f"{word}: the user asked to delete something", "ttl_turns": 1}
    return {"body": f"{word}: {event.kind}", "ttl_turns": 1}


def broken(view, event, config):
    raise RuntimeError("secret detail that must not reach the log")


def malformed(view, event, config):
    return {"body": "", "colour": "red"}


shout.subscribes = ["user_turn", "worker_lifecycle"]
'''


def write_plugin_dist(site: Path, module: str = "shout_plugin") -> Path:
    """Write the plug-in distribution into `site`; returns `site`."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(PLUGIN_MODULE, encoding="utf-8")
    dist = site / f"{module}-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[reminder_ledger.providers]\n"
        f"shout = {module}:shout\n"
        f"broken = {module}:broken\n"
        f"malformed = {module}:malformed\n",
        encoding="utf-8",
    )
    return site

"""The `--nats URL` option every command that talks to NATS takes (SPEC §11).

One flag, one environment variable (`REMINDERS_NATS_URL`), one default
(`nats://127.0.0.1:4222`). `--nats-url`, which `up`, `doctor` and `mcp` used to take, stays as
a hidden alias so old command lines keep working.
"""

from __future__ import annotations

import os
from typing import Any

import typer

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
NATS_ENV = "REMINDERS_NATS_URL"
NATS_HELP = f"NATS server URL (env {NATS_ENV}; default {DEFAULT_NATS_URL})."


def nats_option(help: str = NATS_HELP) -> Any:
    """`--nats URL`; the environment and the default are applied by `resolve_nats`."""
    return typer.Option(None, "--nats", metavar="URL", help=help, show_default=False)


def nats_url_alias() -> Any:
    """The former `--nats-url` spelling, hidden from `--help`."""
    return typer.Option(None, "--nats-url", metavar="URL", hidden=True)


def given_nats(flag: str | None, alias: str | None = None) -> str | None:
    """The URL given on the command line or in the environment, if any."""
    return flag or alias or os.environ.get(NATS_ENV) or None


def resolve_nats(flag: str | None, alias: str | None = None) -> str:
    """The URL to use: the flag, else `REMINDERS_NATS_URL`, else the default."""
    return given_nats(flag, alias) or DEFAULT_NATS_URL

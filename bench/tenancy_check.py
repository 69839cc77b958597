"""`python -m bench.tenancy_check`: the CPU the gateway's tenant check adds to one command.

The check is in memory only (no I/O): the caller check, the body bound, scoping the session
id, the tenant's rate and live-session bounds, and, for a query, renaming the session in the
stored state reply. This times exactly those calls, per command, for a `default` command and
for a tenant's, beside the time `parse_command` (which every command pays anyway) takes for
the same command; compare the figures with the gateway's CPU per command in bench results.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import orjson

from contracts.commands import parse_command
from services.adapters.tenants_config import TenantBounds, TenantsFile
from services.gateway.tenancy import Tenancy, unscope_reply

ROUNDS = 100_000


def per_call_us(work: Callable[[int], object], rounds: int = ROUNDS) -> float:
    """CPU microseconds per call of `work(i)` (process time, best of three runs)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for i in range(rounds):
            work(i)
        best = min(best, (time.process_time() - started) / rounds * 1e6)
    return round(best, 2)


def measure() -> dict[str, float]:
    """Per-command CPU of the check for `default` and a tenant, and of parsing the command."""
    bounds = TenantBounds(commands_per_second=10**9, live_sessions=10**9, max_body_bytes=4096)
    tenancy = Tenancy(TenantsFile(tenants={"acme": bounds}), 16384)
    raw = {"session_id": "s1", "reminder": {"body": "Run the tests before you commit."}}
    command, _ = parse_command("inject", raw)
    state = orjson.dumps({"session_id": "@acme/s1", "pending": [{"body": "x" * 1500}]})

    def check(tenant: str) -> Callable[[int], object]:
        def once(i: int) -> object:
            tenancy.refuse_caller(tenant, "inject")
            tenancy.max_body_bytes(tenant)
            scoped = tenancy.scope(tenant, command)
            assert not isinstance(scoped, dict)
            refused = tenancy.admit(tenant, scoped, i * 1e-6)
            tenancy.done(tenant, scoped)
            return refused

        return once

    def query(i: int) -> object:
        return unscope_reply("acme", {"ok": True, "state": orjson.Fragment(state)})

    return {
        "check_default_us": per_call_us(check("default")),
        "check_tenant_us": per_call_us(check("acme")),
        "unscope_state_reply_2kb_us": per_call_us(query),
        "parse_inject_us": per_call_us(lambda i: parse_command("inject", raw), ROUNDS // 10),
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))

"""`ByteBudget`: bytes in flight bounded, in arrival order, heavy holders alone."""

from __future__ import annotations

import asyncio
import random

import pytest

from services.adapters.byte_budget import ByteBudget


async def run_holders(
    budget: ByteBudget, weights: list[int], work_s: list[float]
) -> list[tuple[int, int]]:
    """Run one task per weight; return the bytes held and the holders of any bytes, seen at
    every entry (one of weight 0 holds nothing, and runs beside anything)."""
    seen: list[tuple[int, int]] = []
    holders = 0

    async def one(weight: int, pause: float) -> None:
        nonlocal holders
        async with budget.hold(weight):
            holders += weight > 0
            seen.append((budget.held, holders))
            await asyncio.sleep(pause)
            holders -= weight > 0

    await asyncio.gather(*(one(w, p) for w, p in zip(weights, work_s, strict=True)))
    return seen


@pytest.mark.parametrize("seed", range(8))
async def test_what_is_held_never_passes_the_budget_unless_one_alone(seed: int) -> None:
    rng = random.Random(seed)
    weights = [rng.choice([0, 10, 100, 400, 1000, 3000]) for _ in range(40)]
    budget = ByteBudget(1000)
    seen = await run_holders(budget, weights, [rng.random() / 500 for _ in weights])
    assert len(seen) == len(weights)
    assert all(held <= 1000 or holders <= 1 for held, holders in seen), seen
    assert max(holders for _, holders in seen) > 1  # it did run holders side by side
    assert budget.held == 0


async def test_a_holder_heavier_than_the_budget_runs_alone() -> None:
    budget = ByteBudget(100)
    order: list[str] = []

    async def one(name: str, weight: int) -> None:
        async with budget.hold(weight):
            order.append(f"+{name}:{budget.held}")
            await asyncio.sleep(0.01)
            order.append(f"-{name}")

    await asyncio.gather(one("small", 50), one("huge", 500), one("after", 50))
    assert order == ["+small:50", "-small", "+huge:500", "-huge", "+after:50", "-after"]


async def test_a_heavy_waiter_is_not_overtaken_by_lighter_ones_behind_it() -> None:
    budget = ByteBudget(100)
    entered: list[str] = []

    async def one(name: str, weight: int, pause: float) -> None:
        async with budget.hold(weight):
            entered.append(name)
            await asyncio.sleep(pause)

    await asyncio.gather(one("a", 60, 0.02), one("heavy", 90, 0.0), one("light", 10, 0.0))
    assert entered == ["a", "heavy", "light"]


async def test_a_cancelled_waiter_lets_the_next_one_in() -> None:
    budget = ByteBudget(100)
    release = asyncio.Event()
    entered: list[str] = []

    async def one(name: str, weight: int) -> None:
        async with budget.hold(weight):
            entered.append(name)
            await release.wait()

    first = asyncio.create_task(one("first", 80))
    await asyncio.sleep(0)
    heavy = asyncio.create_task(one("heavy", 90))
    light = asyncio.create_task(one("light", 10))
    await asyncio.sleep(0.01)
    assert entered == ["first"]  # light waits behind heavy, in arrival order
    heavy.cancel()
    await asyncio.sleep(0.01)
    assert entered == ["first", "light"]
    release.set()
    await asyncio.gather(first, light)
    assert (await asyncio.gather(heavy, return_exceptions=True))[0].__class__ is (
        asyncio.CancelledError
    )
    assert budget.held == 0

"""The node's start gate: a bounded number of runtime start operations, oldest pod first."""

from __future__ import annotations

import asyncio

from kubelet_agent.pods.gate import StartGate


async def test_limit_and_oldest_ticket_first() -> None:
    gate = StartGate(2)
    tickets = [gate.ticket() for _ in range(6)]
    order: list[int] = []
    inside = 0
    peak = 0
    release = asyncio.Event()

    async def op(t: int) -> None:
        nonlocal inside, peak
        async with gate.slot(t):
            inside += 1
            peak = max(peak, inside)
            order.append(t)
            await release.wait()
            inside -= 1

    # Newer pods ask first; once the first two slots are taken, the oldest waiting pod goes next.
    tasks = [asyncio.create_task(op(t)) for t in reversed(tickets)]
    await asyncio.sleep(0)
    assert order == [tickets[5], tickets[4]]
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 2
    assert order[2:] == tickets[:4]
    assert gate.active == 0


async def test_cancelled_waiter_does_not_leak_a_slot() -> None:
    gate = StartGate(1)
    hold = asyncio.Event()

    async def holder() -> None:
        async with gate.slot(0):
            await hold.wait()

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting.cancel()
    hold.set()
    await first
    assert waiting.cancelled()
    assert gate.active == 0
    # A waiter cancelled after the slot was handed to it, before it ran, gives the slot back.
    async with gate.slot(1):
        handed = asyncio.create_task(holder())
        await asyncio.sleep(0)
    handed.cancel()
    await asyncio.gather(handed, return_exceptions=True)
    assert gate.active == 0
    async with asyncio.timeout(1), gate.slot(5):
        assert gate.active == 1
    assert gate.active == 0

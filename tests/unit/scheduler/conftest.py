"""Fixtures shared by the scheduler's unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from scheduler.config import parse_config
from scheduler.scheduler import Scheduler
from services.client import Client


@pytest.fixture
async def sched() -> AsyncIterator[Scheduler]:
    """A scheduler not connected to anything (its client points at a closed port), closed afterwards."""
    s = Scheduler(Client("http://127.0.0.1:9"), parse_config(None))
    yield s
    for c in (s.client, s.write_client, s.sink.client):
        await c.close()

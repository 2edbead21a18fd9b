"""One controller against the in-memory apiserver, the way upstream's controller tests run: objects
stored first, informers synced from them, then `sync(key)` called directly and the writes the
server recorded asserted. No worker runs, so nothing happens that the test did not ask for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from controller_manager.app import build_parser
from controller_manager.base import RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.events import EventBroadcaster
from services.client import Client, ResourceType
from services.informers import SharedInformerFactory
from services.testing.fakeapi import FakeApiServer
from tests.conftest import eventually

Obj = dict[str, Any]


@dataclass
class Harness:
    api: FakeApiServer
    client: Client
    ctx: ControllerContext
    controller: Any

    async def caught_up(self) -> None:
        """Wait until every informer the controller asked for holds what the server holds."""
        async def in_step() -> bool:
            return all(self._in_step(i) for i in self.ctx.requested)

        await eventually(in_step, limit=5.0, interval=0.001, what="the informers to see every write")

    def _in_step(self, informer: Any) -> bool:
        cached = {(o["metadata"].get("namespace") or "", o["metadata"]["name"], o["metadata"]["resourceVersion"])
                  for o in informer.list()}
        stored = {(o["metadata"].get("namespace") or "", o["metadata"]["name"], o["metadata"]["resourceVersion"])
                  for o in self.api.list(informer.resource)}
        return cached == stored

    async def sync(self, key: str) -> float | None:
        """One sync of `key` on caches that have seen every earlier write, as a worker would run it;
        the delay the sync asked to be requeued after, if it did."""
        await self.caught_up()
        try:
            await self.controller.sync(key)
        except RequeueAfter as again:
            return again.delay
        return None

    def update(self, resource: ResourceType, obj: Obj) -> Obj:
        """Change an object as another component would (e.g. the kubelet reporting pod status)."""
        return self.api.replace(resource, obj)


@asynccontextmanager
async def harness(module: ModuleType, seed: list[tuple[ResourceType, Obj]], *flags: str,
                  build: Callable[[ControllerContext], Any] | None = None) -> AsyncIterator[Harness]:
    """The controller `module.new` builds (or `build`), its informers synced from `seed`."""
    api = FakeApiServer()
    for resource, obj in seed:
        api.seed(resource, obj)
    client = api.client()
    factory = SharedInformerFactory(client)
    broadcaster = EventBroadcaster(client)
    ctx = ControllerContext(client=client, informers=factory, options=build_parser().parse_args(list(flags)),
                            broadcaster=broadcaster)
    controller = (build or module.new)(ctx)
    factory.start()
    broadcaster.start()
    env = Harness(api, client, ctx, controller)
    try:
        await env.caught_up()
        api.clear_actions()
        yield env
    finally:
        await factory.shutdown()
        api.close_watches()
        await broadcaster.stop()
        await client.close()

"""The client, informers, work queue and leader election against a real apiserver on a real etcd."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.api.catalog import Catalog
from services.client import AlreadyExists, Client, ClientConfig, Conflict, Gone, NotFound
from services.informers import (
    BUILTIN_INDEXERS,
    LABEL_INDEX,
    NAMESPACE_INDEX,
    NODE_NAME_INDEX,
    OWNER_UID_INDEX,
    ItemExponentialFailureRateLimiter,
    LeaderElector,
    RateLimitingQueue,
    SharedInformerFactory,
    ShutDown,
    Store,
    meta_namespace_key,
    split_key,
)
from services.informers.leaderelection import LEASES
from services.runtime.health import HealthServer
from services.runtime.process import base_parser, client_config, start_health
from tests.conftest import start_apiserver

CATALOG = Catalog()
NAMESPACES = CATALOG.get("", "v1", "namespaces")
CONFIGMAPS = CATALOG.get("", "v1", "configmaps")
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
_seq = itertools.count()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def second_apiserver(apiserver: str, etcd_server: str, workdir: Path) -> Iterator[str]:
    """Another replica on the same etcd, started after the first has written: its watch cache begins at
    a revision above 1, so a watch from resourceVersion 1 is too old there and answers 410."""
    server = start_apiserver([etcd_server], workdir / "second-apiserver")
    yield server.url
    server.stop()


@pytest.fixture
async def client(apiserver: str) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=apiserver)) as c:
        yield c


@pytest.fixture
async def ns(client: Client) -> str:
    name = f"client-{next(_seq)}-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def cm(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data or {},
    }


async def eventually(predicate: Any, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.05)


class DroppingProxy:
    """A TCP relay in front of the apiserver that can cut every connection, like a flaky network."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def drop_all(self) -> None:
        for w in list(self._writers):
            w.transport.abort()

    async def stop(self) -> None:
        self.drop_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


# -- REST client ---------------------------------------------------------------------------------


async def test_crud_conflict_and_patch(client: Client, ns: str) -> None:
    created = await client.create(CONFIGMAPS, cm("a", {"k": "1"}), ns)
    assert created["metadata"]["namespace"] == ns and created["metadata"]["resourceVersion"]
    with pytest.raises(AlreadyExists):
        await client.create(CONFIGMAPS, cm("a"), ns)

    fetched = await client.get(CONFIGMAPS, "a", ns)
    fetched["data"]["k"] = "2"
    replaced = await client.replace(CONFIGMAPS, fetched)
    assert replaced["data"] == {"k": "2"}
    fetched["data"]["k"] = "stale"
    with pytest.raises(Conflict) as info:
        await client.replace(CONFIGMAPS, fetched)
    assert info.value.code == 409

    patched = await client.patch(CONFIGMAPS, "a", {"data": {"m": "x"}}, ns)
    assert patched["data"] == {"k": "2", "m": "x"}
    patched = await client.patch(CONFIGMAPS, "a", [{"op": "remove", "path": "/data/k"}], ns, patch_type="json")
    assert patched["data"] == {"m": "x"}

    await client.delete(CONFIGMAPS, "a", ns, preconditions={"uid": created["metadata"]["uid"]})
    with pytest.raises(NotFound) as missing:
        await client.get(CONFIGMAPS, "a", ns)
    assert missing.value.reason == "NotFound" and missing.value.code == 404


async def test_list_pagination_and_selectors(client: Client, ns: str) -> None:
    for i in range(7):
        await client.create(CONFIGMAPS, cm(f"p{i}", labels={"parity": "even" if i % 2 == 0 else "odd"}), ns)
    first = await client.list(CONFIGMAPS, ns, limit=3)
    assert len(first["items"]) == 3 and first["metadata"].get("continue")
    everything = await client.list_all(CONFIGMAPS, ns, page_size=3)
    assert sorted(i["metadata"]["name"] for i in everything["items"]) == [f"p{i}" for i in range(7)]
    assert everything["metadata"]["resourceVersion"]
    assert "continue" not in everything["metadata"]
    odd = await client.list(CONFIGMAPS, ns, label_selector={"parity": "odd"})
    assert sorted(i["metadata"]["name"] for i in odd["items"]) == ["p1", "p3", "p5"]
    one = await client.list(CONFIGMAPS, ns, field_selector="metadata.name=p4")
    assert [i["metadata"]["name"] for i in one["items"]] == ["p4"]
    await client.delete_collection(CONFIGMAPS, ns, label_selector="parity=even")
    left = await client.list_all(CONFIGMAPS, ns)
    assert sorted(i["metadata"]["name"] for i in left["items"]) == ["p1", "p3", "p5"]


async def test_watch_streams_changes_in_order(client: Client, ns: str) -> None:
    listed = await client.list(CONFIGMAPS, ns)
    rv = listed["metadata"]["resourceVersion"]
    events: list[tuple[str, str, dict[str, str]]] = []

    async def consume() -> None:
        async with client.watch(CONFIGMAPS, ns, resource_version=rv, timeout_seconds=30) as stream:
            async for kind, obj in stream:
                if kind == "BOOKMARK":
                    continue
                events.append((kind, obj["metadata"]["name"], obj.get("data") or {}))
                if kind == "DELETED":
                    return

    watcher = asyncio.create_task(consume())
    await client.create(CONFIGMAPS, cm("w", {"v": "1"}), ns)
    await client.patch(CONFIGMAPS, "w", {"data": {"v": "2"}}, ns)
    await client.delete(CONFIGMAPS, "w", ns)
    await asyncio.wait_for(watcher, 15)
    assert events == [("ADDED", "w", {"v": "1"}), ("MODIFIED", "w", {"v": "2"}), ("DELETED", "w", {"v": "2"})]


async def test_watch_from_expired_resource_version_raises_gone(second_apiserver: str, ns: str) -> None:
    async with Client(second_apiserver) as client:
        await client.create(CONFIGMAPS, cm("g"), ns)
        with pytest.raises(Gone) as info:
            async with client.watch(CONFIGMAPS, ns, resource_version="1", timeout_seconds=5) as stream:
                async for _ in stream:
                    pass
        assert info.value.code == 410


# -- informers -----------------------------------------------------------------------------------


def test_store_keys_and_builtin_indexes() -> None:
    store = Store(indexers=BUILTIN_INDEXERS)
    pod = {"metadata": {"name": "p", "namespace": "a", "labels": {"app": "web"},
                        "ownerReferences": [{"uid": "rs-1", "kind": "ReplicaSet", "name": "rs"}]},
           "spec": {"nodeName": "n1"}}
    node = {"metadata": {"name": "n1"}}
    assert meta_namespace_key(pod) == "a/p" and meta_namespace_key(node) == "n1"
    assert split_key("a/p") == ("a", "p") and split_key("n1") == ("", "n1")
    store.add(pod)
    store.add({"metadata": {"name": "q", "namespace": "b"}, "spec": {}})
    assert [o["metadata"]["name"] for o in store.by_index(NODE_NAME_INDEX, "n1")] == ["p"]
    assert store.index_keys(OWNER_UID_INDEX, "rs-1") == ["a/p"]
    assert store.index_keys(NAMESPACE_INDEX, "b") == ["b/q"]
    assert store.by_label("app", "web") == [pod]
    moved = {**pod, "spec": {"nodeName": "n2"}, "metadata": {**pod["metadata"], "labels": {}}}
    assert store.update(moved) is pod
    assert store.by_index(NODE_NAME_INDEX, "n1") == [] and store.index_keys(NODE_NAME_INDEX, "n2") == ["a/p"]
    assert store.by_label("app", "web") == []
    store.delete(moved)
    assert store.index_keys(OWNER_UID_INDEX, "rs-1") == [] and store.list_keys() == ["b/q"]
    store.replace([pod])
    assert store.list_keys() == ["a/p"] and store.index_keys(NAMESPACE_INDEX, "b") == []


async def test_informer_syncs_and_fires_handlers(client: Client, ns: str) -> None:
    await client.create(CONFIGMAPS, cm("pre", {"a": "1"}, {"app": "web"}), ns)
    factory = SharedInformerFactory(client, namespace=ns)
    informer = factory.informer_for(CONFIGMAPS)
    assert factory.informer_for(CONFIGMAPS) is informer, "one informer per resource"
    seen: list[tuple[str, str, str | None, str | None]] = []

    def on_update(old: dict[str, Any], new: dict[str, Any]) -> None:
        seen.append(("update", new["metadata"]["name"], old["data"].get("a"), new["data"].get("a")))

    async def on_delete(obj: dict[str, Any]) -> None:
        seen.append(("delete", obj["metadata"]["name"], None, None))

    reg = informer.add_event_handler(
        on_add=lambda o: seen.append(("add", o["metadata"]["name"], None, o["data"].get("a"))),
        on_update=on_update,
        on_delete=on_delete,
    )
    factory.start()
    try:
        async with asyncio.timeout(10):
            await factory.wait_for_cache_sync()
            await reg.wait_for_sync()
        assert informer.has_synced() and factory.has_synced()
        assert seen == [("add", "pre", None, "1")]
        assert informer.get("pre", ns)["data"] == {"a": "1"}

        await client.create(CONFIGMAPS, cm("new", {"a": "x"}, {"app": "web"}), ns)
        await client.patch(CONFIGMAPS, "pre", {"data": {"a": "2"}}, ns)
        await client.delete(CONFIGMAPS, "pre", ns)
        await eventually(lambda: len(seen) == 4)
        assert seen[1:] == [("add", "new", None, "x"), ("update", "pre", "1", "2"), ("delete", "pre", None, None)]
        assert [o["metadata"]["name"] for o in informer.store.by_index(LABEL_INDEX, "app=web")] == ["new"]
        assert informer.get("pre", ns) is None

        late: list[str] = []
        late_reg = informer.add_event_handler(on_add=lambda o: late.append(o["metadata"]["name"]))
        async with asyncio.timeout(5):
            await late_reg.wait_for_sync()
        assert late == ["new"], "a handler added after sync first gets the cached objects"
    finally:
        await factory.shutdown()


async def test_informer_resumes_after_disconnect_and_relists_after_gone(second_apiserver: str, ns: str) -> None:
    proxy = DroppingProxy(second_apiserver)
    await proxy.start()
    seen: list[tuple[str, str]] = []
    async with Client(ClientConfig(server=proxy.url), backoff_base=0.05) as client:
        await client.create(CONFIGMAPS, cm("one"), ns)
        factory = SharedInformerFactory(client, namespace=ns)
        informer = factory.informer_for(CONFIGMAPS)
        informer.reflector.backoff_initial = 0.1
        informer.add_event_handler(
            on_add=lambda o: seen.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: seen.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: seen.append(("delete", o["metadata"]["name"])),
        )
        factory.start()
        try:
            async with asyncio.timeout(10):
                await factory.wait_for_cache_sync()
            await eventually(lambda: seen == [("add", "one")])
            assert informer.reflector.lists == 1

            # A dropped connection resumes the watch from the last resourceVersion: no relist.
            proxy.drop_all()
            await client.create(CONFIGMAPS, cm("two"), ns)
            await eventually(lambda: ("add", "two") in seen)
            assert informer.reflector.lists == 1

            # Resuming from a resourceVersion the server no longer has answers 410: relist, and the
            # handlers learn what changed meanwhile (one deleted, three added, two updated by relist).
            informer.reflector.last_sync_resource_version = "1"
            proxy.drop_all()
            await eventually(lambda: informer.reflector.lists == 2)
            await client.delete(CONFIGMAPS, "one", ns)
            await client.create(CONFIGMAPS, cm("three"), ns)
            await eventually(lambda: ("add", "three") in seen and ("delete", "one") in seen)
            assert sorted(o["metadata"]["name"] for o in informer.list()) == ["three", "two"]
            assert ("update", "one") in seen and ("update", "two") in seen, "relist replays as updates"
        finally:
            await factory.shutdown()
            await proxy.stop()


# -- work queue driving a reconcile --------------------------------------------------------------


async def test_work_queue_drives_a_reconcile(client: Client, ns: str) -> None:
    """A tiny controller: every ConfigMap labelled mirror=yes gets a "<name>-mirror" copy of its data."""
    factory = SharedInformerFactory(client, namespace=ns)
    informer = factory.informer_for(CONFIGMAPS, label_selector="mirror=yes")
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        name=f"mirror-{ns}", rate_limiter=ItemExponentialFailureRateLimiter(0.01, 0.2)
    )
    attempts: dict[str, int] = {}
    active: set[str] = set()
    overlaps: list[str] = []

    def enqueue(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        queue.add(f"{meta['namespace']}/{meta['name']}")

    informer.add_event_handler(on_add=enqueue, on_update=lambda _old, new: enqueue(new), on_delete=enqueue)

    async def reconcile(key: str) -> None:
        attempts[key] = attempts.get(key, 0) + 1
        if key.endswith("/flaky") and attempts[key] < 3:
            raise RuntimeError("transient failure")
        namespace, name = split_key(key)
        source = informer.get(name, namespace)
        target = f"{name}-mirror"
        if source is None:
            with contextlib.suppress(NotFound):
                await client.delete(CONFIGMAPS, target, namespace)
            return
        try:
            await client.create(CONFIGMAPS, cm(target, source.get("data")), namespace)
        except AlreadyExists:
            await client.patch(CONFIGMAPS, target, {"data": source.get("data")}, namespace)

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            try:
                await reconcile(key)
                queue.forget(key)
            except Exception:
                queue.requeue(key, max_retries=5)
            finally:
                active.discard(key)
                queue.done(key)

    factory.start()
    workers = [asyncio.create_task(worker()) for _ in range(2)]

    async def mirror(name: str) -> dict[str, str] | None:
        try:
            return (await client.get(CONFIGMAPS, f"{name}-mirror", ns)).get("data") or {}
        except NotFound:
            return None

    async def until_mirror(name: str, want: dict[str, str] | None) -> None:
        async with asyncio.timeout(15):
            while True:
                if await mirror(name) == want:
                    return
                await asyncio.sleep(0.05)

    try:
        await client.create(CONFIGMAPS, cm("src", {"x": "1"}, {"mirror": "yes"}), ns)
        await client.create(CONFIGMAPS, cm("flaky", {"y": "1"}, {"mirror": "yes"}), ns)
        await client.create(CONFIGMAPS, cm("ignored", {"z": "1"}), ns)
        await until_mirror("src", {"x": "1"})
        await until_mirror("flaky", {"y": "1"})
        assert attempts[f"{ns}/flaky"] == 3, "two failures, then success after backoff"
        assert queue.num_requeues(f"{ns}/flaky") == 0
        for i in range(2, 6):
            await client.patch(CONFIGMAPS, "src", {"data": {"x": str(i)}}, ns)
        await until_mirror("src", {"x": "5"})
        await client.delete(CONFIGMAPS, "src", ns)
        await until_mirror("src", None)
        assert await mirror("ignored") is None
        assert not overlaps
    finally:
        queue.shut_down()
        await asyncio.gather(*workers)
        await factory.shutdown()


# -- leader election -----------------------------------------------------------------------------


async def test_leader_election_between_two_electors(client: Client, ns: str) -> None:
    timeline: list[str] = []
    leading: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}

    def elector(identity: str) -> LeaderElector:
        async def lead() -> None:
            timeline.append(f"{identity} started")
            leading[identity].set()
            await asyncio.Event().wait()

        return LeaderElector(
            client, namespace=ns, name="ctrl", identity=identity,
            on_started_leading=lead, on_stopped_leading=lambda: timeline.append(f"{identity} stopped"),
            lease_duration=3.0, renew_deadline=2.0, retry_period=0.4,
        )

    a, b = elector("a"), elector("b")
    run_a = asyncio.create_task(a.run())
    await asyncio.wait_for(leading["a"].wait(), 10)
    run_b = asyncio.create_task(b.run())
    try:
        lease = await client.get(LEASES, "ctrl", ns)
        spec = lease["spec"]
        assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 3
        assert spec["leaseTransitions"] == 0
        assert MICROTIME.match(spec["acquireTime"]) and MICROTIME.match(spec["renewTime"])

        await asyncio.sleep(4.0)  # longer than the lease: a keeps renewing, so b must not take over
        assert not leading["b"].is_set()
        renewed = (await client.get(LEASES, "ctrl", ns))["spec"]
        assert renewed["renewTime"] > spec["renewTime"] and renewed["acquireTime"] == spec["acquireTime"]
        assert b.get_leader() == "a"

        run_a.cancel()  # clean shutdown releases the lease, so b need not wait for it to expire
        with contextlib.suppress(asyncio.CancelledError):
            await run_a
        released = (await client.get(LEASES, "ctrl", ns))["spec"]
        assert released.get("holderIdentity", "") in ("", "b")
        await asyncio.wait_for(leading["b"].wait(), 3.0)
        final = (await client.get(LEASES, "ctrl", ns))["spec"]
        assert final["holderIdentity"] == "b" and final["leaseTransitions"] == 1
        assert timeline == ["a started", "a stopped", "b started"]
    finally:
        for task in (run_a, run_b):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_leader_election_takes_over_an_expired_lease(client: Client, ns: str) -> None:
    """A holder that vanished without releasing is replaced once its lease duration has passed."""
    await client.create(LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "gone"},
        "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": 1, "leaseTransitions": 4,
                 "acquireTime": "2024-01-01T00:00:00.000000Z", "renewTime": "2024-01-01T00:00:00.000000Z"},
    }, ns)
    started = asyncio.Event()

    async def lead() -> None:
        started.set()
        await asyncio.Event().wait()

    elector = LeaderElector(client, namespace=ns, name="gone", identity="new", on_started_leading=lead,
                            lease_duration=3.0, renew_deadline=2.0, retry_period=0.3, release_on_cancel=False)
    task = asyncio.create_task(elector.run())
    try:
        await asyncio.wait_for(started.wait(), 8)
        spec = (await client.get(LEASES, "gone", ns))["spec"]
        assert spec["holderIdentity"] == "new" and spec["leaseTransitions"] == 5
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    kept = (await client.get(LEASES, "gone", ns))["spec"]
    assert kept["holderIdentity"] == "new", "release_on_cancel=False leaves the lease to expire"


# -- runtime -------------------------------------------------------------------------------------


async def test_health_server_checks_and_metrics() -> None:
    server = HealthServer("127.0.0.1", 0)
    ready = {"informers": False}
    server.add_readyz_check("informers-synced", lambda: ready["informers"])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/livez")).text == "ok"
            r = await http.get("/readyz")
            assert r.status_code == 500
            assert "[-]informers-synced failed: reason withheld" in r.text
            assert (await http.get("/readyz", params={"exclude": "informers-synced"})).status_code == 200
            assert (await http.get("/healthz")).status_code == 500
            ready["informers"] = True
            verbose = await http.get("/readyz?verbose")
            assert verbose.status_code == 200 and "[+]informers-synced ok" in verbose.text
            assert (await http.get("/readyz/informers-synced")).text == "ok"
            assert (await http.get("/nope")).status_code == 404
            RateLimitingQueue(name="health-test").add("x")
            metrics = await http.get("/metrics")
            assert 'workqueue_adds_total{name="health-test"} 1.0' in metrics.text
    finally:
        await server.stop()


async def test_process_run_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    script = (
        "import asyncio, pathlib, sys\n"
        "from services.runtime.process import run\n"
        "async def main():\n"
        "    print('ready', flush=True)\n"
        "    try:\n"
        "        await asyncio.Event().wait()\n"
        "    finally:\n"
        f"        pathlib.Path({str(marker)!r}).write_text('clean')\n"
        "sys.exit(run(main()))\n"
    )
    args = base_parser("test").parse_args(["--master", "http://127.0.0.1:1", "--kube-api-qps", "5", "--v", "4"])
    cfg = client_config(args, user_agent="test/0")
    assert (cfg.server, cfg.qps, cfg.user_agent, args.secure_port) == ("http://127.0.0.1:1", 5.0, "test/0", 0)
    assert await start_health(args) is None
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=str(REPO)
    )
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 20)).strip() == b"ready"
    proc.terminate()
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    assert marker.read_text() == "clean"


async def test_status_scale_and_apply(client: Client, ns: str) -> None:
    deployments = CATALOG.get("apps", "v1", "deployments")
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    }
    await client.create(deployments, body, ns)
    scale = await client.get_scale(deployments, "web", ns)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    scaled = await client.replace_scale(deployments, "web", 3, ns)
    assert scaled["spec"]["replicas"] == 3
    assert (await client.get(deployments, "web", ns))["spec"]["replicas"] == 3
    status = await client.patch_status(deployments, "web", {"status": {"observedGeneration": 7}}, ns)
    assert status["status"]["observedGeneration"] == 7
    assert (await client.get_status(deployments, "web", ns))["status"]["observedGeneration"] == 7


async def test_server_side_apply(client: Client, ns: str) -> None:
    applied = await client.patch(
        CONFIGMAPS, "applied", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"},
                                "data": {"owner": "me"}},
        ns, patch_type="apply", field_manager="pyk8s-test", force=True,
    )
    assert applied["data"] == {"owner": "me"}
    managers = [m["manager"] for m in applied["metadata"].get("managedFields") or []]
    assert "pyk8s-test" in managers


async def test_periodic_resync_replays_updates(client: Client, ns: str) -> None:
    await client.create(CONFIGMAPS, cm("steady"), ns)
    factory = SharedInformerFactory(client, default_resync=0.2, namespace=ns)
    informer = factory.informer_for(CONFIGMAPS)
    resyncs: list[tuple[str, str]] = []
    informer.add_event_handler(
        on_update=lambda old, new: resyncs.append(
            (old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"])
        )
    )
    quiet: list[str] = []
    informer.add_event_handler(on_update=lambda old, new: quiet.append("update"), resync_period=0)
    factory.start()
    try:
        await eventually(lambda: len(resyncs) >= 2, within=5)
        assert all(old == new for old, new in resyncs), "a resync hands the cached object as both old and new"
        assert quiet == [], "a handler with resync_period=0 gets no resyncs"
    finally:
        await factory.shutdown()

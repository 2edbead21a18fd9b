"""RESTStore.mutate (pods/binding) starts from the watch cache's copy: a stale copy must never win.

In-process store over the session's real etcd; the cache is stopped to make its copy stale on purpose.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest

from apiserver.registry import pods
from apiserver.registry.store import RESTStore, ServerContext, WriteOptions
from apiserver.registry.strategies import strategy_for
from apiserver.storage.cache import Entry, WatchCache
from apiserver.storage.etcd import EtcdStore
from services.api import errors
from services.api.catalog import Catalog


@pytest.fixture
async def store(etcd_server: str) -> AsyncIterator[RESTStore]:
    etcd = EtcdStore([etcd_server])
    root = f"/mutate-{time.time_ns()}/"
    cache = WatchCache(etcd, root)
    res = Catalog().get("", "v1", "pods")
    assert res is not None
    rest = RESTStore(res, strategy_for(res), ServerContext(etcd=etcd, cache=cache, root=root))
    await cache.start()
    try:
        yield rest
    finally:
        await cache.stop()
        await etcd.close()


def pod(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                                                             "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}}


def binding(name: str, node: str) -> dict:
    return {"metadata": {"name": name}, "target": {"kind": "Node", "name": node}}


async def cached(rest: RESTStore, key: str, revision: int) -> None:
    await rest.ctx.cache.wait_for(revision, 5.0)
    assert rest.cache.entries[key].revision == revision


async def test_binding_from_a_stale_cache_retries_on_what_etcd_holds(store: RESTStore) -> None:
    key = store.key("ns", "a")
    rev = await store.ctx.etcd.create(key, orjson.dumps(pod("a", v="1")))
    await cached(store, key, rev)
    await store.ctx.cache.stop()
    # Another writer changes the pod behind the (now stopped) cache.
    newer = await store.ctx.etcd.update(key, orjson.dumps(pod("a", v="2")), rev)
    assert store.cache.entries[key].revision == rev

    bound = await store.mutate("ns", "a", lambda p: pods.bind(p, binding("a", "n1")), WriteOptions(), "binding")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["labels"] == {"v": "2"}, "the retry must start from etcd's object, not the cache's"
    assert int(bound["metadata"]["resourceVersion"]) > newer
    stored = orjson.loads((await store.ctx.etcd.get(key)).value)
    assert stored["spec"]["nodeName"] == "n1" and stored["metadata"]["labels"] == {"v": "2"}

    # Bound behind the cache's back: the stale copy looks unbound, etcd's answer is a 409.
    other = store.key("ns", "b")
    rev = await store.ctx.etcd.create(other, orjson.dumps(pod("b")))
    stale = pod("b")
    stale["metadata"]["resourceVersion"] = str(rev)
    store.cache.entries[other] = Entry(stale, rev)
    await store.ctx.etcd.update(other, orjson.dumps(pods.bind(pod("b"), binding("b", "n2"))), rev)
    with pytest.raises(errors.StatusError) as err:
        await store.mutate("ns", "b", lambda p: pods.bind(p, binding("b", "n3")), WriteOptions(), "binding")
    assert err.value.code == 409 and 'already assigned to node "n2"' in err.value.message


async def test_a_change_that_is_a_no_op_on_the_cached_copy_is_checked_against_etcd(store: RESTStore) -> None:
    key = store.key("ns", "c")
    rev = await store.ctx.etcd.create(key, orjson.dumps(pod("c", v="1")))
    await cached(store, key, rev)
    await store.ctx.cache.stop()
    await store.ctx.etcd.update(key, orjson.dumps(pod("c", v="2")), rev)

    def relabel(p: dict) -> dict:
        p["metadata"]["labels"] = {"v": "1"}
        return p

    out = await store.mutate("ns", "c", relabel, WriteOptions())
    assert out["metadata"]["labels"] == {"v": "1"}
    assert orjson.loads((await store.ctx.etcd.get(key)).value)["metadata"]["labels"] == {"v": "1"}


async def test_missing_pod_is_not_found(store: RESTStore) -> None:
    with pytest.raises(errors.StatusError) as err:
        await store.mutate("ns", "nope", lambda p: p, WriteOptions())
    assert err.value.code == 404

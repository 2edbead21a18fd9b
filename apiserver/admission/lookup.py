"""Reads admission plugins share: a Namespace object from the watch cache, or from etcd when the cache has
not seen it yet (upstream's live lookup after a lister miss)."""

from __future__ import annotations

import orjson

from apiserver.admission.interfaces import Obj, PluginConfig


async def namespace_object(config: PluginConfig, name: str) -> Obj | None:
    key = f"{config.root}namespaces/{name}"
    store = config.cache.resources.get(f"{config.root}namespaces/")
    entry = store.entries.get(key) if store is not None else None
    if entry is not None:
        return entry.obj
    kv = await config.cache.store.get(key)
    return orjson.loads(kv.value) if kv is not None else None

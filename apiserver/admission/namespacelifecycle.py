"""The NamespaceLifecycle admission plugin: nothing is created in a namespace that does not exist
(404) or is being terminated (403, cause NamespaceTerminating). Like upstream it is a mutating
plugin, so it answers before the object is defaulted and validated.

The namespace is read from the watch cache, and from etcd when the cache has not seen it yet (upstream's
live lookup), so a create right after its namespace's is never refused.
"""

from __future__ import annotations

import orjson

from apiserver.admission.interfaces import Attributes, MutationInterface, PluginConfig
from services.api import errors
from services.api.catalog import Resource


class NamespaceLifecycle(MutationInterface):
    name = "NamespaceLifecycle"

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.prefix = f"{config.root}namespaces/"

    def handles(self, res: Resource) -> bool:
        return res.namespaced

    async def admit(self, a: Attributes) -> None:
        namespace = a.namespace
        if not namespace:
            return
        key = self.prefix + namespace
        cache = self.config.cache.resources.get(self.prefix)
        entry = cache.entries.get(key) if cache is not None else None
        if entry is not None:
            ns = entry.obj
        else:
            kv = await self.config.cache.store.get(key)
            if kv is None:
                raise errors.not_found("namespaces", "", namespace)
            ns = orjson.loads(kv.value)
        if not (ns.get("metadata") or {}).get("deletionTimestamp") and (ns.get("status") or {}).get("phase") != \
                "Terminating":
            return
        res, name = a.resource, a.name
        raise errors.StatusError(
            403,
            "Forbidden",
            f'{res.qualified()} "{name}" is forbidden: unable to create new content in namespace '
            f"{namespace} because it is being terminated",
            {"name": name, "group": res.group, "kind": res.plural,
             "causes": [{"reason": "NamespaceTerminating", "message": f"namespace {namespace} is being "
                         "terminated", "field": "metadata.namespace"}]},
        )

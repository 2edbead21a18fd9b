"""The DefaultStorageClass admission plugin: a new claim that names no class at all (a nil
storageClassName and no beta annotation) gets the cluster's default class; "" keeps meaning
"no class"."""

from __future__ import annotations

from apiserver.admission.interfaces import Attributes, MutationInterface
from services.api.storage import default_storage_class, names_class


class DefaultStorageClass(MutationInterface):
    name = "DefaultStorageClass"
    resources = frozenset({("", "persistentvolumeclaims")})

    async def admit(self, a: Attributes) -> None:
        spec = a.obj.get("spec")
        if not isinstance(spec, dict) or names_class(a.obj):
            return
        cache = self.config.cache.resources.get(f"{self.config.root}storageclasses/")
        default = default_storage_class([e.obj for e in cache.entries.values()] if cache else [])
        if default is not None:
            spec["storageClassName"] = default["metadata"]["name"]

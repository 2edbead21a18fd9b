"""The StorageObjectInUseProtection admission plugin: claims and volumes are born with the finalizer
that the pvc-protection and pv-protection controllers remove once nothing uses them."""

from __future__ import annotations

from apiserver.admission.interfaces import Attributes, MutationInterface

#: the finalizer for each resource the plugin guards
FINALIZERS = {
    "persistentvolumeclaims": "kubernetes.io/pvc-protection",
    "persistentvolumes": "kubernetes.io/pv-protection",
}


class StorageObjectInUseProtection(MutationInterface):
    name = "StorageObjectInUseProtection"
    resources = frozenset(("", plural) for plural in FINALIZERS)

    async def admit(self, a: Attributes) -> None:
        meta = a.obj.get("metadata")
        if not isinstance(meta, dict):
            return
        finalizers = meta.get("finalizers")
        if not isinstance(finalizers, list):
            finalizers = meta["finalizers"] = []
        finalizer = FINALIZERS[a.resource.plural]
        if finalizer not in finalizers:
            finalizers.append(finalizer)

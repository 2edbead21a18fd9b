"""The admission chain: mutating plugins run on creates before defaulting and validation,
validating ones after validation, just before the object is stored.

Only what every upstream cluster enables and what pyk8s's components rely on: the Priority
plugin resolves `priorityClassName` into `spec.priority` and `preemptionPolicy`; the
ServiceAccount plugin mounts the projected API credentials (`kube-api-access-*`) into pods; the
ResourceQuota plugin (apiserver/auth/quota.py) charges creates to the namespace's quotas; the
StorageObjectInUseProtection plugin gives new claims and volumes their protection finalizers; the
DefaultStorageClass plugin gives claims that name no class the cluster's default one; the
DefaultTolerationSeconds plugin lets pods stay 300 s on not-ready and unreachable nodes.
"""

from __future__ import annotations

from typing import Any

from apiserver.admission import runtimeclass
from apiserver.auth.quota import QuotaAdmission
from services.api import errors
from services.api.catalog import Resource
from services.api.meta import generate_name
from services.api.storage import default_storage_class, names_class

Obj = dict[str, Any]

SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


#: StorageObjectInUseProtection's finalizer for each resource it guards
STORAGE_PROTECTION_FINALIZERS = {
    "persistentvolumeclaims": "kubernetes.io/pvc-protection",
    "persistentvolumes": "kubernetes.io/pv-protection",
}

SYSTEM_PRIORITY_CLASSES = (
    ("system-node-critical", 2000001000, "Used for system critical pods that must not be moved from their "
     "current node."),
    ("system-cluster-critical", 2000000000, "Used for system critical pods that must run in the cluster, but "
     "can be moved to another node if necessary."),
)


class Admission:
    """The admission chain; reads other objects from the watch cache, like upstream's informers."""

    def __init__(self, cache: Any, root: str, *, not_ready_toleration_seconds: int = 300,
                 unreachable_toleration_seconds: int = 300) -> None:
        self.cache = cache
        self.root = root
        self.quota = QuotaAdmission(cache, root)
        #: DefaultTolerationSeconds: taint key -> seconds a pod stays on a not-ready/unreachable node
        self.default_tolerations = {"node.kubernetes.io/not-ready": not_ready_toleration_seconds,
                                    "node.kubernetes.io/unreachable": unreachable_toleration_seconds}

    async def admit_create(self, res: Resource, obj: Obj) -> None:
        if res.group == "" and res.plural == "pods":
            self._priority(obj)
            self._service_account_token(obj)
            self._default_toleration_seconds(obj)
            runtimeclass.admit(obj, runtimeclass.runtime_classes(self.cache, self.root))
        elif res.group == "" and res.plural in STORAGE_PROTECTION_FINALIZERS:
            if res.plural == "persistentvolumeclaims":
                self._default_storage_class(obj)
            self._storage_object_in_use_protection(STORAGE_PROTECTION_FINALIZERS[res.plural], obj)

    def _default_toleration_seconds(self, pod: Obj) -> None:
        """DefaultTolerationSeconds: a pod with no toleration for the not-ready or unreachable
        NoExecute taint gets one for 300 s, so it moves off a dead node after five minutes."""
        spec = pod.setdefault("spec", {})
        tolerations = spec.get("tolerations") or []
        added = []
        for key, seconds in self.default_tolerations.items():
            if any(t.get("key") in (None, "", key) and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
                continue
            added.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds})
        if added:
            spec["tolerations"] = [*tolerations, *added]

    async def validate_create(self, res: Resource, obj: Obj, dry_run: bool) -> None:
        """The validating plugins, on the defaulted and valid object; they may refuse it or charge for it."""
        if res.group == "" and res.plural == "pods":
            runtimeclass.validate(obj, runtimeclass.runtime_classes(self.cache, self.root))
        await self.quota.validate(res, obj, dry_run)

    def _default_storage_class(self, claim: Obj) -> None:
        """DefaultStorageClass: only a claim with no class at all (a nil storageClassName, no beta
        annotation) gets the default; "" keeps meaning "no class"."""
        spec = claim.get("spec")
        if not isinstance(spec, dict) or names_class(claim):
            return
        cache = self.cache.resources.get(f"{self.root}storageclasses/")
        default = default_storage_class([e.obj for e in cache.entries.values()] if cache else [])
        if default is not None:
            spec["storageClassName"] = default["metadata"]["name"]

    @staticmethod
    def _storage_object_in_use_protection(finalizer: str, obj: Obj) -> None:
        """StorageObjectInUseProtection: claims and volumes are born with the finalizer that the
        pvc-protection and pv-protection controllers remove once nothing uses them."""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return
        finalizers = meta.get("finalizers")
        if not isinstance(finalizers, list):
            finalizers = meta["finalizers"] = []
        if finalizer not in finalizers:
            finalizers.append(finalizer)

    def _service_account_token(self, pod: Obj) -> None:
        """Mount a projected token, the cluster CA and the namespace where in-cluster clients look for them.

        Unlike upstream, a pod whose service account does not exist (yet) is admitted without the
        volume instead of being refused, so pods created before the ServiceAccount controller runs
        still start.
        """
        spec = pod.get("spec")
        if not isinstance(spec, dict) or spec.get("automountServiceAccountToken") is False:
            return
        meta = pod.get("metadata") or {}
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        accounts = self.cache.resources.get(f"{self.root}serviceaccounts/")
        entry = accounts.entries.get(f"{self.root}serviceaccounts/{meta.get('namespace')}/{account}") if accounts \
            else None
        if entry is None or entry.obj.get("automountServiceAccountToken") is False and \
                spec.get("automountServiceAccountToken") is not True:
            return
        containers = [c for key in ("initContainers", "containers") for c in spec.get(key) or []
                      if isinstance(c, dict)]
        if any(m.get("mountPath") == SA_MOUNT_PATH for c in containers for m in c.get("volumeMounts") or []
               if isinstance(m, dict)):
            return
        name = generate_name("kube-api-access-")
        volumes = spec.get("volumes")
        if not isinstance(volumes, list):
            volumes = spec["volumes"] = []
        volumes.append({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}},
        ]}})
        for container in containers:
            mounts = container.get("volumeMounts")
            if not isinstance(mounts, list):
                mounts = container["volumeMounts"] = []
            mounts.append({"name": name, "readOnly": True, "mountPath": SA_MOUNT_PATH})

    def _priority_classes(self) -> dict[str, Obj]:
        cache = self.cache.resources.get(f"{self.root}priorityclasses/")
        if cache is None:
            return {}
        return {e.obj["metadata"]["name"]: e.obj for e in cache.entries.values()}

    def _priority(self, pod: Obj) -> None:
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        name = pod.get("metadata", {}).get("name", "")
        classes = self._priority_classes()
        class_name = spec.get("priorityClassName")
        if class_name:
            pc = classes.get(class_name)
            if pc is None:
                raise errors.forbidden("pods", "", name, f"no PriorityClass with name {class_name} was found")
        else:
            pc = next((c for c in classes.values() if c.get("globalDefault")), None)
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        value = int(pc.get("value", 0)) if pc is not None else 0
        given = spec.get("priority")
        if given is not None and given != value:
            raise errors.forbidden("pods", "", name, f"the integer value of priority ({given}) must not be "
                                   "provided in pod spec; priority admission controller computed "
                                   f"{value} from the given PriorityClass name")
        spec["priority"] = value
        policy = (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        if spec.get("preemptionPolicy") is None:
            spec["preemptionPolicy"] = policy

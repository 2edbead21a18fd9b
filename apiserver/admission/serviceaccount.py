"""The ServiceAccount admission plugin: a new pod runs as the `default` service account unless it
names one, and gets the projected API credentials (`kube-api-access-*`: a token, the cluster CA and
the namespace) mounted where in-cluster clients look for them.

Unlike upstream, a pod whose service account does not exist (yet) is admitted without the volume
instead of being refused, so pods created before the ServiceAccount controller runs still start.
"""

from __future__ import annotations

from apiserver.admission.interfaces import Attributes, MutationInterface, Obj
from apiserver.registry.pods import MIRROR_ANNOTATION
from services.api.meta import generate_name

SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_SERVICE_ACCOUNT = "default"


class ServiceAccount(MutationInterface):
    name = "ServiceAccount"
    resources = frozenset({("", "pods")})

    async def admit(self, a: Attributes) -> None:
        spec = a.obj.get("spec")
        if not isinstance(spec, dict) or MIRROR_ANNOTATION in ((a.obj.get("metadata") or {}).get("annotations") or {}):
            # a mirror pod's spec is the kubelet's static pod: changed, the kubelet would delete it
            return
        if not spec.get("serviceAccountName") and not spec.get("serviceAccount"):
            spec["serviceAccountName"] = DEFAULT_SERVICE_ACCOUNT
        self._mount_token(a.obj, spec)

    def _mount_token(self, pod: Obj, spec: Obj) -> None:
        """Mount a projected token, the cluster CA and the namespace, unless the pod or its account opts out."""
        if spec.get("automountServiceAccountToken") is False:
            return
        meta = pod.get("metadata") or {}
        account = spec.get("serviceAccountName") or spec.get("serviceAccount")
        root = self.config.root
        accounts = self.config.cache.resources.get(f"{root}serviceaccounts/")
        entry = accounts.entries.get(f"{root}serviceaccounts/{meta.get('namespace')}/{account}") if accounts \
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

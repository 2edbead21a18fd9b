"""The NodeRestriction admission plugin, as upstream's plugin/pkg/admission/noderestriction: what the
Node authorizer cannot tell from a request's path, this plugin checks in its object.

A kubelet (`system:node:<name>` in `system:nodes`) may write only its own Node, and neither its
taints nor labels under `node-restriction.kubernetes.io/` or other `kubernetes.io`/`k8s.io` labels
than the kubelet's own; create only mirror pods of itself that name no other API object; delete,
evict and report the status of only pods bound to it; change nothing of a claim but its status;
mint tokens only bound to its own pods; and touch only its own Lease and CSINode. Requests of
anyone else pass untouched.
"""

from __future__ import annotations

from typing import Any

import orjson

from apiserver.admission.interfaces import CREATE, DELETE, UPDATE, Attributes, MutationInterface, Obj
from apiserver.registry.pods import MIRROR_ANNOTATION
from services.api import errors, podrefs
from services.auth.identity import node_identity

NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_RESTRICTION_LABEL_NAMESPACE = "node-restriction.kubernetes.io"
#: upstream's kubeletapis.kubeletLabels: the well-known labels a kubelet sets on its own Node
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})
#: label namespaces (and their subdomains) a kubelet may use freely
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _label_namespace(key: str) -> str:
    prefix, sep, _ = key.partition("/")
    return prefix if sep else ""


def _in_namespace(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def is_kubelet_label(key: str) -> bool:
    """Upstream's kubeletapis.IsKubeletLabel."""
    return key in KUBELET_LABELS or any(_in_namespace(_label_namespace(key), ns) for ns in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(new: dict[str, str], old: dict[str, str]) -> list[str]:
    """The added, removed or changed label keys a node may not touch, sorted."""
    modified = {k for k in new.keys() | old.keys() if new.get(k) != old.get(k) or (k in new) != (k in old)}
    out = set()
    for key in modified:
        namespace = _label_namespace(key)
        if _in_namespace(namespace, NODE_RESTRICTION_LABEL_NAMESPACE):
            out.add(key)
        kubernetes = _in_namespace(namespace, "kubernetes.io") or _in_namespace(namespace, "k8s.io")
        if kubernetes and not is_kubelet_label(key):
            out.add(key)
    return sorted(out)


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


class NodeRestriction(MutationInterface):
    name = "NodeRestriction"
    operations = frozenset({CREATE, UPDATE, DELETE})
    resources = frozenset({("", "pods"), ("", "nodes"), ("", "persistentvolumeclaims"), ("", "serviceaccounts"),
                           ("coordination.k8s.io", "leases"), ("storage.k8s.io", "csinodes")})
    subresources = frozenset({"", "status", "eviction", "token", "binding", "ephemeralcontainers", "resize"})

    async def _lookup(self, path: str, key: str) -> Obj | None:
        """An object from the watch cache, or from etcd when the cache has not seen it yet."""
        prefix = f"{self.config.root}{path}/"
        cache = self.config.cache.resources.get(prefix)
        entry = cache.entries.get(prefix + key) if cache is not None else None
        if entry is not None:
            return entry.obj
        kv = await self.config.cache.store.get(prefix + key)
        return orjson.loads(kv.value) if kv is not None else None

    async def _pod(self, namespace: str, name: str) -> Obj:
        pod = await self._lookup("pods", f"{namespace}/{name}")
        if pod is None:
            raise errors.not_found("pods", "", name)
        return pod

    async def admit(self, a: Attributes) -> None:
        if a.user is None:
            return
        node, is_node = node_identity(a.user)
        if not is_node:
            return
        if not node:
            raise self._forbidden(a, f'could not determine node from user "{a.user.name}"')
        res = (a.resource.group, a.resource.plural)
        if res == ("", "pods"):
            await self._admit_pod(node, a)
        elif res == ("", "nodes"):
            self._admit_node(node, a)
        elif res == ("", "persistentvolumeclaims"):
            self._admit_claim(node, a)
        elif res == ("", "serviceaccounts"):
            await self._admit_token(node, a)
        elif res == ("coordination.k8s.io", "leases"):
            self._admit_named(a, node, "can only access node lease with the same name as the requesting node",
                              NODE_LEASE_NAMESPACE)
        elif res == ("storage.k8s.io", "csinodes"):
            self._admit_named(a, node, "can only access CSINode with the same name as the requesting node")

    @staticmethod
    def _forbidden(a: Attributes, why: str) -> errors.StatusError:
        """Upstream's admission.NewForbidden: `<resource> "<name>" is forbidden: <why>`."""
        return errors.forbidden(a.resource.plural, a.resource.group, a.name or "Unknown", why)

    async def _admit_pod(self, node: str, a: Attributes) -> None:
        if a.subresource == "":
            if a.operation == CREATE:
                await self._admit_mirror_pod(node, a)
            elif a.operation == DELETE:
                if _spec(a.old).get("nodeName") != node:
                    raise self._forbidden(a, f'node "{node}" can only delete pods with spec.nodeName set to itself')
            else:
                raise self._forbidden(a, f'unexpected operation "{a.operation}", node "{node}" can only create and '
                                         "delete mirror pods")
        elif a.subresource == "status":
            if a.operation != UPDATE:
                raise self._forbidden(a, f'unexpected operation "{a.operation}"')
            if _spec(a.old).get("nodeName") != node:
                raise self._forbidden(a, f'node "{node}" can only update pod status for pods with spec.nodeName set '
                                         "to itself")
            if _labels(a.old) != _labels(a.obj):
                raise self._forbidden(a, f'node "{node}" cannot update labels through pod status')
        elif a.subresource == "eviction":
            if a.operation != CREATE:
                raise self._forbidden(a, f"unexpected operation {a.operation}")
            pod = await self._pod(a.namespace, a.name)
            if _spec(pod).get("nodeName") != node:
                raise self._forbidden(a, f"node {node} can only evict pods with spec.nodeName set to itself")
        else:
            raise self._forbidden(a, f'unexpected pod subresource "{a.subresource}", only \'status\' and '
                                     "'eviction' are allowed")

    async def _admit_mirror_pod(self, node: str, a: Attributes) -> None:
        pod = a.obj
        meta = pod.get("metadata") or {}
        if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
            raise self._forbidden(a, f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only '
                                     "create mirror pods")
        if _spec(pod).get("nodeName") != node:
            raise self._forbidden(a, f'node "{node}" can only create pods with spec.nodeName set to itself')
        owners = meta.get("ownerReferences") or []
        if len(owners) > 1:
            raise self._forbidden(a, f'node "{node}" can only create pods with a single owner reference set to itself')
        owner: dict[str, Any] = owners[0] if owners and isinstance(owners[0], dict) else {}
        if (owner.get("apiVersion"), owner.get("kind"), owner.get("name")) != ("v1", "Node", node):
            raise self._forbidden(a, f'node "{node}" can only create pods with an owner reference set to itself')
        if owner.get("controller") is not True:
            raise self._forbidden(a, f'node "{node}" can only create pods with a controller owner reference set to '
                                     "itself")
        if owner.get("blockOwnerDeletion") is True:
            raise self._forbidden(a, f'node "{node}" must not set blockOwnerDeletion on an owner reference')
        registered = await self._lookup("minions", node)
        if registered is None:
            raise errors.not_found("nodes", "", node)
        uid = (registered.get("metadata") or {}).get("uid")
        if owner.get("uid") != uid:
            raise self._forbidden(a, f"node {node} UID mismatch: expected {owner.get('uid')} got {uid}")
        spec = _spec(pod)
        if spec.get("serviceAccountName"):
            raise self._forbidden(a, f'node "{node}" can not create pods that reference a service account')
        if podrefs.secret_names(pod):
            raise self._forbidden(a, f'node "{node}" can not create pods that reference secrets')
        if podrefs.configmap_names(pod):
            raise self._forbidden(a, f'node "{node}" can not create pods that reference configmaps')
        for volume in spec.get("volumes") or ():
            sources = ((volume or {}).get("projected") or {}).get("sources") or ()
            if any((source or {}).get("clusterTrustBundle") is not None for source in sources):
                raise self._forbidden(a, f'node "{node}" can not create pods that reference clustertrustbundles')
        if any((volume or {}).get("persistentVolumeClaim") is not None for volume in spec.get("volumes") or ()):
            raise self._forbidden(a, f'node "{node}" can not create pods that reference persistentvolumeclaims')

    def _admit_node(self, node: str, a: Attributes) -> None:
        name = (a.obj.get("metadata") or {}).get("name") or ""
        if name != node:
            raise self._forbidden(a, f'node "{node}" is not allowed to modify node "{name}"')
        spec = _spec(a.obj)
        if a.operation == CREATE:
            if spec.get("configSource") is not None:
                raise self._forbidden(a, f'node "{node}" is not allowed to create pods with a non-nil configSource')
            refused = forbidden_labels(_labels(a.obj), {})
            if refused:
                raise self._forbidden(a, f'node "{node}" is not allowed to set the following labels: '
                                         + ", ".join(refused))
        elif a.operation == UPDATE:
            old_spec = _spec(a.old)
            if spec.get("configSource") is not None and spec.get("configSource") != old_spec.get("configSource"):
                raise self._forbidden(a, f'node "{node}" is not allowed to update configSource to a new non-nil '
                                         "configSource")
            if (spec.get("taints") or []) != (old_spec.get("taints") or []):
                raise self._forbidden(a, f'node "{node}" is not allowed to modify taints')
            refused = forbidden_labels(_labels(a.obj), _labels(a.old))
            if refused:
                raise self._forbidden(a, "is not allowed to modify labels: " + ", ".join(refused))

    def _admit_claim(self, node: str, a: Attributes) -> None:
        if a.subresource != "status":
            raise self._forbidden(a, "may only update PVC status")
        if a.operation != UPDATE:
            raise self._forbidden(a, f'unexpected operation "{a.operation}"')
        changed = sorted(_claim_changes(a.old or {}, a.obj))
        if changed:
            raise self._forbidden(a, f'node "{node}" is not allowed to update fields other than status.capacity and '
                                     f"status.conditions: {', '.join(changed)}")

    async def _admit_token(self, node: str, a: Attributes) -> None:
        if a.operation != CREATE or a.subresource != "token":
            return
        ref = _spec(a.obj).get("boundObjectRef") or {}
        if not isinstance(ref, dict) or ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" \
                or not ref.get("name"):
            raise self._forbidden(a, "node requested token not bound to a pod")
        if not ref.get("uid"):
            raise self._forbidden(a, "node requested token with a pod binding without a uid")
        pod = await self._pod(a.namespace, ref["name"])
        if ref["uid"] != (pod.get("metadata") or {}).get("uid"):
            raise self._forbidden(a, f"the UID in the bound object reference ({ref['uid']}) does not match the UID in "
                                     "record. The object might have been deleted and then recreated")
        if _spec(pod).get("nodeName") != node:
            raise self._forbidden(a, "node requested token bound to a pod scheduled on a different node")

    def _admit_named(self, a: Attributes, node: str, why: str, namespace: str | None = None) -> None:
        """Leases and CSINodes: a node touches only the one named after it (leases in kube-node-lease)."""
        if namespace is not None and a.namespace != namespace:
            raise self._forbidden(a, f'can only access leases in the "{namespace}" system namespace')
        if a.name != node:
            raise self._forbidden(a, why)


def _claim_changes(old: Obj, new: Obj) -> set[str]:
    """The fields of a claim that differ, apart from what a node may report (status.capacity,
    status.conditions) and what every write changes (resourceVersion, managedFields)."""

    def comparable(claim: Obj) -> Obj:
        meta = {k: v for k, v in (claim.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
        status = {k: v for k, v in (claim.get("status") or {}).items() if k not in ("capacity", "conditions")}
        return {**claim, "metadata": meta, "status": status}

    before, after = comparable(old), comparable(new)
    out = set()
    for section in before.keys() | after.keys():
        one, two = before.get(section), after.get(section)
        if isinstance(one, dict) and isinstance(two, dict):
            out.update(f"{section}.{k}" for k in one.keys() | two.keys() if one.get(k) != two.get(k))
        elif one != two:
            out.add(section)
    return out

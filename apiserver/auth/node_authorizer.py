"""The Node authorizer (`--authorization-mode=Node`), as upstream's plugin/pkg/auth/authorizer/node.

A kubelet (`system:node:<name>` in `system:nodes`) may read a secret, configMap, claim or volume, and
mint a service-account token, only when the object is related to a pod bound to its node. The
relations are a graph kept from the watch cache:

    node <- pod <- secret | configmap | pvc | serviceaccount
    node <- pod <- pvc <- pv <- secret

Nodes, pods, leases and CSINodes are scoped by name or field selector; everything else a kubelet
needs is the static `system:node` rules. What this authorizer cannot scope by the request alone
(which Node a node writes, which pod it deletes) NodeRestriction admission checks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from apiserver.auth.authz import ALLOW, NO_OPINION, Attributes, Rules
from apiserver.auth.rbac import rule_allows
from apiserver.storage.cache import ResourceCache
from services.api import podrefs
from services.auth.identity import UserInfo, node_identity

Obj = dict[str, Any]
#: (type, namespace, name) of one object in the graph
Vertex = tuple[str, str, str]
Edge = tuple[Vertex, Vertex]

NODE_LEASE_NAMESPACE = "kube-node-lease"


def _meta(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def pod_edges(pod: Obj) -> list[Edge]:
    """A scheduled pod points at its node, and what it uses points at the pod (upstream's AddPod)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return []
    namespace, name = _meta(pod)
    me: Vertex = ("pod", namespace, name)
    edges: list[Edge] = [(me, ("node", "", node))]
    account = (pod.get("spec") or {}).get("serviceAccountName")
    if account:
        edges.append((("serviceaccount", namespace, account), me))
    edges += [(("secret", namespace, n), me) for n in podrefs.secret_names(pod)]
    edges += [(("configmap", namespace, n), me) for n in podrefs.configmap_names(pod)]
    edges += [(("pvc", namespace, n), me) for n in podrefs.claim_names(pod)]
    return edges


def pv_edges(pv: Obj) -> list[Edge]:
    """A volume points at the claim bound to it, and the secrets it mounts with point at it (AddPV)."""
    _, name = _meta(pv)
    me: Vertex = ("pv", "", name)
    claim = (pv.get("spec") or {}).get("claimRef") or {}
    if not claim.get("name"):
        return []
    edges: list[Edge] = [(me, ("pvc", claim.get("namespace") or "", claim["name"]))]
    edges += [(("secret", ns, n), me) for ns, n in podrefs.persistent_volume_secrets(pv)]
    return edges


class _Source:
    """One resource feeding the graph: its cache, the last change of it the graph applied, and the edges
    each of its objects contributed, so an update replaces them and a delete takes them back."""

    def __init__(self, cache: ResourceCache, edges: Callable[[Obj], list[Edge]]) -> None:
        self.cache = cache
        self.edges = edges
        #: None until the graph first read the cache whole
        self.applied: int | None = None
        self.contributed: dict[str, list[Edge]] = {}


class NodeGraph:
    """Which objects each node may reach, maintained incrementally from the watch cache."""

    def __init__(self, pods: ResourceCache, pvs: ResourceCache) -> None:
        self._sources = [_Source(pods, pod_edges), _Source(pvs, pv_edges)]
        #: child -> the vertices it points at, counted (two pods may share a secret)
        self._out: dict[Vertex, Counter[Vertex]] = {}

    def _add(self, edges: Iterable[Edge]) -> None:
        for child, parent in edges:
            self._out.setdefault(child, Counter())[parent] += 1

    def _remove(self, edges: Iterable[Edge]) -> None:
        for child, parent in edges:
            parents = self._out.get(child)
            if parents is None:
                continue
            parents[parent] -= 1
            if parents[parent] <= 0:
                del parents[parent]
            if not parents:
                del self._out[child]

    def _set(self, source: _Source, key: str, obj: Obj | None) -> None:
        self._remove(source.contributed.pop(key, ()))
        edges = source.edges(obj) if obj is not None else []
        if edges:
            source.contributed[key] = edges
            self._add(edges)

    def _rebuild(self, source: _Source) -> None:
        for edges in source.contributed.values():
            self._remove(edges)
        source.contributed = {}
        for key, entry in source.cache.entries.items():
            self._set(source, key, entry.obj)

    def sync(self) -> None:
        """Apply the changes the caches made since the last question, from their bounded history; when
        that no longer reaches back far enough (or a cache reloaded), read the cache again whole."""
        for source in self._sources:
            cache = source.cache
            if not cache.ready:
                continue
            changes = None if source.applied is None else cache.changes_since(source.applied)
            if changes is None:
                self._rebuild(source)
                source.applied = cache.history[-1].revision if cache.history else cache.history_start
                continue
            for change in changes:
                self._set(source, change.key, None if change.type == "DELETED" else change.obj)
                source.applied = change.revision

    def has_path(self, node: str, start: Vertex) -> bool:
        """Whether `start` leads to `node`, never walking through another node."""
        self.sync()
        target: Vertex = ("node", "", node)
        seen = {start}
        stack = [start]
        while stack:
            for parent in self._out.get(stack.pop(), ()):
                if parent == target:
                    return True
                if parent[0] != "node" and parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return False


def _field_equals(selector: str, field: str) -> list[str]:
    """The values `field` must equal in a field selector (`a=b`, `a==b`)."""
    out = []
    for term in selector.split(","):
        if "!=" in term:
            continue
        key, sep, value = term.partition("=")
        if sep and key.strip() == field:
            out.append(value.lstrip("=").strip())
    return out


class NodeAuthorizer:
    """Answers for kubelets only; everyone else gets no opinion and goes on to RBAC."""

    def __init__(self, graph: NodeGraph, node_rules: list[Obj]) -> None:
        self.graph = graph
        self.node_rules = node_rules

    def rules_for(self, user: UserInfo, namespace: str) -> Rules:
        if node_identity(user)[1]:
            return [], [], True, "node authorizer does not support user rule resolution"
        return [], [], False, ""

    def authorize(self, attrs: Attributes) -> tuple[str, str]:
        node, is_node = node_identity(attrs.user)
        if not is_node:
            return NO_OPINION, ""
        if not node:
            return NO_OPINION, f'unknown node for user "{attrs.user.name}"'
        if attrs.resource_request:
            scoped = self._scoped(node, attrs)
            if scoped is not None:
                return scoped
        if any(rule_allows(attrs, rule) for rule in self.node_rules):
            return ALLOW, ""
        return NO_OPINION, ""

    def _scoped(self, node: str, a: Attributes) -> tuple[str, str] | None:
        """The decision for the resources upstream subdivides per node; None for the rest."""
        group, resource = a.api_group, a.resource
        if not group and resource in ("secrets", "configmaps"):
            return self._read_namespaced(node, resource[:-1], a)
        if not group and resource == "persistentvolumeclaims":
            return self._status_update(node, "pvc", a) if a.subresource == "status" else self._get(node, "pvc", a)
        if not group and resource == "persistentvolumes":
            return self._get(node, "pv", a)
        if not group and resource == "serviceaccounts":
            return self._create_token(node, a)
        if group == "coordination.k8s.io" and resource == "leases":
            return self._lease(node, a)
        if group == "storage.k8s.io" and resource == "csinodes":
            return self._csinode(node, a)
        if not group and resource == "nodes":
            return self._node(node, a)
        if not group and resource == "pods":
            return self._pod(node, a)
        return None

    def _related(self, node: str, kind: str, a: Attributes) -> tuple[str, str]:
        if not a.name:
            return NO_OPINION, "No Object name found"
        if self.graph.has_path(node, (kind, a.namespace, a.name)):
            return ALLOW, ""
        return NO_OPINION, f"no relationship found between node '{node}' and this object"

    def _get(self, node: str, kind: str, a: Attributes) -> tuple[str, str]:
        if a.verb != "get":
            return NO_OPINION, "can only get individual resources of this type"
        if a.subresource:
            return NO_OPINION, "cannot get subresource"
        return self._related(node, kind, a)

    def _status_update(self, node: str, kind: str, a: Attributes) -> tuple[str, str]:
        if a.verb not in ("update", "patch"):
            return NO_OPINION, "can only get/update/patch this type"
        return self._related(node, kind, a)

    def _read_namespaced(self, node: str, kind: str, a: Attributes) -> tuple[str, str]:
        if a.verb not in ("get", "list", "watch"):
            return NO_OPINION, "can only read resources of this type"
        if a.subresource:
            return NO_OPINION, "cannot read subresource"
        if not a.namespace:
            return NO_OPINION, "can only read namespaced object of this type"
        return self._related(node, kind, a)

    def _create_token(self, node: str, a: Attributes) -> tuple[str, str]:
        if a.verb != "create" or not a.name:
            return NO_OPINION, "can only create tokens for individual service accounts"
        if a.subresource != "token":
            return NO_OPINION, "can only create token subresource of serviceaccount"
        if self.graph.has_path(node, ("serviceaccount", a.namespace, a.name)):
            return ALLOW, ""
        return NO_OPINION, f"no relationship found between node '{node}' and this object"

    @staticmethod
    def _lease(node: str, a: Attributes) -> tuple[str, str]:
        if a.verb not in ("get", "create", "update", "patch", "delete"):
            return NO_OPINION, "can only get, create, update, patch, or delete a node lease"
        if a.namespace != NODE_LEASE_NAMESPACE:
            return NO_OPINION, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace'
        if a.verb != "create" and a.name != node:
            return NO_OPINION, "can only access node lease with the same name as the requesting node"
        return ALLOW, ""

    @staticmethod
    def _csinode(node: str, a: Attributes) -> tuple[str, str]:
        if a.verb not in ("get", "create", "update", "patch", "delete"):
            return NO_OPINION, "can only get, create, update, patch, or delete a CSINode"
        if a.subresource:
            return NO_OPINION, "cannot authorize CSINode subresources"
        if a.verb != "create" and a.name != node:
            return NO_OPINION, "can only access CSINode with the same name as the requesting node"
        return ALLOW, ""

    @staticmethod
    def _node(node: str, a: Attributes) -> tuple[str, str]:
        """Writes are left to NodeRestriction; reads only of its own Node (upstream's
        AuthorizeNodeWithSelectors, on by default since 1.32)."""
        if not a.subresource:
            if a.verb in ("create", "update", "patch"):
                return ALLOW, ""
            if a.verb in ("get", "list", "watch"):
                if a.name == node:
                    return ALLOW, ""
                if not a.name:
                    return NO_OPINION, f"node '{node}' cannot read all nodes, only its own Node object"
                return NO_OPINION, f"node '{node}' cannot read '{a.name}', only its own Node object"
        elif a.subresource == "status" and a.verb in ("update", "patch"):
            return ALLOW, ""
        return NO_OPINION, ""

    def _pod(self, node: str, a: Attributes) -> tuple[str, str]:
        """Reads of its own pods; creates and deletes (mirror pods), status and eviction, which
        NodeRestriction limits to pods bound to the node."""
        sub, verb = a.subresource, a.verb
        if not sub:
            if verb == "get":
                return self._get(node, "pod", a)
            if verb in ("list", "watch"):
                if node in _field_equals(a.field_selector, "spec.nodeName"):
                    return ALLOW, ""
                if a.name:
                    return self._related(node, "pod", a)
                return NO_OPINION, "can only list/watch pods with spec.nodeName field selector"
            if verb in ("create", "delete"):
                return ALLOW, ""
        elif (sub == "status" and verb in ("update", "patch")) or (sub == "eviction" and verb == "create"):
            return ALLOW, ""
        return NO_OPINION, ""

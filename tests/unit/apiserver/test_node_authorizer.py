"""The Node authorizer: its graph follows the watch cache change by change (and whole after a reload),
and a kubelet reaches exactly what its pods use."""

from __future__ import annotations

from typing import Any

import orjson

from apiserver.auth.authz import ALLOW, NO_OPINION, request_attributes
from apiserver.auth.bootstrap_policy import node_rules
from apiserver.auth.node_authorizer import NodeAuthorizer, NodeGraph
from apiserver.storage.cache import ResourceCache
from apiserver.storage.etcd import WatchEvent
from services.auth.identity import UserInfo

PODS, PVS = "/registry/pods/", "/registry/persistentvolumes/"


def node_user(name: str) -> UserInfo:
    return UserInfo(f"system:node:{name}", groups=("system:nodes", "system:authenticated"))


def pod(name: str, node: str | None, ns: str = "default", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"serviceAccountName": "default", "containers": [{"name": "c", "image": "i"}], **spec}
    if node:
        body["nodeName"] = node
    return {"metadata": {"name": name, "namespace": ns}, "spec": body}


class Caches:
    def __init__(self) -> None:
        self.pods, self.pvs = ResourceCache(PODS), ResourceCache(PVS)
        self.pods.load([], 1)
        self.pvs.load([], 1)
        self.revision = 1

    def put(self, cache: ResourceCache, key: str, obj: dict[str, Any]) -> None:
        self.revision += 1
        cache.apply(WatchEvent(cache.prefix + key, orjson.dumps(obj), self.revision, False))

    def delete(self, cache: ResourceCache, key: str) -> None:
        self.revision += 1
        cache.apply(WatchEvent(cache.prefix + key, b"", self.revision, True))


def ask(authz: NodeAuthorizer, user: UserInfo, method: str, path: str, query: str = "") -> tuple[str, str]:
    return authz.authorize(request_attributes(user, method, path, query))


def test_secrets_configmaps_claims_and_volumes_follow_the_pods_bound_to_the_node() -> None:
    c = Caches()
    authz = NodeAuthorizer(NodeGraph(c.pods, c.pvs), node_rules())
    n1 = node_user("n1")
    secret = "/api/v1/namespaces/default/secrets/"
    assert ask(authz, n1, "GET", secret + "s1") == (NO_OPINION, "no relationship found between node 'n1' and "
                                                                 "this object")
    c.put(c.pods, "default/p1", pod("p1", "n1", volumes=[
        {"name": "a", "secret": {"secretName": "s1"}},
        {"name": "b", "projected": {"sources": [{"configMap": {"name": "cm1"}}]}},
        {"name": "c", "persistentVolumeClaim": {"claimName": "data"}}],
        imagePullSecrets=[{"name": "pull"}]))
    c.put(c.pods, "default/p2", pod("p2", "n2", containers=[
        {"name": "c", "image": "i",
         "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s2", "key": "k"}}}]}]))
    c.put(c.pvs, "pv1", {"metadata": {"name": "pv1"}, "spec": {
        "claimRef": {"namespace": "default", "name": "data"},
        "csi": {"driver": "d", "volumeHandle": "h",
                "nodePublishSecretRef": {"namespace": "kube-system", "name": "csi"}}}})
    for path in (secret + "s1", secret + "pull", "/api/v1/namespaces/default/configmaps/cm1",
                 "/api/v1/namespaces/default/persistentvolumeclaims/data", "/api/v1/persistentvolumes/pv1",
                 "/api/v1/namespaces/kube-system/secrets/csi", "/api/v1/namespaces/default/pods/p1"):
        assert ask(authz, n1, "GET", path) == (ALLOW, ""), path
    assert ask(authz, n1, "GET", secret + "s2")[0] == NO_OPINION
    assert ask(authz, node_user("n2"), "GET", secret + "s2") == (ALLOW, "")
    assert ask(authz, node_user("n2"), "GET", secret + "s1")[0] == NO_OPINION
    # a list of every secret is refused; a watch of one the node may read is not
    assert ask(authz, n1, "GET", "/api/v1/namespaces/default/secrets") == (
        NO_OPINION, "No Object name found")
    assert ask(authz, n1, "GET", "/api/v1/namespaces/default/secrets", "watch=1&fieldSelector=metadata.name%3Ds1") \
        == (ALLOW, "")
    assert ask(authz, n1, "DELETE", secret + "s1") == (NO_OPINION, "can only read resources of this type")
    # the pod moves off the node (deleted): its secret goes with it; one recreated elsewhere is not n1's
    c.delete(c.pods, "default/p1")
    assert ask(authz, n1, "GET", secret + "s1")[0] == NO_OPINION
    assert ask(authz, n1, "GET", "/api/v1/persistentvolumes/pv1")[0] == NO_OPINION


def test_a_secret_shared_by_two_pods_stays_until_both_are_gone() -> None:
    c = Caches()
    authz = NodeAuthorizer(NodeGraph(c.pods, c.pvs), node_rules())
    n1, path = node_user("n1"), "/api/v1/namespaces/default/secrets/shared"
    ref = [{"name": "v", "secret": {"secretName": "shared"}}]
    c.put(c.pods, "default/a", pod("a", "n1", volumes=ref))
    c.put(c.pods, "default/b", pod("b", "n1", volumes=ref))
    assert ask(authz, n1, "GET", path)[0] == ALLOW
    c.delete(c.pods, "default/a")
    assert ask(authz, n1, "GET", path)[0] == ALLOW
    c.put(c.pods, "default/b", pod("b", "n1"))
    assert ask(authz, n1, "GET", path)[0] == NO_OPINION


def test_a_graph_behind_the_caches_history_is_rebuilt_from_the_cache() -> None:
    c = Caches()
    authz = NodeAuthorizer(NodeGraph(c.pods, c.pvs), node_rules())
    n1, path = node_user("n1"), "/api/v1/namespaces/default/pods/"
    c.put(c.pods, "default/old", pod("old", "n1"))
    assert ask(authz, n1, "GET", path + "old")[0] == ALLOW
    c.delete(c.pods, "default/old")
    c.put(c.pods, "default/p", pod("p", "n1"))
    # as after a reload, or more changes than the history keeps: the changes themselves are gone
    c.pods.history.clear()
    c.pods.history_start = c.revision
    assert ask(authz, n1, "GET", path + "p") == (ALLOW, "")
    assert ask(authz, n1, "GET", path + "old")[0] == NO_OPINION


def test_nodes_pods_leases_and_tokens_are_scoped_to_the_node() -> None:
    c = Caches()
    authz = NodeAuthorizer(NodeGraph(c.pods, c.pvs), node_rules())
    n1 = node_user("n1")
    c.put(c.pods, "default/p1", pod("p1", "n1"))
    assert ask(authz, n1, "GET", "/api/v1/nodes/n1") == (ALLOW, "")
    assert ask(authz, n1, "GET", "/api/v1/nodes/n2") == (
        NO_OPINION, "node 'n1' cannot read 'n2', only its own Node object")
    assert ask(authz, n1, "GET", "/api/v1/nodes") == (
        NO_OPINION, "node 'n1' cannot read all nodes, only its own Node object")
    assert ask(authz, n1, "GET", "/api/v1/nodes", "fieldSelector=metadata.name%3Dn1&watch=true") == (ALLOW, "")
    assert ask(authz, n1, "PATCH", "/api/v1/nodes/n2/status") == (ALLOW, "")  # NodeRestriction refuses it
    assert ask(authz, n1, "DELETE", "/api/v1/nodes/n1")[0] == NO_OPINION
    assert ask(authz, n1, "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn1") == (ALLOW, "")
    assert ask(authz, n1, "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn2") == (
        NO_OPINION, "can only list/watch pods with spec.nodeName field selector")
    assert ask(authz, n1, "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1") == (ALLOW, "")
    assert ask(authz, n1, "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2") == (
        NO_OPINION, "can only access node lease with the same name as the requesting node")
    assert ask(authz, n1, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/n1") == (
        NO_OPINION, 'can only access leases in the "kube-node-lease" system namespace')
    token = "/api/v1/namespaces/default/serviceaccounts/default/token"
    assert ask(authz, n1, "POST", token) == (ALLOW, "")
    assert ask(authz, node_user("n2"), "POST", token)[0] == NO_OPINION
    assert ask(authz, n1, "GET", "/api/v1/namespaces/default/serviceaccounts/default") == (
        NO_OPINION, "can only create tokens for individual service accounts")
    # the static system:node rules for the rest; nothing for anyone who is not a node
    assert ask(authz, n1, "POST", "/api/v1/namespaces/default/events") == (ALLOW, "")
    assert ask(authz, n1, "GET", "/api/v1/namespaces/default/services") == (ALLOW, "")
    assert ask(authz, n1, "POST", "/api/v1/namespaces")[0] == NO_OPINION
    assert ask(authz, UserInfo("system:node:n1"), "GET", "/api/v1/nodes/n1") == (NO_OPINION, "")
    assert ask(authz, UserInfo("system:node:", groups=("system:nodes",)), "GET", "/api/v1/nodes/n1") == (
        NO_OPINION, 'unknown node for user "system:node:"')


def test_unscheduled_pods_reach_no_node_and_rules_are_not_enumerable() -> None:
    c = Caches()
    authz = NodeAuthorizer(NodeGraph(c.pods, c.pvs), node_rules())
    c.put(c.pods, "default/p", pod("p", None, volumes=[{"name": "v", "secret": {"secretName": "s"}}]))
    assert ask(authz, node_user("n1"), "GET", "/api/v1/namespaces/default/secrets/s")[0] == NO_OPINION
    assert authz.rules_for(node_user("n1"), "default") == (
        [], [], True, "node authorizer does not support user rule resolution")
    assert authz.rules_for(UserInfo("jane"), "default") == ([], [], False, "")

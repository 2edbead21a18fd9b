"""NodeRestriction admission: a kubelet writes only its own Node (not its taints, nor restricted
labels), only mirror pods of itself, and only the status, eviction, deletion and tokens of pods
bound to it; anyone else is left alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from apiserver.admission import chain
from apiserver.admission.interfaces import CREATE, DELETE, UPDATE, PluginConfig
from apiserver.admission.noderestriction import forbidden_labels, is_kubelet_label
from services.api import errors
from services.api.catalog import BUILTIN
from services.auth.identity import UserInfo

ROOT = "/registry/"
N1 = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))
ADMIN = UserInfo("kubernetes-admin", groups=("system:masters",))


class Store:
    async def get(self, key: str) -> None:
        return None


def plugin_chain(group: str, plural: str, objects: dict[str, dict[str, Any]]) -> chain.ResourceChain:
    resources: dict[str, Any] = {}
    for key, obj in objects.items():
        prefix = ROOT + key.split("/", 1)[0] + "/"
        resources.setdefault(prefix, SimpleNamespace(entries={}))
        resources[prefix].entries[ROOT + key] = SimpleNamespace(obj=obj)
    cache = SimpleNamespace(resources=resources, store=Store())
    built = chain.build(["NodeRestriction"], PluginConfig(cache, ROOT))  # type: ignore[arg-type]
    res = next(r for r in BUILTIN if r.group == group and r.plural == plural)
    return built.for_resource(res)


def pod(name: str, node: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                                          **meta},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}


NODE1 = {"metadata": {"name": "n1", "uid": "node-uid-1"}}
CLUSTER = {"pods/default/mine": pod("mine", "n1"), "pods/default/theirs": pod("theirs", "n2"), "minions/n1": NODE1}


async def refused(coro: Any, message: str, code: int = 403) -> None:
    with pytest.raises(errors.StatusError) as info:
        await coro
    assert info.value.code == code, info.value.message
    assert info.value.message == message


async def test_node_objects_only_its_own_and_no_restricted_labels_or_taints() -> None:
    nodes = plugin_chain("", "nodes", CLUSTER)
    own = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "node.kubernetes.io/pool": "a",
                                                 "example.com/x": "y"}}, "spec": {}}
    await nodes.admit(CREATE, own, None, "", False, N1)
    await refused(nodes.admit(UPDATE, {"metadata": {"name": "n2"}}, {"metadata": {"name": "n2"}}, "status", False, N1),
                  'nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"')
    await refused(nodes.admit(CREATE, {"metadata": {"name": "n1", "labels": {
        "node-restriction.kubernetes.io/trusted": "yes", "node-role.kubernetes.io/control-plane": ""}}}, None, "",
        False, N1), 'nodes "n1" is forbidden: node "n1" is not allowed to set the following labels: '
                    "node-restriction.kubernetes.io/trusted, node-role.kubernetes.io/control-plane")
    tainted = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    await refused(nodes.admit(UPDATE, {"metadata": {"name": "n1"}, "spec": {}}, tainted, "", False, N1),
                  'nodes "n1" is forbidden: node "n1" is not allowed to modify taints')
    labelled = {"metadata": {"name": "n1", "labels": {"a.node-restriction.kubernetes.io/x": "1"}}, "spec": {}}
    await refused(nodes.admit(UPDATE, {"metadata": {"name": "n1"}, "spec": {}}, labelled, "", False, N1),
                  'nodes "n1" is forbidden: is not allowed to modify labels: a.node-restriction.kubernetes.io/x')
    # the admin (and anyone not a node) may do all of it
    await nodes.admit(UPDATE, {"metadata": {"name": "n2"}, "spec": {}}, tainted, "", False, ADMIN)


def test_kubelet_labels() -> None:
    assert is_kubelet_label("kubernetes.io/arch") and is_kubelet_label("kubelet.kubernetes.io/x")
    assert is_kubelet_label("a.node.kubernetes.io/x") and not is_kubelet_label("node-role.kubernetes.io/worker")
    assert forbidden_labels({"k8s.io/x": "1", "example.com/y": "2"}, {"topology.kubernetes.io/zone": "z"}) == [
        "k8s.io/x"]


async def test_pods_only_mirror_pods_of_itself_and_its_own_status_deletes_and_evictions() -> None:
    pods = plugin_chain("", "pods", CLUSTER)
    mirror = pod("static-n1", "n1", annotations={"kubernetes.io/config.mirror": "h"}, ownerReferences=[
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid-1", "controller": True}])
    await pods.admit(CREATE, mirror, None, "", False, N1)
    await refused(pods.admit(CREATE, pod("plain", "n1"), None, "", False, N1),
                  'pods "plain" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "n1" '
                  "can only create mirror pods")
    with_secret = {**mirror, "spec": {**mirror["spec"], "volumes": [{"name": "s", "secret": {"secretName": "x"}}]}}
    await refused(pods.admit(CREATE, with_secret, None, "", False, N1),
                  'pods "static-n1" is forbidden: node "n1" can not create pods that reference secrets')
    wrong_uid = {**mirror, "metadata": {**mirror["metadata"], "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "other", "controller": True}]}}
    await refused(pods.admit(CREATE, wrong_uid, None, "", False, N1),
                  'pods "static-n1" is forbidden: node n1 UID mismatch: expected other got node-uid-1')
    theirs, mine = CLUSTER["pods/default/theirs"], CLUSTER["pods/default/mine"]
    await pods.admit(UPDATE, mine, mine, "status", False, N1)
    await refused(pods.admit(UPDATE, theirs, theirs, "status", False, N1),
                  'pods "theirs" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set '
                  "to itself")
    relabelled = {**mine, "metadata": {**mine["metadata"], "labels": {"a": "b"}}}
    await refused(pods.admit(UPDATE, relabelled, mine, "status", False, N1),
                  'pods "mine" is forbidden: node "n1" cannot update labels through pod status')
    await pods.admit(DELETE, mine, mine, "", False, N1)
    await refused(pods.admit(DELETE, theirs, theirs, "", False, N1),
                  'pods "theirs" is forbidden: node "n1" can only delete pods with spec.nodeName set to itself')
    await refused(pods.admit(UPDATE, mine, mine, "", False, N1),
                  'pods "mine" is forbidden: unexpected operation "UPDATE", node "n1" can only create and delete '
                  "mirror pods")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "theirs", "namespace": "default"}}
    await refused(pods.admit(CREATE, eviction, None, "eviction", False, N1),
                  'pods "theirs" is forbidden: node n1 can only evict pods with spec.nodeName set to itself')
    gone = {**eviction, "metadata": {"name": "gone", "namespace": "default"}}
    await refused(pods.admit(CREATE, gone, None, "eviction", False, N1), 'pods "gone" not found', 404)


async def test_tokens_only_bound_to_its_own_pods() -> None:
    accounts = plugin_chain("", "serviceaccounts", CLUSTER)

    def request(name: str, uid: str) -> dict[str, Any]:
        return {"metadata": {"name": "default", "namespace": "default"},
                "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}}}

    await accounts.admit(CREATE, request("mine", "uid-mine"), None, "token", False, N1)
    await refused(accounts.admit(CREATE, request("theirs", "uid-theirs"), None, "token", False, N1),
                  'serviceaccounts "default" is forbidden: node requested token bound to a pod scheduled on a '
                  "different node")
    await refused(accounts.admit(CREATE, request("mine", ""), None, "token", False, N1),
                  'serviceaccounts "default" is forbidden: node requested token with a pod binding without a uid')
    await refused(accounts.admit(CREATE, {"metadata": {"name": "default"}, "spec": {}}, None, "token", False, N1),
                  'serviceaccounts "default" is forbidden: node requested token not bound to a pod')


async def test_leases_and_claims() -> None:
    leases = plugin_chain("coordination.k8s.io", "leases", CLUSTER)
    await leases.admit(CREATE, {"metadata": {"name": "n1", "namespace": "kube-node-lease"}}, None, "", False, N1)
    await refused(leases.admit(CREATE, {"metadata": {"name": "n2", "namespace": "kube-node-lease"}}, None, "", False,
                               N1),
                  'leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same name as '
                  "the requesting node")
    claims = plugin_chain("", "persistentvolumeclaims", CLUSTER)
    old = {"metadata": {"name": "data", "namespace": "default", "resourceVersion": "1"}, "spec": {"volumeName": "v"},
           "status": {"phase": "Bound"}}
    grown = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"},
             "status": {"phase": "Bound", "capacity": {"storage": "2Gi"}}}
    await claims.admit(UPDATE, grown, old, "status", False, N1)
    await refused(claims.admit(UPDATE, {**grown, "status": {"phase": "Lost"}}, old, "status", False, N1),
                  'persistentvolumeclaims "data" is forbidden: node "n1" is not allowed to update fields other than '
                  "status.capacity and status.conditions: status.phase")
    await refused(claims.admit(UPDATE, grown, old, "", False, N1),
                  'persistentvolumeclaims "data" is forbidden: may only update PVC status')


async def test_a_mirror_pod_gets_no_service_account_so_its_node_may_create_it() -> None:
    """ServiceAccount admission leaves mirror pods alone, as upstream's: a default account would make
    NodeRestriction refuse the kubelet its own static pod."""
    cache = SimpleNamespace(resources={ROOT + "minions/": SimpleNamespace(entries={ROOT + "minions/n1": SimpleNamespace(
        obj=NODE1)})}, store=Store())
    built = chain.build(["ServiceAccount", "NodeRestriction"], PluginConfig(cache, ROOT))  # type: ignore[arg-type]
    pods = built.for_resource(next(r for r in BUILTIN if r.group == "" and r.plural == "pods"))
    mirror = pod("static-n1", "n1", annotations={"kubernetes.io/config.mirror": "h"}, ownerReferences=[
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid-1", "controller": True}])
    await pods.admit(CREATE, mirror, None, "", False, N1)
    assert "serviceAccountName" not in mirror["spec"]
    plain = pod("plain", "n1")
    await pods.admit(CREATE, plain, None, "", False, ADMIN)
    assert plain["spec"]["serviceAccountName"] == "default"

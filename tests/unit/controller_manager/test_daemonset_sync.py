"""The DaemonSet controller's sync alone, on the in-memory apiserver: how many nodes a rolling update
takes down at once."""

from __future__ import annotations

from typing import Any

from controller_manager.controllers import daemonset
from controller_manager.resources import DAEMON_SETS, NODES, PODS
from tests.unit.controller_manager.harness import harness

Obj = dict[str, Any]
UID = "ds-uid"


def ds(max_unavailable: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "ns", "uid": UID, "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "c", "image": "new"}]}}}}


def node(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def old_pod(node_name: str) -> Obj:
    """A ready daemon pod of an earlier template on `node_name`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"agent-{node_name}", "namespace": "ns",
                         "labels": {"app": "agent", "controller-revision-hash": "old"},
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                              "uid": UID, "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "old"}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}


async def test_a_percentage_of_max_unavailable_rounds_up() -> None:
    """25 % of 10 nodes is 2.5: upstream's UnavailableCount rounds up, so 3 old pods go at once."""
    names = [f"n{i}" for i in range(10)]
    seed = [(DAEMON_SETS, ds("25%"))] + [(NODES, node(n)) for n in names] + [(PODS, old_pod(n)) for n in names]
    async with harness(daemonset, seed) as env:
        await env.sync("ns/agent")
        assert len(env.api.writes("pods", "delete")) == 3

"""The subresource REST objects: each found by the name the catalog gives it, only where it exists."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.registry import subresources
from apiserver.registry.store import RESTStore, ServerContext
from apiserver.registry.strategies import strategy_for
from apiserver.registry.subresources.ephemeral import EphemeralContainersREST
from apiserver.registry.subresources.eviction import EvictionREST
from apiserver.registry.subresources.scale import ScaleREST
from apiserver.registry.subresources.status import ApprovalREST, FinalizeREST, StatusREST
from apiserver.registry.subresources.token import TokenREST
from apiserver.storage.cache import WatchCache
from apiserver.storage.etcd import EtcdStore
from services.api.catalog import Catalog, Resource

CATALOG = Catalog()
#: Served by the streams and proxies of the front door, not by a REST object.
STREAMS = {"log", "exec", "attach", "portforward", "proxy"}


def _sign(body: Any, namespace: str, account: dict[str, Any], bound: dict[str, Any] | None) -> dict[str, Any]:
    raise AssertionError("no token is signed here")


def rest(group: str, plural: str, name: str) -> subresources.SubresourceREST | None:
    res = next(r for r in CATALOG if r.group == group and r.plural == plural)
    return subresources.rest_for(res, name, _store(res), subresources.Dependencies({}, _sign))


def _store(res: Resource) -> RESTStore:
    etcd = EtcdStore(["http://127.0.0.1:1"])  # never connected: nothing here reads or writes
    return RESTStore(res, strategy_for(res), ServerContext(etcd=etcd, cache=WatchCache(etcd, "/registry/")))


def test_every_subresource_the_catalog_names_has_its_rest_object() -> None:
    missing = [f"{r.plural}/{sub}" for r in CATALOG for sub in r.subresources
               if sub not in STREAMS and rest(r.group, r.plural, sub) is None]
    assert missing == []


@pytest.mark.parametrize(("group", "plural", "name", "cls"), [
    ("", "pods", "status", StatusREST),
    ("", "pods", "eviction", EvictionREST),
    ("", "pods", "ephemeralcontainers", EphemeralContainersREST),
    ("", "namespaces", "finalize", FinalizeREST),
    ("", "serviceaccounts", "token", TokenREST),
    ("", "replicationcontrollers", "scale", ScaleREST),
    ("apps", "deployments", "scale", ScaleREST),
    ("certificates.k8s.io", "certificatesigningrequests", "approval", ApprovalREST),
])
def test_found_by_name(group: str, plural: str, name: str, cls: type) -> None:
    assert type(rest(group, plural, name)) is cls


@pytest.mark.parametrize(("group", "plural", "name"), [
    ("", "configmaps", "scale"),
    ("", "configmaps", "status"),
    ("apps", "deployments", "ephemeralcontainers"),
    ("apps", "deployments", "status/extra"),
    ("", "pods", "log"),
])
def test_none_where_the_resource_has_no_such_subresource(group: str, plural: str, name: str) -> None:
    assert rest(group, plural, name) is None


def test_finalize_is_written_with_put_only() -> None:
    assert FinalizeREST.verbs == ("update",)
    assert StatusREST.verbs == ("get", "update", "patch")


def test_scale_of_a_deployment_and_a_replication_controller() -> None:
    deployment = rest("apps", "deployments", "scale")
    assert isinstance(deployment, ScaleREST)
    scale = deployment.to_scale({
        "metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"replicas": 2},
    })
    assert scale == {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=web"},
    }
    controller = rest("", "replicationcontrollers", "scale")
    assert isinstance(controller, ScaleREST)
    rc_scale = controller.to_scale({"metadata": {"name": "rc"}, "spec": {"selector": {"b": "2", "a": "1"}}})
    assert rc_scale["status"] == {"replicas": 0, "selector": "a=1,b=2"}

"""The clusterrole-aggregation controller in a real controller-manager process against the session's
etcd and apiserver, including the apiserver's bootstrap admin/edit/view roles."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.client import Client, ClientConfig, NotFound, gvr
from tests.integration.cluster import Proc, eventually

CLUSTER_ROLES = gvr("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)
LABEL = f"test.pyk8s.io/aggregate-{os.getpid()}"


@pytest.fixture(scope="module")
def controller_manager(apiserver: str, workdir: Path) -> Iterator[Proc]:
    cm = Proc([sys.executable, "-m", "controller_manager", "--master", apiserver, "--secure-port", "0",
               "--leader-elect=false", "--controllers", "clusterrole-aggregation", "--log-format", "console"],
              workdir / "cm-aggregation.log")
    yield cm
    cm.stop()


@pytest.fixture
async def client(apiserver: str, controller_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=apiserver)) as c:
        yield c


def rule(verb: str, resource: str) -> dict[str, Any]:
    return {"apiGroups": [""], "resources": [resource], "verbs": [verb]}


def role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels or {}}, "rules": rules}


async def rules_of(client: Client, name: str) -> list[dict[str, Any]]:
    return (await client.get(CLUSTER_ROLES, name)).get("rules") or []


async def test_bootstrap_roles_are_aggregated(client: Client) -> None:
    async def filled() -> bool:
        admin, edit, view = [await rules_of(client, n) for n in ("admin", "edit", "view")]
        return (any("roles" in r.get("resources", []) and "create" in r["verbs"] for r in admin)
                and any("deployments" in r.get("resources", []) and "create" in r["verbs"] for r in edit)
                and not any("roles" in r.get("resources", []) for r in edit)
                and any("pods" in r.get("resources", []) and "get" in r["verbs"] for r in view)
                and not any("secrets" in r.get("resources", []) for r in view))

    await eventually(filled, within=30, what="admin, edit and view aggregated")
    managers = {m["manager"] for m in (await client.get(CLUSTER_ROLES, "view"))["metadata"]["managedFields"]}
    assert "clusterrole-aggregation-controller" in managers


async def test_aggregate_follows_labelled_roles(client: Client) -> None:
    tag = f"agg{os.getpid()}"
    aggregate, first, second, other = (f"{tag}-{n}" for n in ("aggregate", "a", "b", "unlabelled"))
    labels = {LABEL: "true"}
    body = role(aggregate, [])
    body["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": labels}]}
    try:
        await client.create(CLUSTER_ROLES, body)
        await client.create(CLUSTER_ROLES, role(second, [rule("list", "services"), rule("get", "pods")], labels))
        await client.create(CLUSTER_ROLES, role(first, [rule("get", "pods")], labels))
        await client.create(CLUSTER_ROLES, role(other, [rule("delete", "nodes")], {LABEL: "false"}))

        async def rules_are(expected: list[dict[str, Any]]) -> bool:
            return await rules_of(client, aggregate) == expected

        # by role name, duplicates dropped, the unlabelled role ignored
        await eventually(lambda: rules_are([rule("get", "pods"), rule("list", "services")]), within=20,
                         what="aggregated rules of a and b")

        current = await client.get(CLUSTER_ROLES, second)
        current["rules"] = [rule("watch", "configmaps")]
        await client.replace(CLUSTER_ROLES, current)
        await eventually(lambda: rules_are([rule("get", "pods"), rule("watch", "configmaps")]), within=20,
                         what="b's new rules aggregated")

        await client.delete(CLUSTER_ROLES, first)
        await eventually(lambda: rules_are([rule("watch", "configmaps")]), within=20, what="a's rules dropped")

        await client.patch(CLUSTER_ROLES, second, {"metadata": {"labels": {LABEL: None}}})
        await eventually(lambda: rules_are([]), within=20, what="b unlabelled")

        await client.patch(CLUSTER_ROLES, other, {"metadata": {"labels": {LABEL: "true"}}})
        await eventually(lambda: rules_are([rule("delete", "nodes")]), within=20, what="newly labelled role")

        # a hand edit of the aggregate is put back
        current = await client.get(CLUSTER_ROLES, aggregate)
        current["rules"] = [rule("*", "secrets")]
        await client.replace(CLUSTER_ROLES, current)
        await eventually(lambda: rules_are([rule("delete", "nodes")]), within=20, what="hand edit reverted")
    finally:
        for name in (aggregate, first, second, other):
            try:
                await client.delete(CLUSTER_ROLES, name)
            except NotFound:
                pass

"""Hollow nodes behave like kwok's default stages: a Job's pods finish Succeeded after a short run, so
the Job completes; a stages file replaces the defaults (here: every Job pod fails, so the Job fails at
its backoffLimit). Real job controller, scheduler and hollow kubelets (tests/integration/cluster.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.client import Client, ClientConfig, gvr
from tests.integration import cluster as plane
from tests.integration.cluster import POOL, Cluster, Proc, eventually

cluster = plane.cluster
kubectl = plane.kubectl
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
JOBS = gvr("batch/v1", "jobs")
FAILING = """
apiVersion: pyk8s.io/v1alpha1
kind: HollowStages
stages:
- name: job-fails
  selector: {ownerKinds: [Job]}
  delay: 500ms
  next: {exitCode: 3}
"""


@pytest.fixture(scope="module")
def job_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-hollow-stages", "--leader-elect=false", "--controllers=job")
    yield cm
    cm.stop()
    print(cm.log_tail(60))  # shown by pytest when a test of this module failed


@pytest.fixture
async def client(cluster: Cluster, job_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


def job(name: str, node_selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A Job whose pods carry no script: the hollow node's stages alone decide how they end."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                                           "restartPolicy": "Never", "nodeSelector": node_selector,
                                           "terminationGracePeriodSeconds": 30}},
                     **spec}}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind and c["status"] == "True"), None)


async def test_job_on_hollow_nodes_completes(client: Client, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(JOBS, job("batch", {POOL[0]: POOL[1]}, completions=3), ns)

    async def complete() -> dict[str, Any] | None:
        obj = await client.get(JOBS, "batch", ns)
        return obj if condition(obj, "Complete") else None

    done = await eventually(complete, within=60, what="the job complete")
    assert done["status"]["succeeded"] == 3 and done["status"].get("failed", 0) == 0
    pods = (await client.list(PODS, ns))["items"]
    assert len(pods) == 3
    for p in pods:
        assert p["status"]["phase"] == "Succeeded"
        (cs,) = p["status"]["containerStatuses"]
        term = cs["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (0, "Completed")
        assert cs["restartCount"] == 0 and p["status"]["podIP"]


async def test_stages_file_replaces_the_defaults(cluster: Cluster, client: Client, unique_ns: str,
                                                 tmp_path: Path) -> None:
    ns = unique_ns
    stages = tmp_path / "stages.yaml"
    stages.write_text(FAILING)
    proc = cluster.hollow_kubelet("stages-fail", 1, "--node-labels", "stages=fail", "--hollow-stages", str(stages))
    try:
        await client.create(JOBS, job("doomed", {"stages": "fail"}, backoffLimit=1), ns)

        async def failed() -> dict[str, Any] | None:
            obj = await client.get(JOBS, "doomed", ns)
            return obj if condition(obj, "Failed") else None

        done = await eventually(failed, within=60, what="the job failed")
        assert condition(done, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]
        assert done["status"]["failed"] == 2 and done["status"].get("succeeded", 0) == 0
        pods = (await client.list(PODS, ns))["items"]
        assert {p["spec"]["nodeName"] for p in pods} == {"stages-fail-0"}
        for p in pods:
            term = p["status"]["containerStatuses"][0]["state"]["terminated"]
            assert p["status"]["phase"] == "Failed" and (term["exitCode"], term["reason"]) == (3, "Error")
    finally:
        proc.stop()
        await client.delete(NODES, "stages-fail-0")

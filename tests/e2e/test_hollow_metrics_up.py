"""`pyk8s up --no-nodes --hollow-nodes 3`: the metrics server it starts scrapes the hollow nodes' kubelet
APIs on loopback (authenticated with its client certificate, authorized by SubjectAccessReview), so
`kubectl top` shows the usage the pods declare, and an HPA scales on it."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator

import pytest

from tests.conftest import free_port
from tests.e2e.test_cluster_up import UP_TIMEOUT, Cluster, pyk8s, short_state_dir, wait_for


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--no-nodes", "--hollow-nodes",
                   "3", timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        yield Cluster(state_dir, time.monotonic() - started, result.stdout)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


def test_top_and_autoscaling_on_hollow_nodes(cluster: Cluster) -> None:
    usage = json.dumps({"c": {"cpu": "300m", "memory": "40Mi"}})
    cluster.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sim", "namespace": "default"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sim"}}, "template": {
                       "metadata": {"labels": {"app": "sim"}, "annotations": {"hollow.pyk8s.io/usage": usage}},
                       "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
                           "requests": {"cpu": "100m", "memory": "16Mi"}}}]}}}})
    rows: list[list[str]] = []

    def listed() -> bool:
        out = cluster.kubectl("top", "pods", "-l", "app=sim", "--containers", check=False)
        rows[:] = [line.split() for line in out.splitlines()[1:] if line.strip()]
        return len(rows) == 1

    assert wait_for(listed, 90), rows
    assert rows[0][2:] == ["300m", "40Mi"]
    nodes = [line.split() for line in cluster.kubectl("top", "nodes").splitlines()[1:]]
    assert {n[0] for n in nodes} == {"hollow-0", "hollow-1", "hollow-2"}
    cluster.kubectl("autoscale", "deployment", "sim", "--cpu-percent=50", "--min=1", "--max=4")
    assert wait_for(lambda: cluster.get("deployment", "sim")["spec"]["replicas"] == 4, 90), \
        cluster.get("hpa", "sim").get("status")

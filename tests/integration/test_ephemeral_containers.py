"""pods/ephemeralcontainers against the real apiserver, etcd and a hollow kubelet: what upstream lets
through (additions only), the exact messages it refuses the rest with, and the status the kubelet
reports for the ephemeral containers it starts once."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.client import ApiError, Client, gvr
from tests.conftest import Kubectl, eventually, hollow_kubelet_process

PODS = gvr("v1", "pods")
NODE = "hollow-eph-0"
SUB = "ephemeralcontainers"
FORBIDDEN_FIELD = "Forbidden: cannot be set for an Ephemeral Container"


@pytest.fixture(scope="module")
def hollow_kubelet(kubeconfig: Path, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    with hollow_kubelet_process(kubeconfig, workdir / "hollow-eph-kubelet.log", "hollow-eph", 1) as proc:
        yield proc


@pytest.fixture
async def client(apiserver: str) -> AsyncIterator[Client]:
    c = Client(apiserver)
    yield c
    await c.close()


def debugger(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent", **fields}


async def make_pod(client: Client, ns: str, name: str = "app", **annotations: str) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": NODE, "restartPolicy": "Always",
                     "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
                     "containers": [{"name": "app", "image": "nginx:1.25"}]}}
    return await client.create(PODS, body, ns)


async def add(client: Client, ns: str, pod: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return await client.patch(PODS, pod, {"spec": {"ephemeralContainers": list(containers)}}, ns,
                              patch_type="strategic", subresource=SUB)


async def append(client: Client, ns: str, pod: str, container: dict[str, Any]) -> dict[str, Any]:
    return await client.patch(PODS, pod, [{"op": "add", "path": "/spec/ephemeralContainers/-", "value": container}],
                              ns, patch_type="json", subresource=SUB)


async def refused(call: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        await call
    assert info.value.code == 422, info.value.message
    return info.value


async def test_get_and_add_through_subresource(client: Client, unique_ns: str) -> None:
    await make_pod(client, unique_ns)
    got = await client.get(PODS, "app", unique_ns, subresource=SUB)
    assert got["kind"] == "Pod" and "ephemeralContainers" not in got["spec"]
    out = await add(client, unique_ns, "app", debugger("dbg", targetContainerName="app", stdin=True, tty=True))
    [eph] = out["spec"]["ephemeralContainers"]
    assert eph == {"name": "dbg", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                   "targetContainerName": "app", "stdin": True, "tty": True, "resources": {},
                   "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    # A strategic merge patch adds by name, keeping what is there; other changes in the body are dropped.
    out = await client.patch(PODS, "app", {"metadata": {"labels": {"x": "y"}},
                                           "spec": {"ephemeralContainers": [debugger("dbg2")]}},
                             unique_ns, patch_type="strategic", subresource=SUB)
    assert sorted(c["name"] for c in out["spec"]["ephemeralContainers"]) == ["dbg", "dbg2"]
    assert "labels" not in out["metadata"]
    managers = {(f["manager"], f.get("subresource")) for f in out["metadata"]["managedFields"]}
    assert any(sub == SUB for _, sub in managers)
    # PUT of the whole pod works too (kubectl's fallback), and a stale resourceVersion conflicts.
    whole = await client.get(PODS, "app", unique_ns, subresource=SUB)
    whole["spec"]["ephemeralContainers"].append(debugger("dbg3", command=["sh"]))
    out = await client.replace(PODS, whole, namespace=unique_ns, subresource=SUB)
    assert sorted(c["name"] for c in out["spec"]["ephemeralContainers"]) == ["dbg", "dbg2", "dbg3"]
    with pytest.raises(ApiError) as info:
        await client.replace(PODS, whole, namespace=unique_ns, subresource=SUB)
    assert info.value.code == 409


async def test_validation_messages(client: Client, unique_ns: str) -> None:
    await make_pod(client, unique_ns)
    await add(client, unique_ns, "app", debugger("dbg"))
    pod = await client.get(PODS, "app", unique_ns, subresource=SUB)

    removed = {**pod, "spec": {**pod["spec"], "ephemeralContainers": []}}
    err = await refused(client.replace(PODS, removed, namespace=unique_ns, subresource=SUB))
    assert err.message == ('Pod "app" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral '
                           'containers "dbg" may not be removed\n')

    changed = await client.get(PODS, "app", unique_ns, subresource=SUB)
    changed["spec"]["ephemeralContainers"][0]["image"] = "busybox:1.37"
    err = await refused(client.replace(PODS, changed, namespace=unique_ns, subresource=SUB))
    assert err.message.startswith('Pod "app" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral '
                                  'containers "dbg" may not be changed\n')
    assert "busybox:1.37" in err.message

    err = await refused(append(client, unique_ns, "app", debugger("app")))
    assert err.message == 'Pod "app" is invalid: spec.ephemeralContainers[1].name: Duplicate value: "app"'
    err = await refused(append(client, unique_ns, "app", debugger("setup")))
    assert err.message == 'Pod "app" is invalid: spec.ephemeralContainers[1].name: Duplicate value: "setup"'

    err = await refused(append(client, unique_ns, "app", debugger("bad", targetContainerName="nope")))
    assert err.message == 'Pod "app" is invalid: spec.ephemeralContainers[1].targetContainerName: Not found: "nope"'
    err = await refused(append(client, unique_ns, "app", debugger("bad", targetContainerName="dbg")))
    assert err.message == 'Pod "app" is invalid: spec.ephemeralContainers[1].targetContainerName: Not found: "dbg"'

    err = await refused(append(client, unique_ns, "app", debugger("bad", ports=[{"containerPort": 80}])))
    assert err.message == f'Pod "app" is invalid: spec.ephemeralContainers[1].ports: {FORBIDDEN_FIELD}'
    probe = {"exec": {"command": ["true"]}}
    err = await refused(append(client, unique_ns, "app", debugger(
        "bad", readinessProbe=probe, lifecycle={"preStop": probe}, resources={"limits": {"cpu": "1"}},
        restartPolicy="Always")))
    assert err.message == (
        'Pod "app" is invalid: ['
        f"spec.ephemeralContainers[1].resources: {FORBIDDEN_FIELD}, "
        f"spec.ephemeralContainers[1].restartPolicy: {FORBIDDEN_FIELD}, "
        f"spec.ephemeralContainers[1].readinessProbe: {FORBIDDEN_FIELD}, "
        f"spec.ephemeralContainers[1].lifecycle: {FORBIDDEN_FIELD}]")
    err = await refused(append(client, unique_ns, "app", debugger("sub", volumeMounts=[
        {"name": "v", "mountPath": "/v", "subPath": "x"}])))
    assert 'spec.ephemeralContainers[1].volumeMounts[0].name: Not found: "v"' in err.message
    assert f"spec.ephemeralContainers[1].volumeMounts[0].subPath: {FORBIDDEN_FIELD}" in err.message

    final = await client.get(PODS, "app", unique_ns)
    assert [c["name"] for c in final["spec"]["ephemeralContainers"]] == ["dbg"]


async def test_pod_update_and_create_cannot_set_ephemeral_containers(
        client: Client, kubectl: Kubectl, unique_ns: str) -> None:
    await make_pod(client, unique_ns)
    pod = await client.get(PODS, "app", unique_ns)
    pod["spec"]["ephemeralContainers"] = [debugger("dbg")]
    err = await refused(client.replace(PODS, pod, namespace=unique_ns))
    assert err.message.startswith('Pod "app" is invalid: spec: Forbidden: pod updates may not change fields other '
                                  "than `spec.containers[*].image`,")
    fresh = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other"},
             "spec": {"containers": [{"name": "c", "image": "nginx"}], "ephemeralContainers": [debugger("dbg")]}}
    err = await refused(client.create(PODS, fresh, unique_ns))
    assert err.message == 'Pod "other" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create'
    # kubectl sees the subresource in discovery and can read it.
    got = kubectl.run("get", "--raw", f"/api/v1/namespaces/{unique_ns}/pods/app/ephemeralcontainers").stdout
    assert json.loads(got)["metadata"]["name"] == "app"


async def test_kubelet_starts_ephemeral_containers_once(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    await make_pod(client, unique_ns, **{"hollow.pyk8s.io/container.once": "exit=3,after=0.5"})

    async def running() -> dict[str, Any] | None:
        p = await client.get(PODS, "app", unique_ns)
        return p if p["status"].get("phase") == "Running" else None

    await eventually(running)
    await add(client, unique_ns, "app", debugger("dbg", targetContainerName="app", stdin=True, tty=True),
              debugger("once"))

    async def statuses() -> dict[str, dict[str, Any]] | None:
        p = await client.get(PODS, "app", unique_ns)
        found = {s["name"]: s for s in p["status"].get("ephemeralContainerStatuses") or []}
        if found.get("dbg", {}).get("state", {}).get("running") and found.get("once", {}).get("state", {}).get(
                "terminated"):
            return found
        return None

    found = await eventually(statuses)
    dbg, once = found["dbg"], found["once"]
    assert dbg["ready"] is False and dbg["restartCount"] == 0 and dbg["image"] == "docker.io/library/busybox:1.36"
    assert dbg["containerID"].startswith("containerd://") and "started" not in dbg
    assert once["state"]["terminated"]["exitCode"] == 3 and once["state"]["terminated"]["reason"] == "Error"
    # A crashed ephemeral container stays terminated even though the pod's restartPolicy is Always.
    await client.patch(PODS, "app", {"metadata": {"labels": {"poke": "1"}}}, unique_ns)
    await asyncio.sleep(3)
    p = await client.get(PODS, "app", unique_ns)
    later = {s["name"]: s for s in p["status"]["ephemeralContainerStatuses"]}
    assert later["once"]["restartCount"] == 0 and later["once"]["state"]["terminated"]["exitCode"] == 3
    assert later["once"]["containerID"] == once["containerID"]
    assert p["status"]["phase"] == "Running"
    assert [c["type"] for c in p["status"]["conditions"] if c["status"] != "True"] == []


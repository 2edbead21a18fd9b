"""LimitRanger admission on a real apiserver and etcd, driven by the real kubectl where a user would:
LimitRange defaults land on pods (before ResourceQuota charges them), container, pod and claim bounds
are enforced with upstream's messages, and a LimitRange itself is defaulted and validated as upstream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import Kubectl


@pytest.fixture
async def api(apiserver: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=apiserver, timeout=30) as client:
        yield client


@pytest.fixture
async def ns(api: httpx.AsyncClient) -> str:
    name = f"limits-{uuid.uuid4().hex[:8]}"
    r = await api.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


async def limit_range(api: httpx.AsyncClient, ns: str, *limits: dict[str, Any], name: str = "limits") -> dict:
    r = await api.post(f"/api/v1/namespaces/{ns}/limitranges",
                       json={"metadata": {"name": name}, "spec": {"limits": list(limits)}})
    assert r.status_code == 201, r.text
    return r.json()


def container(name: str = "c", requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": name, "image": "busybox", "resources": resources}


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [container()], **spec}}


async def create(api: httpx.AsyncClient, ns: str, body: dict[str, Any], plural: str = "pods") -> httpx.Response:
    return await api.post(f"/api/v1/namespaces/{ns}/{plural}", json=body)


def forbidden(r: httpx.Response) -> str:
    assert r.status_code == 403, r.text
    status = r.json()
    assert status["kind"] == "Status" and status["reason"] == "Forbidden"
    return str(status["message"])


async def test_defaults_land_on_containers_and_init_containers(api: httpx.AsyncClient, ns: str) -> None:
    await limit_range(api, ns, {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                                "defaultRequest": {"cpu": "100m"}})
    r = await create(api, ns, pod("p", container("app", requests={"memory": "64Mi"}),
                                  initContainers=[container("init")]))
    assert r.status_code == 201, r.text
    created = r.json()
    app = created["spec"]["containers"][0]["resources"]
    assert app == {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}}
    init = created["spec"]["initContainers"][0]["resources"]
    # The default limit of memory is its default request too (the LimitRange's own defaulting).
    assert init == {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}}
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for container app; cpu, memory limit for container app; "
        "cpu, memory request for init container init; cpu, memory limit for init container init")


async def test_a_containers_own_limit_is_its_request_not_the_default_request(api: httpx.AsyncClient,
                                                                             ns: str) -> None:
    await limit_range(api, ns, {"type": "Container", "default": {"cpu": "1"}, "defaultRequest": {"cpu": "100m"}})
    r = await create(api, ns, pod("p", container(limits={"cpu": "2"})))
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}
    assert "annotations" not in r.json()["metadata"]


async def test_pods_without_a_limit_range_are_left_alone(api: httpx.AsyncClient, ns: str) -> None:
    r = await create(api, ns, pod("p"))
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["containers"][0]["resources"] == {}
    assert "annotations" not in r.json()["metadata"]


def test_max_is_enforced_with_upstreams_message(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "cpu"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}))
    stored = kubectl.json("-n", unique_ns, "get", "limitrange", "cpu")
    assert stored["spec"]["limits"][0] == {"type": "Container", "max": {"cpu": "1"}, "default": {"cpu": "1"},
                                           "defaultRequest": {"cpu": "1"}}
    big = pod("big", container(limits={"cpu": "2"}))
    result = kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=json.dumps(big), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == ('Error from server (Forbidden): error when creating "STDIN": pods "big" is '
                                     'forbidden: maximum cpu usage per Container is 1, but limit is 2')
    kubectl.run("-n", unique_ns, "run", "small", "--image=busybox")
    small = kubectl.json("-n", unique_ns, "get", "pod", "small")
    assert small["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}


async def test_container_min_max_and_ratio(api: httpx.AsyncClient, ns: str) -> None:
    await limit_range(api, ns, {"type": "Container", "min": {"memory": "64Mi"}, "max": {"memory": "1Gi"},
                                "maxLimitRequestRatio": {"cpu": "2"}})
    r = await create(api, ns, pod("p", container(requests={"memory": "32Mi", "cpu": "100m"},
                                                 limits={"memory": "2Gi", "cpu": "300m"})))
    assert forbidden(r) == (
        'pods "p" is forbidden: [minimum memory usage per Container is 64Mi, but request is 32Mi, maximum memory '
        'usage per Container is 1Gi, but limit is 2Gi, cpu max limit to request ratio per Container is 2, but '
        'provided ratio is 3.000000]')
    r = await create(api, ns, pod("q", container(requests={"cpu": "100m", "memory": "64Mi"},
                                                 limits={"cpu": "200m", "memory": "1Gi"})))
    assert r.status_code == 201, r.text


async def test_pod_bounds_apply_to_the_sum_of_its_containers(api: httpx.AsyncClient, ns: str) -> None:
    await limit_range(api, ns, {"type": "Pod", "max": {"cpu": "1"}, "min": {"memory": "100Mi"}})
    two = pod("p", container("a", limits={"cpu": "600m", "memory": "50Mi"}),
              container("b", limits={"cpu": "600m", "memory": "50Mi"}))
    assert forbidden(await create(api, ns, two)) == (
        'pods "p" is forbidden: maximum cpu usage per Pod is 1, but limit is 1200m')
    one = pod("q", container("a", limits={"cpu": "500m", "memory": "50Mi"}),
              container("b", limits={"cpu": "500m", "memory": "50Mi"}))
    r = await create(api, ns, one)
    assert r.status_code == 201, r.text
    none = pod("r")
    assert forbidden(await create(api, ns, none)) == (
        'pods "r" is forbidden: [minimum memory usage per Pod is 100Mi.  No request is specified, maximum cpu '
        'usage per Pod is 1.  No limit is specified]')


async def test_claims_storage_min_and_max(api: httpx.AsyncClient, ns: str) -> None:
    await limit_range(api, ns, {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"},
                                "max": {"storage": "10Gi"}})

    def claim(name: str, size: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                     "resources": {"requests": {"storage": size}}}}

    assert forbidden(await create(api, ns, claim("big", "20Gi"), "persistentvolumeclaims")) == (
        'persistentvolumeclaims "big" is forbidden: maximum storage usage per PersistentVolumeClaim is 10Gi, '
        'but request is 20Gi')
    assert forbidden(await create(api, ns, claim("tiny", "500Mi"), "persistentvolumeclaims")) == (
        'persistentvolumeclaims "tiny" is forbidden: minimum storage usage per PersistentVolumeClaim is 1Gi, '
        'but request is 500Mi')
    r = await create(api, ns, claim("fits", "5Gi"), "persistentvolumeclaims")
    assert r.status_code == 201, r.text


async def test_quota_charges_the_defaulted_pod(api: httpx.AsyncClient, ns: str) -> None:
    """LimitRanger runs before ResourceQuota: a quota on requests.cpu admits a pod that declares none
    once the LimitRange has given it one, and charges that request."""
    await limit_range(api, ns, {"type": "Container", "defaultRequest": {"cpu": "250m"}, "default": {"cpu": "500m"}})
    r = await api.post(f"/api/v1/namespaces/{ns}/resourcequotas",
                       json={"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "1"}}})
    assert r.status_code == 201, r.text
    quota = r.json()
    quota["status"] = {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "0"}}
    r = await api.put(f"/api/v1/namespaces/{ns}/resourcequotas/q/status", json=quota)
    assert r.status_code == 200, r.text
    r = await create(api, ns, pod("p"))
    assert r.status_code == 201, r.text
    r = await api.get(f"/api/v1/namespaces/{ns}/resourcequotas/q")
    assert r.json()["status"]["used"] == {"requests.cpu": "250m"}


async def test_pod_updates_and_dry_runs(api: httpx.AsyncClient, ns: str) -> None:
    r = await create(api, ns, pod("p", container(limits={"cpu": "2"})))
    assert r.status_code == 201, r.text
    await limit_range(api, ns, {"type": "Container", "max": {"cpu": "1"}})
    r = await api.patch(f"/api/v1/namespaces/{ns}/pods/p", json={"metadata": {"labels": {"a": "b"}}},
                        headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    r = await api.post(f"/api/v1/namespaces/{ns}/pods", params={"dryRun": "All"}, json=pod("d"))
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1"}


@pytest.mark.parametrize(("item", "message"), [
    ({"type": "Container", "max": {"cpu": "1"}, "default": {"cpu": "2"}},
     '[spec.limits[0].defaultRequest[cpu]: Invalid value: "2": default request value 2 is greater than max value '
     '1, spec.limits[0].default[cpu]: Invalid value: "1": default value 2 is greater than max value 1]'),
    ({"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}},
     '[spec.limits[0].min[cpu]: Invalid value: "2": min value 2 is greater than max value 1, '
     'spec.limits[0].defaultRequest[cpu]: Invalid value: "1": min value 2 is greater than default request value 1, '
     'spec.limits[0].default[cpu]: Invalid value: "2": min value 2 is greater than default value 1]'),
    ({"type": "Container", "default": {"memory": "1Gi"}, "defaultRequest": {"memory": "2Gi"}},
     'spec.limits[0].defaultRequest[memory]: Invalid value: "2Gi": default request value 2Gi is greater than '
     'default limit value 1Gi'),
    ({"type": "Pod", "max": {"cpu": "1"}, "default": {"cpu": "1"}},
     "spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'"),
    ({"type": "PersistentVolumeClaim", "max": {"cpu": "1"}},
     "spec.limits[0].limits: Required value: either minimum or maximum storage value is required, but neither "
     "was provided"),
    ({"type": "Container", "maxLimitRequestRatio": {"cpu": "500m"}},
     'spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "500m": ratio 500m is less than 1'),
    ({"type": "Container", "min": {"cpu": "1"}, "max": {"cpu": "2"}, "maxLimitRequestRatio": {"cpu": "3"}},
     'spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "3": ratio 3 is greater than max/min = 2.000000'),
    ({"type": "Container", "max": {"storage": "1Gi"}},
     '[spec.limits[0].max[storage]: Invalid value: "storage": must be a standard resource for containers, '
     'spec.limits[0].default[storage]: Invalid value: "storage": must be a standard resource for containers, '
     'spec.limits[0].defaultRequest[storage]: Invalid value: "storage": must be a standard resource for '
     'containers]'),
    ({"type": "Nodes"}, 'spec.limits[0].type: Invalid value: "Nodes": must be a standard limit type or fully '
                        'qualified'),
])
async def test_limit_range_validation(api: httpx.AsyncClient, ns: str, item: dict[str, Any], message: str) -> None:
    r = await create(api, ns, {"metadata": {"name": "bad"}, "spec": {"limits": [item]}}, "limitranges")
    assert r.status_code == 422, r.text
    assert r.json()["message"] == f'LimitRange "bad" is invalid: {message}'
    assert (await api.get(f"/api/v1/namespaces/{ns}/limitranges/bad")).status_code == 404


async def test_limit_range_types_are_unique(api: httpx.AsyncClient, ns: str) -> None:
    r = await create(api, ns, {"metadata": {"name": "bad"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "1"}}, {"type": "Container", "max": {"memory": "1Gi"}}]}},
        "limitranges")
    assert r.status_code == 422, r.text
    assert r.json()["details"]["causes"] == [
        {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "Container"', "field": "spec.limits[1].type"}]

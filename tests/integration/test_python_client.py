"""The official `kubernetes` Python client, unchanged, against the real apiserver."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.conftest import Kubectl, start_apiserver, start_etcd_cluster


def api_client(url: str) -> client.ApiClient:
    config = client.Configuration(host=url)
    config.api_key = {"authorization": "Bearer test"}
    return client.ApiClient(config)


@pytest.fixture(scope="module")
def core(apiserver: str) -> Iterator[client.CoreV1Api]:
    with api_client(apiserver) as api:
        yield client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(apiserver: str) -> Iterator[client.AppsV1Api]:
    with api_client(apiserver) as api:
        yield client.AppsV1Api(api)


@pytest.fixture
def unique_ns(core: client.CoreV1Api, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test, created by the client under test."""
    name = "py-" + "".join(c for c in request.node.name.lower().replace("_", "-") if c.isalnum() or c == "-")
    name = f"{name[:50].strip('-')}-{time.monotonic_ns() % 100000}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def pod(name: str, labels: dict[str, str] | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="busybox:1.36",
                                                               command=["sleep", "3600"])]),
    )


def configmap(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data)


def test_list_namespaces(core: client.CoreV1Api, unique_ns: str) -> None:
    listing = core.list_namespace()
    assert listing.kind == "NamespaceList" and listing.api_version == "v1"
    assert int(listing.metadata.resource_version) > 0
    by_name = {ns.metadata.name: ns for ns in listing.items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease", unique_ns} <= set(by_name)
    mine = by_name[unique_ns]
    assert mine.status.phase == "Active" and mine.spec.finalizers == ["kubernetes"]
    assert mine.metadata.labels == {"kubernetes.io/metadata.name": unique_ns}
    assert mine.metadata.creation_timestamp is not None and len(mine.metadata.uid) == 36


def test_create_and_read_pod(core: client.CoreV1Api, unique_ns: str) -> None:
    assert core.list_namespaced_pod(unique_ns).items == []
    created = core.create_namespaced_pod(unique_ns, pod("solo", {"app": "solo"}))
    assert created.metadata.namespace == unique_ns and created.metadata.uid
    assert created.spec.restart_policy == "Always" and created.spec.dns_policy == "ClusterFirst"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert created.status.phase == "Pending" and created.status.qos_class == "BestEffort"
    read = core.read_namespaced_pod("solo", unique_ns)
    assert read.metadata.uid == created.metadata.uid
    assert read.metadata.resource_version == created.metadata.resource_version
    assert [p.metadata.name for p in core.list_namespaced_pod(unique_ns, label_selector="app=solo").items] == [
        "solo"]
    assert "solo" in {p.metadata.name for p in core.list_pod_for_all_namespaces(
        field_selector=f"metadata.namespace={unique_ns}").items}
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(unique_ns, pod("solo"))
    assert exc.value.status == 409 and exc.value.reason == "Conflict"
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", unique_ns)
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'pods "nope" not found'
    status = core.delete_namespaced_pod("solo", unique_ns)
    assert status.metadata.name == "solo"
    assert core.list_namespaced_pod(unique_ns).items == []


def test_create_and_read_deployment(apps: client.AppsV1Api, unique_ns: str) -> None:
    body = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=3,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "web"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx:1.27")]),
            ),
        ),
    )
    created = apps.create_namespaced_deployment(unique_ns, body)
    assert created.metadata.generation == 1
    assert created.spec.strategy.type == "RollingUpdate"
    assert created.spec.strategy.rolling_update.max_surge == "25%"
    assert created.spec.revision_history_limit == 10 and created.spec.progress_deadline_seconds == 600
    read = apps.read_namespaced_deployment("web", unique_ns)
    assert read.spec.replicas == 3 and read.spec.template.spec.containers[0].image == "nginx:1.27"
    scale = apps.read_namespaced_deployment_scale("web", unique_ns)
    assert scale.spec.replicas == 3 and scale.status.selector == "app=web"
    apps.patch_namespaced_deployment_scale("web", unique_ns, {"spec": {"replicas": 1}})
    read = apps.read_namespaced_deployment("web", unique_ns)
    assert read.spec.replicas == 1 and read.metadata.generation == 2
    read.spec.template.spec.containers[0].image = "nginx:1.28"
    replaced = apps.replace_namespaced_deployment("web", unique_ns, read)
    assert replaced.metadata.generation == 3
    read.spec.replicas = 7
    with pytest.raises(ApiException) as stale:
        apps.replace_namespaced_deployment("web", unique_ns, read)
    assert stale.value.status == 409
    assert [d.metadata.name for d in apps.list_namespaced_deployment(unique_ns).items] == ["web"]


def collect(stream: Iterator[dict], count: int) -> list[tuple[str, str, dict | None]]:
    """The first `count` events as (type, name, data); the stream's own timeout bounds the wait."""
    seen = []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name, event["object"].data))
        if len(seen) == count:
            break
    return seen


def test_watch_resumes_from_resource_version(core: client.CoreV1Api, unique_ns: str) -> None:
    core.create_namespaced_config_map(unique_ns, configmap("before", v="0"))
    rv = core.list_namespaced_config_map(unique_ns).metadata.resource_version
    core.create_namespaced_config_map(unique_ns, configmap("a", v="1"))
    core.patch_namespaced_config_map("before", unique_ns, {"data": {"v": "2"}})
    core.create_namespaced_config_map(unique_ns, configmap("b", v="3"))
    core.delete_namespaced_config_map("a", unique_ns)
    w = watch.Watch()
    events = collect(w.stream(core.list_namespaced_config_map, unique_ns, resource_version=rv,
                              timeout_seconds=10), 4)
    w.stop()
    assert events == [("ADDED", "a", {"v": "1"}), ("MODIFIED", "before", {"v": "2"}), ("ADDED", "b", {"v": "3"}),
                      ("DELETED", "a", {"v": "1"})]
    assert int(w.resource_version) > int(rv)


def test_watch_sees_later_changes_then_times_out(core: client.CoreV1Api, unique_ns: str) -> None:
    rv = core.list_namespaced_config_map(unique_ns).metadata.resource_version
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_config_map, unique_ns, resource_version=rv, timeout_seconds=3,
                      _request_timeout=30)
    core.create_namespaced_config_map(unique_ns, configmap("live", v="1"))
    first = next(stream)
    assert first["type"] == "ADDED" and first["object"].metadata.name == "live"
    assert first["raw_object"]["kind"] == "ConfigMap" and first["raw_object"]["apiVersion"] == "v1"
    started = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - started < 10


def test_watch_with_label_selector_and_bookmarks(core: client.CoreV1Api, unique_ns: str) -> None:
    rv = core.list_namespaced_config_map(unique_ns).metadata.resource_version
    core.create_namespaced_config_map(unique_ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="skip", labels={"pick": "no"})))
    core.create_namespaced_config_map(unique_ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="take", labels={"pick": "yes"})))
    w = watch.Watch()
    events = collect(w.stream(core.list_namespaced_config_map, unique_ns, resource_version=rv,
                              label_selector="pick=yes", timeout_seconds=5), 1)
    w.stop()
    assert [(t, n) for t, n, _ in events] == [("ADDED", "take")]


@pytest.fixture(scope="module")
def compacting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An apiserver on its own etcd that compacts every 2 s, so old revisions fall out of history quickly."""
    workdir: Path = tmp_path_factory.mktemp("compacting")
    members = start_etcd_cluster(1, workdir)
    server = start_apiserver([members[0].client_url], workdir, "--etcd-compaction-interval", "2")
    try:
        yield server.url
    finally:
        server.stop()
        for m in members:
            m.kill()


def test_watch_from_compacted_revision_is_gone(compacting: str) -> None:
    with api_client(compacting) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map("default", configmap("old", v="0"))
        old_rv = core.list_namespaced_config_map("default").metadata.resource_version
        for i in range(5):
            core.patch_namespaced_config_map("old", "default", {"data": {"v": str(i + 1)}})
        deadline = time.monotonic() + 20
        while True:
            try:
                replay = collect(watch.Watch().stream(core.list_namespaced_config_map, "default",
                                                      resource_version=old_rv, timeout_seconds=5), 1)
            except ApiException as exc:
                gone = exc
                break
            assert replay == [("MODIFIED", "old", {"v": "1"})], "history before compaction replays in order"
            assert time.monotonic() < deadline, "no compaction within 20 s at --etcd-compaction-interval 2"
            time.sleep(0.5)
        assert gone.status == 410
        assert "too old resource version" in str(gone.reason)
        relist = core.list_namespaced_config_map("default")
        assert [(c.metadata.name, c.data) for c in relist.items] == [("old", {"v": "5"})]
        rv = relist.metadata.resource_version
        core.patch_namespaced_config_map("old", "default", {"data": {"v": "6"}})
        w = watch.Watch()
        assert collect(w.stream(core.list_namespaced_config_map, "default", resource_version=rv,
                                timeout_seconds=5), 1) == [("MODIFIED", "old", {"v": "6"})]


def test_pagination_with_limit_and_continue(core: client.CoreV1Api, unique_ns: str) -> None:
    for i in range(5):
        core.create_namespaced_pod(unique_ns, pod(f"p{i}"))
    first = core.list_namespaced_pod(unique_ns, limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 3
    core.create_namespaced_pod(unique_ns, pod("p9"))
    second = core.list_namespaced_pod(unique_ns, limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["p2", "p3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    last = core.list_namespaced_pod(unique_ns, limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in last.items] == ["p4"]
    assert not last.metadata._continue and last.metadata.remaining_item_count is None
    assert [p.metadata.name for p in core.list_namespaced_pod(unique_ns).items] == [
        "p0", "p1", "p2", "p3", "p4", "p9"]
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(unique_ns, limit=2, _continue="not-a-token")
    assert bad.value.status == 400


def test_resource_version_match_exact(core: client.CoreV1Api, unique_ns: str) -> None:
    core.create_namespaced_config_map(unique_ns, configmap("one", v="1"))
    then = core.list_namespaced_config_map(unique_ns).metadata.resource_version
    core.patch_namespaced_config_map("one", unique_ns, {"data": {"v": "2"}})
    core.create_namespaced_config_map(unique_ns, configmap("two", v="1"))
    exact = core.list_namespaced_config_map(unique_ns, resource_version=then, resource_version_match="Exact")
    assert exact.metadata.resource_version == then
    assert [(c.metadata.name, c.data) for c in exact.items] == [("one", {"v": "1"})]
    newer = core.list_namespaced_config_map(unique_ns, resource_version=then,
                                            resource_version_match="NotOlderThan")
    assert int(newer.metadata.resource_version) > int(then)
    assert [(c.metadata.name, c.data) for c in newer.items] == [("one", {"v": "2"}), ("two", {"v": "1"})]
    paged = core.list_namespaced_config_map(unique_ns, resource_version=then, resource_version_match="Exact",
                                            limit=1)
    assert [c.metadata.name for c in paged.items] == ["one"] and not paged.metadata._continue
    with pytest.raises(ApiException) as missing_rv:
        core.list_namespaced_config_map(unique_ns, resource_version_match="Exact")
    assert "resourceVersionMatch is forbidden unless resourceVersion is provided" in missing_rv.value.body


def test_invalid_list_options_are_unprocessable(core: client.CoreV1Api, unique_ns: str) -> None:
    with pytest.raises(ApiException) as missing_rv:
        core.list_namespaced_config_map(unique_ns, resource_version_match="Exact")
    assert missing_rv.value.status == 422
    status = json.loads(missing_rv.value.body)
    assert status["reason"] == "Invalid" and status["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden '
        "unless resourceVersion is provided")


def test_too_large_resource_version(core: client.CoreV1Api, unique_ns: str) -> None:
    ahead = str(int(core.list_namespaced_config_map(unique_ns).metadata.resource_version) + 100000)
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_config_map(unique_ns, resource_version=ahead, resource_version_match="NotOlderThan")
    assert exc.value.status == 504
    status = json.loads(exc.value.body)
    assert status["reason"] == "Timeout" and status["message"].startswith(f"Too large resource version: {ahead}, ")
    assert status["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}]
    assert status["details"]["retryAfterSeconds"] == 1


def test_remaining_item_count(core: client.CoreV1Api, unique_ns: str) -> None:
    for i in range(5):
        core.create_namespaced_config_map(unique_ns, configmap(f"c{i}"))
    first = core.list_namespaced_config_map(unique_ns, limit=2)
    assert first.metadata.remaining_item_count == 3
    last = core.list_namespaced_config_map(unique_ns, limit=3, _continue=first.metadata._continue)
    assert [c.metadata.name for c in last.items] == ["c2", "c3", "c4"]
    assert last.metadata.remaining_item_count is None
    selected = core.list_namespaced_config_map(unique_ns, limit=2, field_selector="metadata.name!=c0")
    assert selected.metadata._continue and selected.metadata.remaining_item_count is None


def test_chunked_kubectl_get_over_client_created_pods(
    core: client.CoreV1Api, kubectl: Kubectl, unique_ns: str
) -> None:
    for i in range(5):
        core.create_namespaced_pod(unique_ns, pod(f"c{i}"))
    out = kubectl.run("get", "pods", "-n", unique_ns, "--chunk-size=2", "-o", "name")
    assert out.stdout.split() == [f"pod/c{i}" for i in range(5)]


def test_dynamic_client_patch_and_server_side_apply(apiserver: str, core: client.CoreV1Api, unique_ns: str) -> None:
    """The official client's dynamic API: discovery, create, strategic patch, server-side apply, watch."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ConflictError

    dyn = DynamicClient(api_client(apiserver))
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dyn", "namespace": unique_ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dyn"}},
                 "template": {"metadata": {"labels": {"app": "dyn"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1", "ports": [
                                  {"containerPort": 80}]}]}}},
    }
    deployments.create(body=body, namespace=unique_ns)
    image_patch = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}}
    patched = deployments.patch(name="dyn", namespace=unique_ns, body=image_patch,
                                content_type="application/strategic-merge-patch+json")
    container = patched.spec.template.spec.containers[0]
    assert container.image == "busybox:2" and container.ports[0].containerPort == 80

    applied = deployments.server_side_apply(
        body={**body, "spec": {**body["spec"], "replicas": 3}}, name="dyn", namespace=unique_ns,
        field_manager="python-apply", force_conflicts=True)
    assert applied.spec.replicas == 3
    managers = {m["manager"]: m["operation"] for m in applied.metadata.managedFields}
    assert managers.get("python-apply") == "Apply"
    with pytest.raises(ConflictError) as conflict:
        deployments.server_side_apply(body={**body, "spec": {**body["spec"], "replicas": 5}}, name="dyn",
                                      namespace=unique_ns, field_manager="someone-else")
    assert "conflict" in str(conflict.value.body).lower()

    events = []
    rv = deployments.get(name="dyn", namespace=unique_ns).metadata.resourceVersion
    deployments.patch(name="dyn", namespace=unique_ns, content_type="application/merge-patch+json",
                      body={"metadata": {"labels": {"watched": "yes"}}})
    for event in deployments.watch(namespace=unique_ns, resource_version=rv, timeout=5):
        events.append((event["type"], event["object"].metadata.labels.to_dict()))
        break
    assert events == [("MODIFIED", {"watched": "yes"})]

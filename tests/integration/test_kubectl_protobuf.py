"""Real kubectl v1.32 sends built-in objects as protobuf; the apiserver must store what kubectl meant.

Each generator's object is compared with kubectl's own `--dry-run=client -o json` rendering of
it: every field kubectl set must come back from the server unchanged.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from apiserver.endpoints.serialization import protobuf
from tests.conftest import Kubectl


@pytest.fixture
def unique_ns(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test, created from a JSON manifest so that setup does not depend on protobuf."""
    name = re.sub(r"[^a-z0-9-]", "", f"pb-{request.node.name.lower().replace('_', '-')}")[:50].strip("-")
    name = f"{name}-{os.getpid() % 1000}"
    kubectl.run("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name}}))
    return name


def assert_contains(expected: Any, actual: Any, path: str = "") -> None:
    """Every field kubectl rendered client-side is on the server's object, with the same value.

    Nulls and empty objects are what Go prints for unset fields; the server may default them.
    """
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not an object"
        for key, value in expected.items():
            if value is None or value == {}:
                continue
            assert key in actual, f"{path}.{key} is missing from the server's object"
            assert_contains(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for i, (want, got) in enumerate(zip(expected, actual, strict=True)):
            assert_contains(want, got, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def create_and_compare(kubectl: Kubectl, ns: str | None, args: list[str], resource: str, name: str) -> dict:
    def command(*flags: str) -> list[str]:
        """Flags go before a `--`, after which kubectl takes the container's command."""
        cut = args.index("--") if "--" in args else len(args)
        return ["create", *args[:cut], *(["-n", ns] if ns else []), *flags, *args[cut:]]

    scope = ["-n", ns] if ns else []
    rendered = json.loads(kubectl.run(*command("--dry-run=client", "-o", "json")).stdout)
    created = kubectl.run(*command("-v=8"))
    assert "application/vnd.kubernetes.protobuf" in created.stderr, "kubectl did not send a protobuf body"
    stored = kubectl.json("get", resource, name, *scope)
    assert stored["metadata"]["name"] == name
    assert stored["metadata"].get("creationTimestamp")
    rendered.pop("status", None)
    assert_contains(rendered, stored)
    return stored


NAMESPACED = [
    (["deployment", "d", "--image=busybox", "--replicas=2", "--port=8080"], "deployment", "d"),
    (["service", "clusterip", "s", "--tcp=80:8080", "--tcp=443:https"], "service", "s"),
    (["job", "j", "--image=busybox", "--", "echo", "hi"], "job", "j"),
    (["cronjob", "c", "--image=busybox", "--schedule=*/5 * * * *", "--", "date"], "cronjob", "c"),
    (["role", "r", "--verb=get,list", "--resource=pods,deployments.apps", "--resource-name=x"], "role", "r"),
    (["rolebinding", "rb", "--role=r", "--user=alice", "--group=devs", "--serviceaccount=default:sa"],
     "rolebinding", "rb"),
    (["quota", "q", "--hard=pods=10,cpu=2,memory=1Gi", "--scopes=NotTerminating"], "resourcequota", "q"),
    (["poddisruptionbudget", "pdb", "--selector=app=x", "--min-available=50%"], "pdb", "pdb"),
    (["ingress", "ing", "--class=nginx", "--rule=foo.com/bar*=svc1:8080,tls=cert",
      "--default-backend=svc2:http", "--annotation=a=b"], "ingress", "ing"),
    (["serviceaccount", "sa"], "serviceaccount", "sa"),
]


@pytest.mark.parametrize(("args", "resource", "name"), NAMESPACED, ids=[a[0][0] for a in NAMESPACED])
def test_namespaced_generators(kubectl: Kubectl, unique_ns: str, args: list[str], resource: str,
                               name: str) -> None:
    create_and_compare(kubectl, unique_ns, args, resource, name)


def test_deployment_fields(kubectl: Kubectl, unique_ns: str) -> None:
    stored = create_and_compare(kubectl, unique_ns, ["deployment", "web", "--image=busybox", "--replicas=2",
                                                     "--port=8080"], "deployment", "web")
    assert stored["spec"]["replicas"] == 2
    assert stored["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "busybox"
    assert container["ports"][0]["containerPort"] == 8080


def test_service_ports(kubectl: Kubectl, unique_ns: str) -> None:
    stored = create_and_compare(kubectl, unique_ns, ["service", "clusterip", "s", "--tcp=80:8080"], "service", "s")
    (port,) = stored["spec"]["ports"]
    assert (port["port"], port["targetPort"], port["protocol"]) == (80, 8080, "TCP")


def test_configmap_literal_text_and_binary_files(kubectl: Kubectl, unique_ns: str, tmp_path: Path) -> None:
    text, blob = tmp_path / "app.conf", tmp_path / "blob.bin"
    text.write_text("key = value\nunicode = ☃\n")
    blob.write_bytes(bytes(range(256)) + b"\x00\xff\xfe")
    args = ["configmap", "x", "--from-literal=a=b", f"--from-file={text}", f"--from-file={blob}"]
    stored = create_and_compare(kubectl, unique_ns, args, "configmap", "x")
    assert stored["data"] == {"a": "b", "app.conf": text.read_text()}
    assert base64.b64decode(stored["binaryData"]["blob.bin"]) == blob.read_bytes()


def test_secret_data_round_trips(kubectl: Kubectl, unique_ns: str) -> None:
    stored = create_and_compare(kubectl, unique_ns, ["secret", "generic", "s", "--from-literal=k=v",
                                                     "--from-literal=empty="], "secret", "s")
    assert stored["type"] == "Opaque"
    assert base64.b64decode(stored["data"]["k"]) == b"v"
    assert stored["data"]["empty"] == ""
    shown = kubectl.run("get", "secret", "s", "-n", unique_ns, "-o", "jsonpath={.data.k}").stdout
    assert base64.b64decode(shown) == b"v"


def test_job_command(kubectl: Kubectl, unique_ns: str) -> None:
    stored = create_and_compare(kubectl, unique_ns, ["job", "j", "--image=busybox", "--", "echo", "hi"], "job", "j")
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["echo", "hi"]
    assert stored["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_create_namespace(kubectl: Kubectl) -> None:
    name = f"pb-ns-{os.getpid() % 100000}"
    created = kubectl.run("create", "namespace", name, "-v=8")
    assert "application/vnd.kubernetes.protobuf" in created.stderr
    try:
        assert kubectl.json("get", "namespace", name)["metadata"]["name"] == name
    finally:
        kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize(("args", "resource"), [
    (["clusterrole", "{name}", "--verb=get", "--resource=nodes", "--non-resource-url=/logs/*"],
     "clusterrole"),
    (["clusterrolebinding", "{name}", "--clusterrole=view", "--user=bob"], "clusterrolebinding"),
    (["priorityclass", "{name}", "--value=1000", "--description=important", "--preemption-policy=Never"],
     "priorityclass"),
])
def test_cluster_scoped_generators(kubectl: Kubectl, args: list[str], resource: str) -> None:
    name = f"pb-{resource}-{os.getpid() % 100000}"
    try:
        stored = create_and_compare(kubectl, None, [a.format(name=name) for a in args], resource, name)
    finally:
        kubectl.run("delete", resource, name, check=False)
    if resource == "priorityclass":
        assert stored["value"] == 1000 and stored["preemptionPolicy"] == "Never"


def test_garbled_protobuf_is_a_bad_request(apiserver: str, unique_ns: str) -> None:
    url = f"{apiserver}/api/v1/namespaces/{unique_ns}/configmaps"
    headers = {"Content-Type": protobuf.MEDIA_TYPE, "Accept": "application/json"}
    r = httpx.post(url, content=protobuf.MAGIC + b"\x0a\x05ab", headers=headers)
    assert r.status_code == 400
    assert r.json()["kind"] == "Status" and r.json()["reason"] == "BadRequest"


def test_drain_posts_protobuf_evictions(kubectl: Kubectl, unique_ns: str) -> None:
    node = f"pb-node-{os.getpid() % 100000}"
    kubectl.run("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    try:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}
        kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=json.dumps(pod))
        # No kubelet finishes the graceful deletion, so drain gives up waiting; the eviction is what counts.
        drained = kubectl.run("drain", node, "--force", "--timeout=2s", "-v=6", check=False)
        assert f"/namespaces/{unique_ns}/pods/p/eviction 201 Created" in drained.stderr, drained.stderr[-2000:]
        left = kubectl.run("get", "pod", "p", "-n", unique_ns, "-o", "json", check=False)
        assert left.returncode != 0 or json.loads(left.stdout)["metadata"].get("deletionTimestamp")
    finally:
        kubectl.run("delete", "node", node, check=False)

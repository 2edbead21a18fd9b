"""Back-off, env expansion, images, DNS, atomic writes, config and the hollow runtime."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from kubelet_agent.cni import conflist, default_pod_cidr
from kubelet_agent.config import parse_duration, parse_map
from kubelet_agent.cri.hollow import HollowRuntime, parse_behavior
from kubelet_agent.cri.types import CONTAINER_EXITED, CONTAINER_RUNNING, ContainerSpec, SandboxSpec
from kubelet_agent.node import allocatable, parse_taint
from kubelet_agent.pods.backoff import Backoff
from kubelet_agent.pods.env import build_env, expand, service_env
from kubelet_agent.pods.util import cpu_quota, cpu_shares, normalize_image, qos_class, quantity
from kubelet_agent.pods.volumes import write_atomic
from kubelet_agent.pods.worker import NodeContext, PodWorker
from kubelet_agent.static import default_static


def test_backoff_doubles_to_cap() -> None:
    b = Backoff()
    assert b.in_backoff("k", 100.0, now=100.0) == 0
    delays = [b.next("k", now=100.0 + i) for i in range(7)]
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert b.in_backoff("k", 200.0, now=250.0) == 250


def test_expand() -> None:
    env = {"A": "x"}
    assert expand("$(A)-$(B)-$$(A)", env) == "x-$(B)-$(A)"


def test_service_env() -> None:
    svc = {"metadata": {"name": "my-svc"}, "spec": {"clusterIP": "10.0.0.1",
                                                    "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}
    env = service_env([svc])
    assert env["MY_SVC_SERVICE_HOST"] == "10.0.0.1" and env["MY_SVC_SERVICE_PORT_HTTP"] == "80"
    assert env["MY_SVC_PORT"] == "tcp://10.0.0.1:80" and env["MY_SVC_PORT_80_TCP_ADDR"] == "10.0.0.1"


async def test_env_from_fields_and_resources() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}}, "spec": {"nodeName": "n", "containers": [
        {"name": "c", "resources": {"limits": {"memory": "64Mi"}},
         "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                 {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
                 {"name": "M", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                 {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "X", "value": "$(N)-$(IP)"}]}]}}
    env = await build_env(pod, pod["spec"]["containers"][0], None, pod_ip="10.1.1.1", host_ips=["1.2.3.4"],
                          allocatable={})
    assert env == {"N": "p", "L": "b", "M": "64", "IP": "10.1.1.1", "X": "p-10.1.1.1"}


def test_images_and_quantities() -> None:
    assert normalize_image("busybox") == "docker.io/library/busybox:latest"
    assert normalize_image("nginx:1.25") == "docker.io/library/nginx:1.25"
    assert normalize_image("example.com/a/b") == "example.com/a/b:latest"
    assert normalize_image("user/app:v1") == "docker.io/user/app:v1"
    assert cpu_shares(quantity("250m")) == 256 and cpu_quota(quantity("500m")) == 50000
    spec = {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}
    assert qos_class(spec) == "Guaranteed" and qos_class({"containers": [{}]}) == "BestEffort"


def test_dns_cluster_first() -> None:
    ctx = NodeContext("n", None, HollowRuntime(), None, ["1.2.3.4"], {}, "/tmp", cluster_dns=["10.96.0.10"],  # type: ignore[arg-type]
                      host_dns=(["8.8.8.8"], ["example.org"], []))
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": []}}
    servers, searches, options = PodWorker(ctx, pod)._dns()
    assert servers == ["10.96.0.10"] and options == ["ndots:5"]
    assert searches == ["ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.org"]
    pod["spec"]["hostNetwork"] = True
    assert PodWorker(ctx, pod)._dns()[0] == ["8.8.8.8"]
    assert PodWorker(ctx, pod).sandbox_spec(0).hostname == ""


def test_atomic_writer_swaps_data(tmp_path: Path) -> None:
    assert write_atomic(tmp_path, {"key": (b"one", 0o644)})
    first = os.readlink(tmp_path / "..data")
    assert (tmp_path / "key").read_bytes() == b"one" and os.readlink(tmp_path / "key") == "..data/key"
    assert not write_atomic(tmp_path, {"key": (b"one", 0o644)})
    assert write_atomic(tmp_path, {"key": (b"two", 0o644)})
    assert os.readlink(tmp_path / "..data") != first and (tmp_path / "key").read_bytes() == b"two"
    assert not (tmp_path / first).exists()


def test_config_helpers() -> None:
    assert parse_duration("5m0s") == 300 and parse_duration("10s") == 10
    assert parse_map("cpu=100m,memory=1Gi") == {"cpu": "100m", "memory": "1Gi"}
    assert parse_taint("a=b:NoSchedule") == {"key": "a", "value": "b", "effect": "NoSchedule"}
    assert allocatable({"cpu": "4", "memory": "8Gi"}, {"cpu": "500m"})["cpu"] == "3500m"
    assert default_pod_cidr("n1") == default_pod_cidr("n1")
    assert conflist("10.1.0.0/24")["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.1.0.0/24"}]]


def test_static_defaults() -> None:
    pod = default_static({"metadata": {"name": "s"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                         "node1", "text")
    assert pod["metadata"]["name"] == "s-node1" and pod["metadata"]["namespace"] == "default"
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Always"


async def test_hollow_runtime_scripted_exit() -> None:
    rt = HollowRuntime()
    woke: list[str] = []
    rt.set_listener(woke.append)
    assert parse_behavior("exit=3,after=0.05") == {"exit": "3", "after": "0.05"}
    spec = SandboxSpec("p", "ns", "u", annotations={"hollow.pyk8s.io/container.c": "exit=3,after=0.05"})
    sid = await rt.run_sandbox(spec)
    cid = await rt.create_container(sid, ContainerSpec("c", "busybox"), spec)
    await rt.start_container(cid)
    assert (await rt.container_status(cid)).state == CONTAINER_RUNNING
    await asyncio.sleep(0.1)
    status = await rt.container_status(cid)
    assert status.state == CONTAINER_EXITED and status.exit_code == 3 and woke == ["u"]
    await rt.remove_sandbox(sid)
    assert await rt.list_containers("u") == []

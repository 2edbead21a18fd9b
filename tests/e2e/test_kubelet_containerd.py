"""The kubelet on a real containerd (in a network namespace made by the test), seen through real kubectl."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Kubectl
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.kubelet_fixture import wait

NODE = "e2e-real-0"


class KubeletProcess:
    def __init__(self, kubeconfig: Path, c: Containerd, base: Path) -> None:
        self.args = [sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig),
                     "--hostname-override", NODE, "--container-runtime-endpoint", c.endpoint,
                     "--cni-conf-dir", str(c.cni_conf_dir), "--node-netns", c.netns_path, "--node-ip", c.node_ip,
                     "--root-dir", str(base / "kubelet"), "--pod-manifest-path", str(base / "manifests"),
                     "--cluster-dns", "10.96.0.10", "--healthz-port", "0", "--log-format", "console",
                     "--housekeeping-interval", "2s"]
        (base / "manifests").mkdir(parents=True, exist_ok=True)
        self.base = base
        self.log = base / "kubelet.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=log, stderr=log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


@pytest.fixture(scope="module")
def kubelet(kubeconfig: Path, containerd: Containerd) -> Iterator[KubeletProcess]:  # noqa: F811
    k = KubeletProcess(kubeconfig, containerd, containerd.base)
    k.start()
    yield k
    k.stop()


def apply(kubectl: Kubectl, ns: str, pod: dict[str, Any]) -> None:
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    pod["spec"]["nodeName"] = NODE
    for c in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
        c.setdefault("imagePullPolicy", "IfNotPresent")
    kubectl.run("-n", ns, "apply", "-f", "-", stdin=json.dumps(pod))


def status(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return kubectl.json("-n", ns, "get", "pod", name).get("status") or {}


def test_init_and_two_containers_run(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "web"}, "spec": {
        "initContainers": [{"name": "init", "image": "busybox", "command": ["sh", "-c", "echo init"]}],
        "containers": [
            {"name": "a", "image": "busybox", "command": ["sleep", "3600"]},
            {"name": "b", "image": "busybox", "command": ["httpd", "-f", "-p", "8080"],
             "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "web")).get("conditions") and all(
        c["status"] == "True" for c in st["conditions"]) and st)
    assert s["phase"] == "Running"
    assert s["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    for cs in s["containerStatuses"]:
        assert cs["ready"] and cs["started"] and cs["containerID"].startswith("containerd://")
        assert cs["image"] == "docker.io/library/busybox:latest" and cs["imageID"]
    assert s["podIP"].startswith("10.244.") and s["hostIP"] == "10.99.0.2"


def test_crash_loop_back_off(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "crash"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 2"]}]}})
    cs = wait(lambda: (st := status(kubectl, unique_ns, "crash")).get("containerStatuses") and
              st["containerStatuses"][0]["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
              and st["containerStatuses"][0])
    assert cs["lastState"]["terminated"]["exitCode"] == 2 and cs["restartCount"] >= 1


def test_job_style_pod_succeeds_and_downward_env(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "job", "labels": {"app": "x"}}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", 'test "$ME" = job && '
                                                                        'test "$NS" = "$(cat /etc/hostname | '
                                                                        'sed s/job/$NS/)"'],
                        "env": [{"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "job")).get("phase") in ("Succeeded", "Failed") and st)
    assert s["phase"] == "Succeeded", s
    assert s["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_err_image_never_pull(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "never"}, "spec": {
        "containers": [{"name": "c", "image": "example.com/none:1", "imagePullPolicy": "Never"}]}})
    w = wait(lambda: (st := status(kubectl, unique_ns, "never")).get("containerStatuses") and
             st["containerStatuses"][0]["state"].get("waiting"))
    assert w["reason"] == "ErrImageNeverPull"
    assert w["message"] == 'Container image "example.com/none:1" is not present with pull policy of Never'


def test_liveness_failure_restarts(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "live"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "livenessProbe": {"exec": {"command": ["test", "-e", "/nope"]}, "periodSeconds": 1,
                                          "failureThreshold": 1}}]}})
    wait(lambda: (st := status(kubectl, unique_ns, "live")).get("containerStatuses") and
         st["containerStatuses"][0]["restartCount"] >= 2, timeout=90)


def test_configmap_volume_updates(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("-n", unique_ns, "create", "configmap", "cfg", "--from-literal=key=one")
    apply(kubectl, unique_ns, {"metadata": {"name": "cm"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "readinessProbe": {"exec": {"command": ["grep", "-q", "two", "/cfg/key"]}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}})
    wait(lambda: status(kubectl, unique_ns, "cm").get("phase") == "Running")
    kubectl.run("-n", unique_ns, "patch", "configmap", "cfg", "-p", '{"data":{"key":"two"}}')
    wait(lambda: (st := status(kubectl, unique_ns, "cm")).get("containerStatuses") and
         st["containerStatuses"][0]["ready"], timeout=60)


def test_grace_period_is_honoured(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "stubborn"}, "spec": {
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "image": "busybox", "command": ["httpd", "-f", "-p", "80"]}]}})
    wait(lambda: status(kubectl, unique_ns, "stubborn").get("phase") == "Running")
    start = time.monotonic()
    kubectl.run("-n", unique_ns, "delete", "pod", "stubborn", "--wait=true", timeout=60)
    elapsed = time.monotonic() - start
    assert 4.5 <= elapsed < 15, elapsed


def test_static_pod_has_mirror(kubelet: KubeletProcess, kubectl: Kubectl) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                         "command": ["sleep", "3600"]}]}}
    (kubelet.base / "manifests" / "static.yaml").write_text(json.dumps(manifest))
    name = f"static-{NODE}"
    s = wait(lambda: (r := kubectl.run("get", "pod", name, "-o", "json", check=False)).returncode == 0 and
             json.loads(r.stdout).get("status", {}).get("phase") == "Running" and json.loads(r.stdout))
    assert "kubernetes.io/config.mirror" in s["metadata"]["annotations"]
    (kubelet.base / "manifests" / "static.yaml").unlink()
    wait(lambda: kubectl.run("get", "pod", name, check=False).returncode != 0)


def test_restart_adopts_running_containers(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "keep"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}})
    before = wait(lambda: (st := status(kubectl, unique_ns, "keep")).get("phase") == "Running" and st)
    kubelet.stop()
    kubelet.start()
    time.sleep(8)
    after = status(kubectl, unique_ns, "keep")
    b, a = before["containerStatuses"][0], after["containerStatuses"][0]
    assert a["containerID"] == b["containerID"] and a["restartCount"] == 0
    assert a["state"]["running"]["startedAt"] == b["state"]["running"]["startedAt"]


def test_node_ready_with_pressure_conditions(kubelet: KubeletProcess, kubectl: Kubectl) -> None:
    node = wait(lambda: (n := kubectl.json("get", "node", NODE)) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]) and n)
    conds = {c["type"]: c for c in node["status"]["conditions"]}
    assert conds["Ready"]["reason"] == "KubeletReady"
    assert (conds["MemoryPressure"]["status"], conds["MemoryPressure"]["reason"]) == (
        "False", "KubeletHasSufficientMemory")
    assert conds["MemoryPressure"]["message"] == "kubelet has sufficient memory available"
    assert (conds["PIDPressure"]["status"], conds["PIDPressure"]["reason"]) == ("False", "KubeletHasSufficientPID")
    disk = conds["DiskPressure"]
    assert (disk["status"], disk["reason"]) in (("False", "KubeletHasNoDiskPressure"),
                                                ("True", "KubeletHasDiskPressure"))


def test_empty_dir_over_size_limit_is_evicted(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "fill"}, "spec": {
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
        "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "scratch", "mountPath": "/s"}],
                        "command": ["sh", "-c", "sleep 1; dd if=/dev/zero of=/s/f bs=1024 count=3072; sleep 3600"]}]}})
    apply(kubectl, unique_ns, {"metadata": {"name": "within"}, "spec": {
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "4Mi"}}],
        "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "scratch", "mountPath": "/s"}],
                        "command": ["sh", "-c", "dd if=/dev/zero of=/s/f bs=1024 count=1024; sleep 3600"]}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "fill")).get("phase") == "Failed" and st, timeout=60)
    assert s["reason"] == "Evicted"
    assert s["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    target = next(c for c in s["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    assert "terminated" in s["containerStatuses"][0]["state"]
    time.sleep(3)
    assert status(kubectl, unique_ns, "within")["phase"] == "Running"
    assert status(kubectl, unique_ns, "fill")["phase"] == "Failed"


GRPC_HEALTH_SERVER = """
import os, sys, grpc
from concurrent import futures
flag = sys.argv[2]
def check(request, context):
    return b"\\x08\\x02" if os.path.exists(flag) else b"\\x08\\x01"
handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
    "Check": grpc.unary_unary_rpc_method_handler(check, request_deserializer=None, response_serializer=None)})
server = grpc.server(futures.ThreadPoolExecutor(2))
server.add_generic_rpc_handlers((handler,))
server.add_insecure_port("0.0.0.0:" + sys.argv[1])
server.start()
print("serving", flush=True)
server.wait_for_termination()
"""


def events(kubectl: Kubectl, ns: str, pod: str) -> list[dict[str, Any]]:
    return [e for e in kubectl.json("-n", ns, "get", "events")["items"] if e["involvedObject"]["name"] == pod]


def test_grpc_readiness_probe_follows_health_service(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str,
                                                     containerd: Containerd) -> None:  # noqa: F811
    """busybox has no gRPC server, so the health service runs on the node (in its namespace) and a
    hostNetwork pod probes it there: SERVING makes the container Ready, NOT_SERVING takes it out."""
    flag = containerd.base / "grpc-not-serving"
    server = subprocess.Popen(["ip", "netns", "exec", containerd.netns, sys.executable, "-c", GRPC_HEALTH_SERVER,
                               "19555", str(flag)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"serving"
        apply(kubectl, unique_ns, {"metadata": {"name": "grpc"}, "spec": {
            "hostNetwork": True, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                            "readinessProbe": {"grpc": {"port": 19555}, "periodSeconds": 1,
                                               "failureThreshold": 1}}]}})
        ready = lambda want: (st := status(kubectl, unique_ns, "grpc")).get("containerStatuses") and (  # noqa: E731
            st["containerStatuses"][0]["ready"] is want) and st
        wait(lambda: ready(True))
        flag.touch()
        s = wait(lambda: ready(False), timeout=30)
        assert s["phase"] == "Running"
        msgs = [e["message"] for e in events(kubectl, unique_ns, "grpc") if e["reason"] == "Unhealthy"]
        assert any(m.startswith("Readiness probe failed: service unhealthy") for m in msgs), msgs
        flag.unlink()
        wait(lambda: ready(True), timeout=30)
    finally:
        server.terminate()
        server.wait(10)


def test_grpc_probe_on_closed_port_is_unready_with_reason(kubelet: KubeletProcess, kubectl: Kubectl,
                                                          unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "nogrpc"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "readinessProbe": {"grpc": {"port": 9555}, "periodSeconds": 1, "failureThreshold": 1}}]}})
    msgs = wait(lambda: [e["message"] for e in events(kubectl, unique_ns, "nogrpc") if e["reason"] == "Unhealthy"])
    assert msgs[0].startswith("Readiness probe failed: rpc error: code = UNAVAILABLE"), msgs
    s = status(kubectl, unique_ns, "nogrpc")
    assert s["phase"] == "Running" and s["containerStatuses"][0]["ready"] is False
    assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "False"


def test_host_port_reachable_on_node_ip(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str,
                                        containerd: Containerd) -> None:  # noqa: F811
    apply(kubectl, unique_ns, {"metadata": {"name": "hp"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 18080}],
                        "command": ["sh", "-c", "mkdir -p /www && echo hostport-ok > /www/index.html && "
                                    "exec httpd -f -p 80 -h /www"],
                        "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1}}]}})
    wait(lambda: (st := status(kubectl, unique_ns, "hp")).get("containerStatuses") and
         st["containerStatuses"][0]["ready"])
    url = f"http://{containerd.node_ip}:18080/"
    fetch = f"import urllib.request,sys; sys.stdout.write(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    out = subprocess.run(["ip", "netns", "exec", containerd.netns, sys.executable, "-c", fetch],
                         capture_output=True, timeout=30)
    assert out.stdout.decode().strip() == "hostport-ok", out.stderr.decode()[-1000:]


def test_oom_killed_container(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "oom"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "16Mi"}},
                        "command": ["sh", "-c", 'x=$(head -c 64m /dev/zero | tr "\\0" a); sleep 1']}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "oom")).get("phase") in ("Succeeded", "Failed") and st)
    term = s["containerStatuses"][0]["state"]["terminated"]
    assert s["phase"] == "Failed", s
    assert (term["reason"], term["exitCode"]) == ("OOMKilled", 137), term


def test_real_node_rejects_pod_over_allocatable(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "huge"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "500"}}}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "huge")).get("phase") == "Failed" and st)
    assert s["reason"] == "OutOfcpu" and s["message"].startswith(
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 500000, used: "), s
    assert "containerStatuses" not in s
    assert any(e["reason"] == "OutOfcpu" and e["type"] == "Warning" for e in events(kubectl, unique_ns, "huge"))


def test_privileged_container_runs_in_a_privileged_sandbox(kubelet: KubeletProcess, kubectl: Kubectl,
                                                           unique_ns: str) -> None:
    """A privileged container (here an init container and an app container) runs, and can mount a
    tmpfs, which the same command in an unprivileged container cannot."""
    mount = ["sh", "-c", "mkdir -p /scratch && mount -t tmpfs none /scratch && touch /scratch/ok"]
    apply(kubectl, unique_ns, {"metadata": {"name": "priv"}, "spec": {
        "initContainers": [{"name": "init", "image": "busybox", "command": mount,
                            "securityContext": {"privileged": True}}],
        "containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True},
                        "command": [*mount[:2], f"{mount[2]} && sleep 3600"],
                        "readinessProbe": {"exec": {"command": ["test", "-e", "/scratch/ok"]},
                                           "periodSeconds": 1}}]}})
    apply(kubectl, unique_ns, {"metadata": {"name": "plain"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": mount}]}})
    try:
        s = wait(lambda: (st := status(kubectl, unique_ns, "priv")).get("containerStatuses") and
                 st["containerStatuses"][0]["ready"] and st)
    except AssertionError:
        seen = [(e["reason"], e["message"]) for e in events(kubectl, unique_ns, "priv")]
        raise AssertionError((status(kubectl, unique_ns, "priv"), seen)) from None
    assert s["phase"] == "Running" and s["containerStatuses"][0]["restartCount"] == 0, s
    assert s["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    plain = wait(lambda: (st := status(kubectl, unique_ns, "plain")).get("phase") in ("Succeeded", "Failed") and st)
    assert plain["phase"] == "Failed", plain
    assert plain["containerStatuses"][0]["state"]["terminated"]["exitCode"] != 0

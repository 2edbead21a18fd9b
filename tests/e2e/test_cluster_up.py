"""`pyk8s up --nodes 2` end to end: real node namespaces, containerd, kubelets and kube-proxies, real pods
through the scheduler, `pyk8s image load`, and a `pyk8s down` that leaves nothing on the host.

Results are mostly read from the kubelet's container log files (/var/log/pods); one test goes through
`kubectl logs` and `kubectl exec`, which the apiserver proxies to each node's kubelet API at its InternalIP.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from deploy.local import enabled_specs
from deploy.nodes import bridge_name, known_node_nets
from deploy.state import State
from tests.conftest import KUBECTL, REPO, free_port

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)

UP_TIMEOUT = 180.0
POD_TIMEOUT = 90.0
COMMAND_TIMEOUT = 60.0


def pyk8s(*argv: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "deploy", *argv], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout, check=False)


@dataclass
class Cluster:
    state_dir: Path
    up_seconds: float
    up_output: str

    @property
    def state(self) -> State:
        return State.load(self.state_dir)

    def kubectl(self, *argv: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run([KUBECTL, "--kubeconfig", str(self.state_dir / "kubeconfig"), *argv], input=stdin,
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(argv)} failed: {result.stderr}"
        return result.stdout

    def get(self, *argv: str) -> Any:
        return orjson.loads(self.kubectl("get", "-o", "json", *argv))

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=orjson.dumps(manifest).decode())

    def wait_pod(self, namespace: str, name: str, phases: tuple[str, ...]) -> dict[str, Any]:
        """The pod once its phase is one of `phases`; fails with the pod's status after POD_TIMEOUT."""
        pod: dict[str, Any] = {}
        ok = wait_for(lambda: (pod.update(self.get("pod", name, "-n", namespace)) or True)
                      and pod.get("status", {}).get("phase") in phases, POD_TIMEOUT)
        assert ok, f"pod {namespace}/{name} not {phases} after {POD_TIMEOUT}s: {pod.get('status')}"
        return pod


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def container_log(pod: dict[str, Any], container: str) -> str:
    """What the container wrote, from the CRI log file the kubelet asked containerd to write."""
    meta = pod["metadata"]
    path = Path("/var/log/pods") / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / container / "0.log"
    try:
        raw = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    # CRI log lines: "<timestamp> <stream> <P|F> <text>"
    return "\n".join(line.split(" ", 3)[3] if line.count(" ") >= 3 else "" for line in raw.splitlines())


def short_state_dir() -> Path:
    """containerd's socket lives in the state dir; unix socket paths are short, pytest's tmp paths are not."""
    return Path(tempfile.mkdtemp(prefix="pyk8s-e2e-", dir="/tmp")) / "state"


def host_leftovers(state: State, marker: str | None = None) -> list[str]:
    """Namespaces, links, processes and mounts of this cluster still on the host."""
    out = [f"netns {n.netns}" for n in known_node_nets(state) if Path("/var/run/netns", n.netns).exists()]
    out += [f"link {n.host_link}" for n in known_node_nets(state) if Path("/sys/class/net", n.host_link).exists()]
    if Path("/sys/class/net", bridge_name(state)).exists():
        out.append(f"bridge {bridge_name(state)}")
    root = str(state.root).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            flat = cmdline.replace(b"\0", b" ")
            if root in cmdline or (marker and marker.encode() in flat):
                out.append(f"process {entry.name}: {flat.decode(errors='replace')}")
    out += [f"mount {line.split()[1]}" for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(state.root) + "/")]
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                   timeout=UP_TIMEOUT)
    elapsed = time.monotonic() - started
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        yield Cluster(state_dir, elapsed, result.stdout)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


def pod_manifest(name: str, node: str, command: str, image: str = "busybox",
                 pull: str = "IfNotPresent", restart: str = "Never") -> dict[str, Any]:
    """A pod the scheduler places on `node` (by its hostname label, not by spec.nodeName)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"e2e": "cluster-up"}},
        "spec": {"restartPolicy": restart, "nodeSelector": {"kubernetes.io/hostname": node},
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": image, "imagePullPolicy": pull,
                                 "command": ["sh", "-c", command]}]},
    }


def test_nodes_are_ready_with_their_own_pod_cidr(cluster: Cluster, record_property: Callable[..., None]) -> None:
    record_property("time_to_ready_2_nodes_s", round(cluster.up_seconds, 2))
    print(f"pyk8s up --nodes 2: ready in {cluster.up_seconds:.2f}s")
    nodes = {n["metadata"]["name"]: n for n in cluster.get("nodes")["items"]}
    assert set(nodes) == {"node-1", "node-2"}
    cidrs = set()
    for name, node in nodes.items():
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", f"{name} is not Ready"
        internal = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        segment = ipaddress.ip_network(cluster.state.settings.node_subnet)
        assert internal and ipaddress.ip_address(internal[0]) in segment
        cidr = node["spec"]["podCIDR"]
        assert ipaddress.ip_network(cidr).subnet_of(ipaddress.ip_network("10.244.0.0/16"))
        cidrs.add(cidr)
        conf = (cluster.state_dir / "nodes" / name / "cni" / "10-pyk8s.conflist").read_text()
        assert cidr in conf, f"{name}'s CNI bridge does not use its podCIDR {cidr}"
        plugin = orjson.loads(conf)["plugins"][0]
        assert plugin["ipMasq"] is False
        assert plugin["ipam"]["dataDir"] == str(cluster.state_dir / "nodes" / name / "kubelet" / "cni-ipam")
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    assert len(cidrs) == 2


def test_status_lists_every_process_and_up_again_is_a_no_op(cluster: Cluster) -> None:
    result = pyk8s("status", "--state-dir", str(cluster.state_dir))
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:]}
    expected = {spec.name for spec in enabled_specs(cluster.state)}
    assert expected >= {"etcd", "apiserver", "controller-manager", "scheduler", "cluster-dns", "noderoutes",
                        "containerd-node-1", "kubelet-node-1", "kube-proxy-node-1", "containerd-node-2",
                        "kubelet-node-2", "kube-proxy-node-2"}
    assert set(rows) == expected
    assert result.returncode == 0 and all(r[1:] == ["yes", "yes", "0"] for r in rows.values()), result.stdout
    started = time.monotonic()
    again = pyk8s("up", "--state-dir", str(cluster.state_dir))
    assert again.returncode == 0 and "already up" in again.stdout, again.stdout + again.stderr
    assert time.monotonic() - started < 10


def test_a_pod_runs_on_each_node(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.get("nodes")["items"]}
    for node in ("node-1", "node-2"):
        cluster.apply(pod_manifest(f"hello-{node}", node, "echo hello from $(hostname); exec sleep 3600",
                                   restart="Always"))
    for node in ("node-1", "node-2"):
        pod = cluster.wait_pod("default", f"hello-{node}", ("Running",))
        assert pod["spec"]["nodeName"] == node
        status = pod["status"]
        assert status["containerStatuses"][0]["state"].get("running"), status
        assert status["containerStatuses"][0]["containerID"].startswith("containerd://")
        assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(nodes[node]["spec"]["podCIDR"])
        assert status["hostIP"] == next(a["address"] for a in nodes[node]["status"]["addresses"]
                                        if a["type"] == "InternalIP")
        assert wait_for(lambda p=pod, n=node: f"hello from hello-{n}" in container_log(p, "main"), 10), \
            container_log(pod, "main")


def test_logs_exec_and_pod_ips_kept_across_nodes(cluster: Cluster) -> None:
    """kubectl logs and exec reach each node's kubelet API; a pod on node-2 sees the client pod's own IP."""
    cluster.apply(pod_manifest("listener", "node-2", "exec nc -l -p 9000", restart="Always"))
    listener = cluster.wait_pod("default", "listener", ("Running",))
    cluster.apply(pod_manifest("caller", "node-1", f"echo calling; sleep 3600 | nc {listener['status']['podIP']} 9000",
                               restart="Always"))
    caller = cluster.wait_pod("default", "caller", ("Running",))
    assert wait_for(lambda: "calling" in cluster.kubectl("logs", "caller", check=False), 20), \
        cluster.kubectl("logs", "caller", check=False)
    assert cluster.kubectl("exec", "caller", "--", "sh", "-c", "echo exec on $(hostname)").strip() == \
        "exec on caller"
    seen = ""

    def connected() -> bool:
        nonlocal seen
        seen = cluster.kubectl("exec", "listener", "--", "netstat", "-tn", check=False)
        return ":9000 " in seen

    assert wait_for(connected, 20), seen
    peers = {line.split()[4].rsplit(":", 1)[0].removeprefix("::ffff:") for line in seen.splitlines()
             if ":9000 " in line}
    assert peers == {caller["status"]["podIP"]}, seen


def test_rbac_limits_a_service_account_to_what_it_is_bound_to(cluster: Cluster, tmp_path: Path) -> None:
    """`pyk8s up` runs the apiserver with RBAC and the default roles: a service account can do nothing until
    bound, then what the aggregated `view` role allows (no secrets), through its own token over TLS."""
    cluster.kubectl("create", "namespace", "team")
    cluster.kubectl("create", "serviceaccount", "bot", "-n", "team")
    sa = "system:serviceaccount:team:bot"

    def can(*what: str) -> str:
        return cluster.kubectl("auth", "can-i", *what, "-n", "team", "--as", sa, check=False).strip()

    assert can("list", "pods") == "no"
    cluster.kubectl("create", "rolebinding", "bot-view", "-n", "team", "--clusterrole", "view",
                    "--serviceaccount", "team:bot")
    assert wait_for(lambda: can("list", "pods") == "yes", 20), "view never granted list pods"
    assert can("delete", "pods") == "no" and can("get", "secrets") == "no"
    raw = orjson.loads(cluster.kubectl("config", "view", "--raw", "-o", "json"))["clusters"][0]["cluster"]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(raw["certificate-authority-data"]))
    token = cluster.kubectl("create", "token", "bot", "-n", "team").strip()

    def as_bot(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, "--kubeconfig", "/dev/null", "--server", raw["server"],
                               "--certificate-authority", str(ca), "--token", token, "-n", "team", *argv],
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)

    assert as_bot("get", "pods").returncode == 0
    assert as_bot("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == sa
    secrets = as_bot("get", "secrets")
    assert secrets.returncode != 0
    assert f'secrets is forbidden: User "{sa}" cannot list resource "secrets" in API group "" in the namespace ' \
           '"team"' in secrets.stderr


def pid_with_marker(marker: str) -> int | None:
    """The host pid of the process whose command line carries `marker` (a pod's shell)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    return int(entry.name)
            except OSError:
                continue
    return None


def test_a_pod_lists_pods_through_the_kubernetes_service(cluster: Cluster) -> None:
    """What operators and kubectl in a pod do: resolve kubernetes.default.svc with the cluster DNS, then call
    it over HTTPS with the pod's mounted token, verifying the serving cert against the pod's mounted CA.

    busybox has no TLS client, so the call is the real kubectl run in the pod's network namespace, with the
    token and CA read from the pod's own mount (/proc/PID/root) and the address the pod's DNS answered."""
    ns = "incluster"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("create", "serviceaccount", "lister", "-n", ns)
    cluster.kubectl("create", "role", "pod-lister", "--verb=get,list", "--resource=pods", "-n", ns)
    cluster.kubectl("create", "rolebinding", "lister", "--role=pod-lister", f"--serviceaccount={ns}:lister", "-n", ns)
    marker = f"in-cluster-client-{os.getpid()}"
    manifest = pod_manifest("client", "node-2", f"sleep 3600; echo {marker}", restart="Always")
    manifest["metadata"]["namespace"] = ns
    manifest["spec"]["serviceAccountName"] = "lister"
    cluster.apply(manifest)
    cluster.wait_pod(ns, "client", ("Running",))

    lookup = cluster.kubectl("exec", "-n", ns, "client", "--", "nslookup", "kubernetes.default.svc.cluster.local")
    lines = lookup.splitlines()
    name_at = next(i for i, line in enumerate(lines) if line.startswith("Name:"))
    answers = [line.split()[-1] for line in lines[name_at:] if line.startswith("Address")]
    assert answers == ["10.96.0.1"], lookup

    pid = pid_with_marker(marker)
    assert pid is not None, "the client pod's shell is not running on the host"
    mounted = Path(f"/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount")
    token = (mounted / "token").read_text()
    env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
    # By name, as kubectl and most clients are told to; and by the address in the pod's environment, as
    # client-go's in-cluster config does (the serving cert must carry both).
    for server, name in ((f"https://{answers[0]}:443", ["--tls-server-name", "kubernetes.default.svc"]),
                         (f"https://{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}", [])):
        result = subprocess.run(
            ["nsenter", f"--net=/proc/{pid}/ns/net", KUBECTL, "--kubeconfig", "/dev/null", "--server", server, *name,
             "--certificate-authority", str(mounted / "ca.crt"), "--token", token,
             "-n", ns, "get", "pods", "-o", "json"],
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
        assert result.returncode == 0, f"{server}: {result.stderr}"
        assert [p["metadata"]["name"] for p in orjson.loads(result.stdout)["items"]] == ["client"]


def test_readme_deployment_pulls_busybox_from_the_image_registry(cluster: Cluster) -> None:
    """The README's example verbatim: `busybox` means busybox:latest, so the pod pulls with policy Always, and
    the pull is served by the cluster's image registry (no registry outside is reachable here)."""
    cluster.kubectl("create", "deployment", "web", "--image=busybox", "--", "httpd", "-f", "-p", "8080")
    pods: list[dict[str, Any]] = []

    def running() -> bool:
        pods[:] = cluster.get("pods", "-l", "app=web")["items"]
        return bool(pods) and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    assert wait_for(running, POD_TIMEOUT), [p.get("status") for p in pods]
    pod = pods[0]
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["status"]["containerStatuses"][0]["image"] == "docker.io/library/busybox:latest"
    events = cluster.get("events", "--field-selector", f"involvedObject.name={pod['metadata']['name']}")["items"]
    pulled = [e["message"] for e in events if e["reason"] == "Pulled"]
    assert any(m.startswith('Successfully pulled image "busybox"') for m in pulled), pulled
    port = cluster.state.settings.component_ports["image-registry"]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'registry_http_requests_total{code="200",method="HEAD",route="manifests"}' in metrics
    cluster.kubectl("delete", "deployment", "web")


def test_image_load_stores_into_the_registry_and_imports_into_every_node(cluster: Cluster) -> None:
    from kubelet_agent.images.build import busybox_layer, write_image_archive

    archive = cluster.state_dir.parent / "hello.tar"
    write_image_archive(archive, "docker.io/library/pyk8s-e2e-hello:1", busybox_layer(), [],
                        ["sh", "-c", "echo loaded image runs"])
    result = pyk8s("image", "load", str(archive), "--state-dir", str(cluster.state_dir))
    assert result.returncode == 0, result.stderr
    assert "imported into node-1" in result.stdout and "imported into node-2" in result.stdout
    listed = pyk8s("image", "ls", "--state-dir", str(cluster.state_dir)).stdout
    refs = [line.split()[0] for line in listed.splitlines()[1:]]
    assert refs == ["docker.io/library/busybox:latest", "docker.io/library/pyk8s-e2e-hello:1",
                    "registry.k8s.io/pause:3.10"], listed
    # Never finds what `image load` pulled into the node; Always pulls it from the registry again.
    for node, pull in (("node-1", "Never"), ("node-2", "Always")):
        manifest = pod_manifest(f"loaded-{node}", node, "echo loaded image runs", image="pyk8s-e2e-hello:1",
                                pull=pull)
        cluster.apply(manifest)
    for node in ("node-1", "node-2"):
        pod = cluster.wait_pod("default", f"loaded-{node}", ("Succeeded", "Failed"))
        assert pod["status"]["phase"] == "Succeeded", pod["status"]
        assert "loaded image runs" in container_log(pod, "main")


def test_claim_without_class_keeps_its_data_until_the_claim_goes(cluster: Cluster) -> None:
    """The default class `standard` provisions a claim that names none on its pod's node; the data outlives the
    pod, and deleting the claim deletes the volume and its directory, as kind's local-path does."""
    standard = cluster.get("storageclass", "standard")
    assert standard["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    cluster.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": "kept", "namespace": "default"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}})
    assert cluster.get("pvc", "kept")["spec"]["storageClassName"] == "standard"

    def run(command: str, **spec: Any) -> dict[str, Any]:
        cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "storage-user", "namespace": "default"},
                       "spec": {**spec, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                "containers": [{"name": "main", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                                "command": ["sh", "-c", command],
                                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "kept"}}]}})
        pod = cluster.wait_pod("default", "storage-user", ("Succeeded", "Failed"))
        assert pod["status"]["phase"] == "Succeeded", (pod["status"], container_log(pod, "main"))
        cluster.kubectl("delete", "pod", "storage-user", "--wait=true")
        return pod

    # A container that is not root can write: the directory is made world-writable, as local-path does.
    first = run("echo written-by-the-first-pod > /data/file", securityContext={"runAsUser": 1000})
    claim = cluster.get("pvc", "kept")
    assert claim["status"]["phase"] == "Bound", claim["status"]
    volume = cluster.get("pv", claim["spec"]["volumeName"])
    directory = Path(volume["spec"]["hostPath"]["path"])
    assert directory.parent == cluster.state_dir / "storage"
    assert (directory / "file").read_text() == "written-by-the-first-pod\n"
    assert directory.stat().st_mode & 0o777 == 0o777
    second = run("cat /data/file")
    assert second["spec"]["nodeName"] == first["spec"]["nodeName"]
    assert "written-by-the-first-pod" in container_log(second, "main")
    cluster.kubectl("delete", "pvc", "kept", "--wait=true")
    name = volume["metadata"]["name"]
    assert wait_for(lambda: name not in {pv["metadata"]["name"] for pv in cluster.get("pv")["items"]}, POD_TIMEOUT), \
        cluster.get("pv")
    assert not directory.exists(), f"{directory} is left behind"


def test_down_leaves_nothing_on_the_host() -> None:
    """Its own cluster, so the module's one keeps running for the tests above whatever the order."""
    state_dir = short_state_dir()
    marker = str(80000 + os.getpid() % 10000)
    try:
        result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                       timeout=UP_TIMEOUT)
        assert result.returncode == 0, result.stdout + result.stderr
        cluster = Cluster(state_dir, 0.0, result.stdout)
        for node in ("node-1", "node-2"):
            cluster.apply(pod_manifest(f"sleeper-{node}", node, f"exec sleep {marker}", restart="Always"))
        for node in ("node-1", "node-2"):
            cluster.wait_pod("default", f"sleeper-{node}", ("Running",))
        state = cluster.state
        assert host_leftovers(state), "the running cluster must be visible to the leftover check"
        down = pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        assert down.returncode == 0, down.stderr
        assert "containerd-node-2: stopped" in down.stdout and f"bridge {bridge_name(state)}: deleted" in down.stdout
        sleeper = f"sleep {marker}"
        assert wait_for(lambda: not host_leftovers(state, sleeper), 10), host_leftovers(state, sleeper)
        assert (state_dir / "etcd").is_dir(), "down keeps the data"
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)

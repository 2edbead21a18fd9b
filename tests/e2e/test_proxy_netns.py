"""kube-proxy end to end in network namespaces: a "node" netns with a bridge and two pod netns
running busybox httpd, a client netns routed through the node, and the proxy writing the node's
rules through --iptables-binary / --nft-binary wrappers while it talks to the real apiserver."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, free_port

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("busybox"), reason="needs root and busybox"
)

P = f"pkp{os.getpid() % 10000}"
NODE, CLIENT, PODS = f"{P}-node", f"{P}-client", [f"{P}-pod1", f"{P}-pod2"]
POD_IPS = ["10.244.0.2", "10.244.0.3"]
NODE_IP, CLIENT_IP = "192.168.77.2", "192.168.77.1"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


def nsx(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", ns, *args, check=check)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("netns")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for ns in [NODE, CLIENT, *PODS]:
            sh("ip", "netns", "add", ns)
            nsx(ns, "ip", "link", "set", "lo", "up")
        nsx(NODE, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        nsx(NODE, "ip", "link", "add", "br0", "type", "bridge")
        nsx(NODE, "ip", "addr", "add", "10.244.0.1/24", "dev", "br0")
        nsx(NODE, "ip", "link", "set", "br0", "up")
        nsx(NODE, "ip", "route", "add", "10.96.0.0/12", "dev", "br0")
        for i, (ns, ip) in enumerate(zip(PODS, POD_IPS, strict=True)):
            nsx(NODE, "ip", "link", "add", f"veth{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            nsx(NODE, "ip", "link", "set", f"veth{i}", "master", "br0", "up")
            nsx(NODE, "bridge", "link", "set", "dev", f"veth{i}", "hairpin", "on")
            nsx(ns, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
            nsx(ns, "ip", "link", "set", "eth0", "up")
            nsx(ns, "ip", "route", "add", "default", "via", "10.244.0.1")
            root = tmp / f"www{i}"
            root.mkdir()
            (root / "index.html").write_text(f"pod{i + 1}\n")
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, "busybox", "httpd", "-f", "-p", "8080", "-h", str(root)]
                )
            )
        nsx(NODE, "ip", "link", "add", "uplink", "type", "veth", "peer", "name", "eth0", "netns", CLIENT)
        nsx(NODE, "ip", "addr", "add", f"{NODE_IP}/24", "dev", "uplink")
        nsx(NODE, "ip", "link", "set", "uplink", "up")
        nsx(CLIENT, "ip", "addr", "add", f"{CLIENT_IP}/24", "dev", "eth0")
        nsx(CLIENT, "ip", "link", "set", "eth0", "up")
        nsx(CLIENT, "ip", "route", "add", "10.96.0.0/12", "via", NODE_IP)
        wrappers = tmp / "bin"
        wrappers.mkdir()
        for tool in ("iptables", "iptables-restore", "iptables-save", "nft"):
            path = wrappers / tool
            path.write_text(f'#!/bin/sh\nexec ip netns exec {NODE} {tool} "$@"\n')
            path.chmod(0o755)
        yield wrappers
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for ns in [CLIENT, *PODS, NODE]:
            sh("ip", "netns", "del", ns, check=False)


def api(apiserver: str, method: str, path: str, body: dict | None = None) -> dict:
    r = httpx.request(method, apiserver + path, json=body, timeout=10)
    assert r.status_code < 300, r.text
    return r.json()


def set_endpoints(apiserver: str, ns: str, svc: str, ips: list[str]) -> None:
    body = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{svc}-x", "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}, "nodeName": "node1"} for ip in ips],
    }
    path = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
    r = httpx.get(f"{apiserver}{path}/{svc}-x", timeout=10)
    if r.status_code == 200:
        body["metadata"]["resourceVersion"] = r.json()["metadata"]["resourceVersion"]
        api(apiserver, "PUT", f"{path}/{svc}-x", body)
    else:
        api(apiserver, "POST", path, body)


def fetch(ns: str, url: str) -> str:
    r = nsx(ns, "curl", "-s", "--max-time", "1", url, check=False)
    return r.stdout.strip() if r.returncode == 0 else ""


def wait_for(predicate, timeout: float = 10.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_proxy_in_netns(mode: str, network: Path, apiserver: str, workdir: Path) -> None:
    ns = f"proxy-{mode}"
    httpx.post(f"{apiserver}/api/v1/namespaces", json={"metadata": {"name": ns}}, timeout=10)
    svc = api(
        apiserver,
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {
            "metadata": {"name": "web"},
            "spec": {
                "type": "NodePort",
                "selector": {"app": "web"},
                "ports": [{"port": 80, "targetPort": 8080}],
            },
        },
    )
    aff = api(
        apiserver,
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {
            "metadata": {"name": "sticky"},
            "spec": {
                "selector": {"app": "web"},
                "sessionAffinity": "ClientIP",
                "ports": [{"port": 80, "targetPort": 8080}],
            },
        },
    )
    cip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    set_endpoints(apiserver, ns, "web", POD_IPS)
    set_endpoints(apiserver, ns, "sticky", POD_IPS)
    metrics_port = free_port()
    log = open(workdir / f"proxy-{mode}.log", "wb")  # noqa: SIM115 - handed to the child
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy_agent",
            "--master",
            apiserver,
            "--hostname-override",
            "node1",
            "--proxy-mode",
            mode,
            "--cluster-cidr",
            "10.244.0.0/16",
            "--min-sync-period",
            "0.1",
            "--iptables-binary",
            str(network / "iptables"),
            "--nft-binary",
            str(network / "nft"),
            "--healthz-bind-address",
            "127.0.0.1:0",
            "--metrics-bind-address",
            f"127.0.0.1:{metrics_port}",
        ],
        cwd=REPO,
        stdout=log,
        stderr=log,
    )
    try:
        url = f"http://{cip}/"
        assert wait_for(lambda: fetch(CLIENT, url) != ""), (workdir / f"proxy-{mode}.log").read_text()[-3000:]
        seen = {fetch(CLIENT, url) for _ in range(30)}
        assert seen == {"pod1", "pod2"}
        assert {fetch(CLIENT, f"http://{NODE_IP}:{node_port}/") for _ in range(30)} == {"pod1", "pod2"}
        assert fetch(NODE, url) in ("pod1", "pod2")  # from the node itself
        assert fetch(PODS[0], url) in ("pod1", "pod2")  # from a pod, hairpin included
        sticky = {fetch(CLIENT, f"http://{aff['spec']['clusterIP']}/") for _ in range(15)}
        assert len(sticky) == 1 and sticky != {""}
        set_endpoints(apiserver, ns, "web", [])
        assert wait_for(lambda: fetch(CLIENT, url) == "", 3)
        start = time.monotonic()
        set_endpoints(apiserver, ns, "web", POD_IPS)
        assert wait_for(lambda: fetch(CLIENT, url) != "", 3)
        assert time.monotonic() - start < 2.0
        body = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert "kubeproxy_sync_proxy_rules_last_timestamp_seconds" in body
    finally:
        proxy.terminate()
        proxy.wait(10)
        log.close()
        sh(
            sys.executable,
            "-m",
            "proxy_agent",
            "--cleanup",
            "--iptables-binary",
            str(network / "iptables"),
            "--nft-binary",
            str(network / "nft"),
        )
    assert "KUBE-" not in nsx(NODE, "iptables-save").stdout
    assert "kube-proxy" not in nsx(NODE, "nft", "list", "ruleset").stdout
    api(apiserver, "DELETE", f"/api/v1/namespaces/{ns}/services/web")
    api(apiserver, "DELETE", f"/api/v1/namespaces/{ns}/services/sticky")


def _kernel_rules(mode: str, ns: str) -> list[str]:
    if mode == "nftables":  # chains and sets as blocks, in name order rather than creation order
        text = nsx(ns, "nft", "list", "table", "ip", "kube-proxy").stdout.strip().removesuffix("}")
        return sorted(block.strip() for block in text.split("\n\n"))
    out = nsx(ns, "iptables-save", "-t", "nat").stdout + nsx(ns, "iptables-save", "-t", "filter").stdout
    return sorted(line for line in out.splitlines() if "KUBE-" in line and not line.startswith("#"))


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
async def test_partial_syncs_leave_the_kernel_as_a_full_sync_would(mode: str) -> None:
    """Endpoint changes, emptied and deleted Services applied as partial syncs, then compared with a
    fresh full sync of the same state in the same namespace."""
    from proxy_agent.backends.iptables import IptablesBackend
    from proxy_agent.backends.nftables import NftablesBackend
    from tests.unit.proxy.fixtures import endpoint_slice, representative, service

    ns = f"{P}-partial-{mode}"
    sh("ip", "netns", "add", ns)
    wrappers = Path(tempfile.mkdtemp(prefix=f"{ns}-"))
    try:
        for tool in ("iptables", "iptables-restore", "iptables-save", "nft"):
            (wrappers / tool).write_text(f'#!/bin/sh\nexec ip netns exec {ns} {tool} "$@"\n')
            (wrappers / tool).chmod(0o755)
        make = (
            (lambda: NftablesBackend(str(wrappers / "nft")))
            if mode == "nftables"
            else (lambda: IptablesBackend(str(wrappers / "iptables")))
        )
        tracker, state = representative()
        backend = make()
        await backend.apply(backend.render(state, None))
        steps = [
            lambda: tracker.slice_update(endpoint_slice("web-a", "web", [("10.244.0.2", "n1")], port_name="http")),
            # same count, another address: a map element whose key stays and whose value changes
            lambda: tracker.slice_update(endpoint_slice("web-a", "web", [("10.244.0.7", "n1")], port_name="http")),
            lambda: tracker.slice_update(endpoint_slice("aff-a", "aff", [("10.244.0.2", "n1")])),
            lambda: tracker.slice_update(endpoint_slice("empty-a", "empty", [("10.244.0.9", "n1")])),
            lambda: tracker.service_update(service("np", clusterIP="10.96.0.11"), None),
            lambda: tracker.slice_update(endpoint_slice("web-a", "web", [], port_name="http")),
            lambda: tracker.service_update(service("aff", clusterIP="10.96.0.12"), None),
        ]
        for i, step in enumerate(steps):
            step()
            changed = tracker.take()
            tracker.apply(state, changed)
            ruleset = backend.render(state, changed)
            assert not ruleset.full
            await backend.apply(ruleset)
            if i == 1:
                now = "\n".join(_kernel_rules(mode, ns))
                assert "10.244.0.7" in now and "10.96.0.10 . tcp . 80 . 0 : 10.244.0.2 . 8080" not in now
        partial = _kernel_rules(mode, ns)
        fresh = make()
        await fresh.apply(fresh.render(state, None))
        assert partial == _kernel_rules(mode, ns)
        assert any("10.244.0.9" in line for line in partial)
        assert not any("ns/np" in line for line in partial)
    finally:
        sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(wrappers, ignore_errors=True)


async def test_iptables_nft_full_sync_in_batches_leaves_what_one_restore_would() -> None:
    """iptables-nft full syncs go in batches of Services' chains (one run would be quadratic): the kernel
    ends up as after the same ruleset in one iptables-nft-restore."""
    from proxy_agent.backends import run_tool
    from proxy_agent.backends.iptables import BATCH_RULES, IptablesBackend
    from proxy_agent.tracker import ChangeTracker, ProxyState
    from tests.unit.proxy.fixtures import endpoint_slice, service

    if not shutil.which("iptables-nft-restore"):
        pytest.skip("needs iptables-nft")
    namespaces = [f"{P}-batch-{i}" for i in range(2)]
    wrappers = Path(tempfile.mkdtemp(prefix=f"{P}-batch-"))
    try:
        backends = []
        for ns in namespaces:
            sh("ip", "netns", "add", ns)
            (wrappers / ns).mkdir()
            for tool in ("iptables", "iptables-restore", "iptables-save"):
                (wrappers / ns / tool).write_text(
                    f'#!/bin/sh\nexec ip netns exec {ns} {tool.replace("iptables", "iptables-nft")} "$@"\n'
                )
                (wrappers / ns / tool).chmod(0o755)
            backends.append(IptablesBackend(str(wrappers / ns / "iptables")))
        tracker = ChangeTracker()
        services = BATCH_RULES // 8  # about 17 rules each: several batches
        for i in range(services):
            tracker.service_update(None, service(f"s{i}", clusterIP=f"10.96.{i // 250}.{i % 250 + 1}",
                                                 ports=[{"name": "http", "port": 80}]))
            eps = [(f"10.244.{i // 50}.{i % 50 * 5 + j + 1}", "n1") for j in range(5)]
            tracker.slice_update(endpoint_slice(f"s{i}-a", f"s{i}", eps, port_name="http"))
        state = ProxyState(node_name="n1", cluster_cidr="10.244.0.0/16")
        tracker.apply(state, tracker.take())
        batched, whole = (b.render(state, None) for b in backends)
        assert batched.split is not None and len(batched.split()) >= 3
        assert await backends[0].nft_backed()
        await backends[0].apply(batched)
        await backends[1].ensure_jumps()
        await run_tool([backends[1].restore, "-w", "--noflush"], stdin=whole.text)
        saved = [(await run_tool([b.save, "-t", "nat"]))[1] for b in backends]
        rules = [sorted(line for line in text.splitlines() if "KUBE-" in line) for text in saved]
        assert rules[0] == rules[1] and sum(line.startswith("-A KUBE-SEP-") for line in rules[0]) == services * 5 * 2
    finally:
        for ns in namespaces:
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(wrappers, ignore_errors=True)

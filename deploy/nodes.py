"""Real nodes of the local cluster, the way kind builds them but with network namespaces instead of
containers: each node is a netns named after the cluster and the node, joined by a veth to a bridge
of ours on the host (the node segment, where each node has its InternalIP), with its own containerd
running inside it. The host keeps nothing of ours after `pyk8s down`: every link and namespace is
created and deleted by its exact name.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from deploy.state import State
from image_registry.archive import ArchiveError, load_archive
from image_registry.store import ImageStore, StoredImage

#: Node segments are /24s taken from here, one per cluster, avoiding every route the host has.
SEGMENT_POOL = ipaddress.ip_network("172.30.0.0/16")
MAX_NODES = 200
CLUSTER_DNS_IP = "10.96.0.10"
DNS_SERVICE = ("kube-system", "kube-dns")
DNS_SLICE = "kube-dns-pyk8s"
STORAGE_CLASS = "standard"
STORAGE_PROVISIONER = "pyk8s.io/hostpath"
INGRESS_CLASS = "pyk8s"
INGRESS_CONTROLLER = "pyk8s.io/ingress-controller"
MANAGED_BY = "pyk8s-up"
CONTAINERD = "containerd"
PROXY_TOOLS = ("iptables", "iptables-save", "iptables-restore", "nft")
SOCKET_PATH_MAX = 100
#: A pull from the registry on the node segment takes a second; one that falls through to an unreachable
#: upstream fails within containerd's own timeouts, well inside this.
PULL_TIMEOUT = 120.0

CONTAINERD_CONFIG = """version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = "{oci_runtime}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{registry_hosts}"
"""

#: Registries whose pulls try the cluster's image mirror first, and the server each then falls back to;
#: `_default` is containerd's entry for every other registry (falling back to that registry itself).
REGISTRY_UPSTREAMS = {
    "docker.io": "https://registry-1.docker.io",
    "registry.k8s.io": "https://registry.k8s.io",
    "quay.io": "https://quay.io",
    "ghcr.io": "https://ghcr.io",
    "_default": "",
}

#: A hybrid host's cgroup2 mount; crun refuses to run when controllers are still left on it.
HYBRID_CGROUP2_CONTROLLERS = Path("/sys/fs/cgroup/unified/cgroup.controllers")


def containerd_config(root: Path, state: Path, sock: Path, cni: Path, registry_hosts: Path) -> str:
    """A node's containerd config: its own dirs and socket, CNI, and registry hosts from `registry_hosts`."""
    return CONTAINERD_CONFIG.format(root=root, state=state, sock=sock, cni=cni, oci_runtime=oci_runtime(),
                                    registry_hosts=registry_hosts)


def registry_hosts_files(mirror: str) -> dict[str, str]:
    """`<registry>/hosts.toml` for containerd's config_path: `mirror` first for pulls and tag lookups,
    then the real registry, so a name the mirror lacks still pulls where the registry is reachable."""
    files = {}
    for registry, upstream in REGISTRY_UPSTREAMS.items():
        server = f'server = "{upstream}"\n\n' if upstream else ""
        files[f"{registry}/hosts.toml"] = f'{server}[host."{mirror}"]\n  capabilities = ["pull", "resolve"]\n'
    return files


def write_registry_hosts(directory: Path, mirror: str) -> None:
    for name, text in registry_hosts_files(mirror).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        _write_if_changed(directory / name, text)


def oci_runtime() -> str:
    """crun when installed and this host's cgroups suit it, else runc. Both run under the same runc v2 shim;
    crun is a small C program, so creating and starting a container costs a fraction of runc's CPU (runc's
    `init` alone boots a Go runtime per container), which bounds how fast a node starts a burst of pods."""
    crun = shutil.which("crun")
    if crun:
        try:
            hybrid_with_controllers = bool(HYBRID_CGROUP2_CONTROLLERS.read_text().split())
        except OSError:
            hybrid_with_controllers = False
        if not hybrid_with_controllers:
            return crun
    return shutil.which("runc") or "runc"


class NetworkError(Exception):
    """A node network step failed; the message carries the command and its error output."""


@dataclass(frozen=True)
class NodeNet:
    """Names and paths of one real node; all derived from the state dir, so `down` finds them again."""

    index: int
    name: str
    netns: str
    host_link: str
    ip: str
    dir: Path

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    @property
    def network_marker(self) -> Path:
        """Written once the namespace is fully set up, so a half-made one is rebuilt, not trusted."""
        return self.dir / "network.ready"

    @property
    def containerd_dir(self) -> Path:
        return self.dir / "containerd"

    @property
    def socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry config_path: one hosts.toml per registry."""
        return self.containerd_dir / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni"

    @property
    def kubelet_dir(self) -> Path:
        return self.dir / "kubelet"

    @property
    def bin_dir(self) -> Path:
        return self.dir / "bin"


def bridge_name(state: State) -> str:
    return f"pk{state.cluster_id}"


def segment(state: State) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(state.settings.node_subnet)


def bridge_ip(state: State) -> str:
    return str(segment(state)[1])


def registry_mirror(state: State) -> str:
    """The image registry's URL as the nodes reach it: on the host side of the node segment."""
    return f"http://{bridge_ip(state)}:{state.settings.registry_port}"


def registry_store(state: State) -> Path:
    """The images the registry serves (an OCI image layout)."""
    return state.root / "registry"


def node_net(state: State, index: int) -> NodeNet:
    name = f"node-{index}"
    return NodeNet(index=index, name=name, netns=f"pyk8s-{state.cluster_id}-{name}",
                   host_link=f"pk{state.cluster_id}n{index}", ip=str(segment(state)[index + 1]),
                   dir=state.root / "nodes" / name)


def node_nets(state: State) -> list[NodeNet]:
    """The nodes `up` runs now; none before the segment is chosen (nothing was set up yet)."""
    if not state.settings.node_subnet:
        return []
    return [node_net(state, i) for i in range(1, state.settings.nodes + 1)]


def known_node_nets(state: State) -> list[NodeNet]:
    """Every node this state dir ever had (its directory exists), including ones `--nodes` dropped since."""
    if not state.settings.node_subnet:
        return []
    indexes = {int(d.name.removeprefix("node-")) for d in (state.root / "nodes").glob("node-*")
               if d.name.removeprefix("node-").isdigit()}
    indexes.update(range(1, state.settings.nodes + 1))
    return [node_net(state, i) for i in sorted(indexes)]


async def run(*argv: str, check: bool = True, stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin)
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed: {(err or out).decode(errors='replace').strip()}")
    return out.decode(errors="replace")


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_exists(name: str) -> bool:
    return Path("/var/run/netns", name).exists()


async def _host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination the host routes (all tables), so a new segment shadows none of them."""
    routes = orjson.loads(await run("ip", "-j", "-4", "route", "show", "table", "all") or "[]")
    out = []
    for route in routes:
        dst = route.get("dst", "")
        if dst and dst != "default":
            with contextlib.suppress(ValueError):
                out.append(ipaddress.IPv4Network(dst, strict=False))
    return out


async def choose_segment(state: State) -> None:
    """Pick the node segment once; pick again only if ours is gone and someone else now uses it."""
    s = state.settings
    if s.node_subnet and link_exists(bridge_name(state)):
        return
    taken = await _host_networks()
    if s.node_subnet and not any(n.overlaps(segment(state)) for n in taken):
        return
    subnets = list(SEGMENT_POOL.subnets(new_prefix=24))
    start = int(state.cluster_id, 16) % len(subnets)
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(n.overlaps(candidate) for n in taken):
            s.node_subnet = str(candidate)
            return
    raise NetworkError(f"no free /24 for the node segment in {SEGMENT_POOL}")


async def ensure_network(state: State, nodes: list[NodeNet]) -> None:
    """The bridge and each node's netns with its veth, address, routes and sysctls; existing parts stay."""
    bridge = bridge_name(state)
    prefix = segment(state).prefixlen
    batch = []
    if not link_exists(bridge):
        batch.append(f"link add {bridge} type bridge")
    batch += [f"addr replace {bridge_ip(state)}/{prefix} dev {bridge}", f"link set {bridge} up"]
    fresh = []
    for node in nodes:
        if netns_exists(node.netns) and link_exists(node.host_link) and node.network_marker.exists():
            # Re-attach in case the bridge was deleted and made again under the existing links.
            batch.append(f"link set {node.host_link} master {bridge} up")
            continue
        if netns_exists(node.netns):
            batch.append(f"netns delete {node.netns}")
        if link_exists(node.host_link):
            batch.append(f"link delete {node.host_link}")
        batch += [
            f"netns add {node.netns}",
            f"link add {node.host_link} type veth peer name eth0 netns {node.netns}",
            f"link set {node.host_link} master {bridge} up",
        ]
        fresh.append(node)
    await run("ip", "-batch", "-", stdin="\n".join(batch).encode() + b"\n")
    for node in fresh:
        inside = ["link set lo up", f"addr add {node.ip}/{prefix} dev eth0", "link set eth0 up",
                  f"route add default via {bridge_ip(state)}"]
        await run("ip", "-n", node.netns, "-batch", "-", stdin="\n".join(inside).encode() + b"\n")
    for node in fresh:
        # A node routes for its pods; bridged pod traffic must pass kube-proxy's rules too (br_netfilter),
        # which kernels without per-netns bridge sysctls simply do not list (-e).
        await run("nsenter", f"--net={node.netns_path}", "sysctl", "-qew", "net.ipv4.ip_forward=1",
                  "net.bridge.bridge-nf-call-iptables=1")
    for node in nodes:
        write_node_files(node, registry_mirror(state))
    for node in fresh:
        node.network_marker.write_text(f"{node.netns} {node.host_link} {node.ip}\n")


def write_node_files(node: NodeNet, mirror: str) -> None:
    """containerd's config with `mirror` in front of every registry, and the iptables/nft wrappers
    kube-proxy runs from the host into the node."""
    for d in (node.containerd_dir / "root", node.containerd_dir / "state", node.cni_conf_dir, node.kubelet_dir,
              node.bin_dir):
        d.mkdir(parents=True, exist_ok=True)
    if len(str(node.socket)) + len(".ttrpc") > SOCKET_PATH_MAX:
        raise NetworkError(f"state dir path too long for a unix socket: {node.socket}")
    write_registry_hosts(node.registry_hosts, mirror)
    path, text = node_containerd_config(node)
    _write_if_changed(path, text)
    for old in node.containerd_dir.glob("config*.toml"):
        if old != path:
            old.unlink()
    # iptables-legacy when installed: the nft-backed iptables-restore 1.8.9 slows down with the square of the
    # number of chains (minutes at 10,000 Services), and a node namespace starts with no rules of either kind
    legacy = shutil.which("iptables-legacy-restore") is not None
    for tool in PROXY_TOOLS:
        path = node.bin_dir / tool
        binary = tool.replace("iptables", "iptables-legacy") if legacy else tool
        _write_if_changed(path, f'#!/bin/sh\nexec nsenter --net={node.netns_path} {binary} "$@"\n')
        path.chmod(0o755)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def node_containerd_config(node: NodeNet) -> tuple[Path, str]:
    """The node's containerd config and the file it goes in, named by its content: a changed config changes
    containerd's command line, so `up` restarts it (its containers keep running under their shims)."""
    text = containerd_config(node.containerd_dir / "root", node.containerd_dir / "state", node.socket,
                             node.cni_conf_dir, node.registry_hosts)
    return node.containerd_dir / f"config-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml", text


def containerd_argv(node: NodeNet) -> list[str]:
    """nsenter --net, not `ip netns exec`: the latter remounts /sys, and runc then fails."""
    binary = shutil.which(CONTAINERD) or f"/usr/bin/{CONTAINERD}"
    return ["nsenter", f"--net={node.netns_path}", binary, "--config", str(node_containerd_config(node)[0])]


async def remove_network(state: State, nodes: list[NodeNet], *, bridge: bool) -> list[str]:
    """Delete the nodes' namespaces and host links by exact name, and the bridge if asked; report each."""
    report = []
    for node in nodes:
        node.network_marker.unlink(missing_ok=True)
        if netns_exists(node.netns):
            await run("ip", "netns", "delete", node.netns, check=False)
            report.append(f"netns {node.netns}: deleted")
        if link_exists(node.host_link):
            await run("ip", "link", "delete", node.host_link, check=False)
            report.append(f"link {node.host_link}: deleted")
    if bridge and state.settings.node_subnet and link_exists(bridge_name(state)):
        await run("ip", "link", "delete", bridge_name(state), check=False)
        report.append(f"bridge {bridge_name(state)}: deleted")
    return report


# -- images ----------------------------------------------------------------------------------------

_image_lock = asyncio.Lock()


async def image_archives(state: State) -> list[Path]:
    """busybox and pause built once per state dir (a pause build runs gcc), then reused."""
    from kubelet_agent.images import build_busybox, build_pause

    out = state.root / "images"
    async with _image_lock:
        archives = []
        for file, build in (("pause.tar", build_pause), ("busybox.tar", build_busybox)):
            archives.append(out / file if (out / file).exists() else await build(out))
        return archives


async def import_images(state: State, node: NodeNet, archives: list[Path] | None = None) -> None:
    from kubelet_agent.images import import_image

    for archive in archives or await image_archives(state):
        await import_image(archive, str(node.socket))


async def store_images(state: State, archives: list[Path], name: str | None = None) -> list[StoredImage]:
    """Put the archives' images into the registry's store (the running registry serves them at once);
    RuntimeError says why an archive could not be."""
    store = ImageStore(registry_store(state))
    out = []
    for archive in archives:
        try:
            out += await asyncio.to_thread(load_archive, store, archive, name)
        except ArchiveError as error:
            raise RuntimeError(str(error)) from None
    return out


def stored_images(state: State) -> list[tuple[str, str, int]]:
    """(reference, manifest digest, bytes) of each image the registry serves."""
    store = ImageStore(registry_store(state))
    return [(str(image.ref), image.manifest.digest, store.size(image.manifest)) for image in store.images()]


async def store_builtin_images(state: State, _http: httpx.AsyncClient) -> None:
    """busybox and pause in the registry, so `imagePullPolicy: Always` pulls of them work on every node."""
    await store_images(state, await image_archives(state))


async def pull_images(node: NodeNet, refs: list[str]) -> None:
    """Pull through the node's CRI, as the kubelet would: from the registry mirror the node is configured with."""
    from kubelet_agent.cri.remote import RemoteRuntime, RuntimeError_

    runtime = RemoteRuntime(node.endpoint, timeout=PULL_TIMEOUT)
    await runtime.start()
    try:
        for ref in refs:
            await runtime.pull_image(ref)
    except RuntimeError_ as error:
        raise RuntimeError(f"{node.name}: pulling {', '.join(refs)} failed: {error}") from None
    finally:
        await runtime.close()


# -- stopping a node -------------------------------------------------------------------------------


async def stop_pods(node: NodeNet) -> int:
    """Stop and remove every pod sandbox through CRI, so CNI releases addresses and containers exit."""
    from kubelet_agent.cri.remote import RemoteRuntime

    if not node.socket.exists():
        return 0
    runtime = RemoteRuntime(node.endpoint, timeout=20)
    await runtime.start()
    try:
        async with asyncio.timeout(60):
            for container in await runtime.list_containers():
                with contextlib.suppress(Exception):
                    await runtime.stop_container(container.id, 0)
            sandboxes = await runtime.list_sandboxes()
            for sandbox in sandboxes:
                with contextlib.suppress(Exception):
                    await runtime.stop_sandbox(sandbox.id)
                    await runtime.remove_sandbox(sandbox.id)
            return len(sandboxes)
    except Exception:  # noqa: BLE001 - a dead containerd has no pods to stop; the shims are killed next
        return 0
    finally:
        await runtime.close()


def _proc_entries() -> list[tuple[int, list[bytes], int]]:
    """(pid, argv, parent pid) of every process, read once."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                out.append((int(entry.name), argv, ppid))
    return out


def kill_leftovers(node: NodeNet) -> int:
    """SIGKILL the containerd shims serving this node's containerd and the containers they started."""
    procs = _proc_entries()
    address = str(node.socket).encode()
    shims = {pid for pid, argv, _ in procs if argv and b"containerd-shim" in argv[0] and address in argv}
    victims = shims | {pid for pid, _, ppid in procs if ppid in shims}
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(victims)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    return sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True)


async def unmount_under(path: Path) -> None:
    """Lazily unmount what containers or volumes left mounted below `path`, deepest first."""
    for target in _mounts_under(path):
        await run("umount", "-l", target, check=False)


# -- API objects the nodes need ---------------------------------------------------------------------


async def _api(http: httpx.AsyncClient, method: str, url: str, body: Any = None) -> httpx.Response:
    return await http.request(method, url, content=None if body is None else orjson.dumps(body),
                              headers={"Content-Type": "application/json"}, timeout=10.0)


async def delete_node(state: State, http: httpx.AsyncClient, name: str) -> None:
    await _api(http, "DELETE", f"{state.server}/api/v1/nodes/{name}")


async def ensure_kube_dns(state: State, http: httpx.AsyncClient) -> None:
    """`kube-system/kube-dns` pointing at the DNS server `up` runs on the bridge."""
    await write_kube_dns(http, state.server, bridge_ip(state), state.settings.dns_port)


async def write_kube_dns(http: httpx.AsyncClient, server: str, ip: str, port: int,
                         cluster_ip: str = CLUSTER_DNS_IP) -> None:
    """`kube-system/kube-dns` at `cluster_ip` with a slice pointing at the DNS server at `ip`:`port`.

    No selector: the server is a host process, not a pod, so the slice is ours (managed-by pyk8s-up);
    kube-proxy in every node sends port 53 of the ClusterIP to it over the node segment.
    """
    namespace, name = DNS_SERVICE
    base = f"{server}/api/v1/namespaces/{namespace}/services"
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS",
                                "kubernetes.io/cluster-service": "true"}},
        "spec": {"clusterIP": cluster_ip, "type": "ClusterIP",
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port}]},
    }
    await put_or_create(http, base, name, service, "spec")
    slice_body = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": DNS_SLICE, "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": name,
                                "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": "dns", "port": port, "protocol": "UDP"},
                  {"name": "dns-tcp", "port": port, "protocol": "TCP"}],
    }
    slices = f"{server}/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    await put_or_create(http, slices, DNS_SLICE, slice_body, "endpoints", "ports")


METRICS_SERVICE = ("kube-system", "metrics-server")
METRICS_APISERVICE = "v1beta1.metrics.k8s.io"


def metrics_server_dir(state: State) -> Path:
    """Where the metrics server keeps its self-signed serving certificate."""
    return state.root / "metrics-server"


async def ensure_metrics_server(state: State, http: httpx.AsyncClient, port: int) -> None:
    """`kube-system/metrics-server` with a slice at the host process on loopback, and the APIService that
    sends metrics.k8s.io to it, its caBundle the CA of the metrics server's own certificate (k3s registers
    its bundled metrics-server the same way, but with insecureSkipTLSVerify)."""
    namespace, name = METRICS_SERVICE
    base = f"{state.server}/api/v1/namespaces/{namespace}/services"
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "labels": {"k8s-app": "metrics-server"}},
               "spec": {"type": "ClusterIP", "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                                        "targetPort": port}]}}
    await put_or_create(http, base, name, service, "spec")
    slice_name = f"{name}-pyk8s"
    slice_body = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": slice_name, "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": name,
                                "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    slices = f"{state.server}/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    await put_or_create(http, slices, slice_name, slice_body, "endpoints", "ports")
    chain = (metrics_server_dir(state) / "apiserver.crt").read_bytes()
    ca = chain[chain.index(b"-----END CERTIFICATE-----") + len(b"-----END CERTIFICATE-----"):].strip() + b"\n"
    apiservice = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                  "metadata": {"name": METRICS_APISERVICE, "labels": {"k8s-app": "metrics-server"}},
                  "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                           "versionPriority": 100, "caBundle": base64.b64encode(ca).decode(),
                           "service": {"namespace": namespace, "name": name, "port": 443}}}
    await put_or_create(http, f"{state.server}/apis/apiregistration.k8s.io/v1/apiservices", METRICS_APISERVICE,
                         apiservice, "spec")
    # What metrics-server's manifest ships: reading metrics, aggregated into view, edit and admin.
    reader = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": "system:aggregated-metrics-reader", "labels": {
                  "rbac.authorization.k8s.io/aggregate-to-view": "true",
                  "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                  "rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
              "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"],
                         "verbs": ["get", "list", "watch"]}]}
    await put_or_create(http, f"{state.server}/apis/rbac.authorization.k8s.io/v1/clusterroles",
                         "system:aggregated-metrics-reader", reader, "rules")


async def ensure_default_storage_class(state: State, http: httpx.AsyncClient) -> None:
    """The default StorageClass `standard`, as kind ships one: claims without a class get node-local
    volumes from pyk8s-hostpath-provisioner, in directories under the state dir, next to the cluster's
    other data. Only created when missing, so an admin's changes to it stay."""
    body = {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": STORAGE_PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
        "parameters": {"path": str(storage_dir(state))},
    }
    await put_or_create(http, f"{state.server}/apis/storage.k8s.io/v1/storageclasses", STORAGE_CLASS, body)


async def ensure_default_classes(state: State, http: httpx.AsyncClient) -> None:
    """The default StorageClass and IngressClass, both only created when missing."""
    await ensure_default_storage_class(state, http)
    await ensure_default_ingress_class(state, http)


async def ensure_default_ingress_class(state: State, http: httpx.AsyncClient) -> None:
    """The default IngressClass `pyk8s`, as k3s ships `traefik`: DefaultIngressClass admission gives it to
    every Ingress created without a class."""
    body = {
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": INGRESS_CLASS, "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": INGRESS_CONTROLLER},
    }
    await put_or_create(http, f"{state.server}/apis/networking.k8s.io/v1/ingressclasses", INGRESS_CLASS, body)


def storage_dir(state: State) -> Path:
    """Where the `standard` class's volumes live on every node (nodes share the host's filesystem)."""
    return state.root / "storage"


async def put_or_create(http: httpx.AsyncClient, base: str, name: str, body: dict[str, Any],
                         *compare: str) -> None:
    current = await _api(http, "GET", f"{base}/{name}")
    if current.status_code == 404:
        response = await _api(http, "POST", base, body)
    elif current.status_code == 200:
        old = current.json()
        if all(_subset(body[k], old.get(k)) for k in compare):
            return
        merged = {**old, **{k: {**old[k], **body[k]} if isinstance(old.get(k), dict) else body[k]
                            for k in compare}}
        response = await _api(http, "PUT", f"{base}/{name}", merged)
    else:
        response = current
    if response.status_code >= 300:
        raise NetworkError(f"writing {base}/{name}: {response.status_code} {response.text}")


def _subset(want: Any, have: Any) -> bool:
    """True when every field we set is already there (the apiserver adds defaults of its own)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_subset, want, have))
    return bool(want == have)
